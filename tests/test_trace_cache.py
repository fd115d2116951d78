"""The trace cache is never wrong: every edit a fresh trace would see misses it (issue 23, findings 1-3).

Each case builds a model, extracts it, edits something the model's behaviour hangs on outside its own
`forward` or its own attributes, and extracts again: the cached call must equal a fresh trace, and the
edit must have changed the result (else the case proves nothing).
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import types

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import bwd_widgets as bw

HELPER_GAIN = 1.0
METHOD_GAIN = 1.0
COMPREHENSION_GAIN = 1.0


def _scaled(x):
    return x * HELPER_GAIN


class _Settings:
    def __init__(self):
        self.scale = 2.0


SETTINGS = _Settings()


def _result(extraction) -> tuple:
    gradients = {k: v.clone() for k, v in extraction.autograd_gradients.items()}
    return extraction.forward_code, extraction.backward_code, gradients


def _assert_same(cached, fresh) -> None:
    assert cached[0] == fresh[0] and cached[1] == fresh[1]
    assert cached[2].keys() == fresh[2].keys()
    for key, value in fresh[2].items():
        torch.testing.assert_close(cached[2][key], value)


def _differs(before, after) -> bool:
    if before[:2] != after[:2] or before[2].keys() != after[2].keys():
        return True
    return any(not torch.equal(before[2][k], v) for k, v in after[2].items())


class _Lin(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)


def _helper_global():
    class M(_Lin):
        def forward(self, x):
            return _scaled(self.lin(x)).sin()

    def edit(model, monkeypatch):
        monkeypatch.setattr(sys.modules[__name__], "HELPER_GAIN", 3.0)

    return M(), edit


def _method_global():
    class M(_Lin):
        def scaled(self, x):
            return x * METHOD_GAIN

        def forward(self, x):
            return self.scaled(self.lin(x)).sin()

    def edit(model, monkeypatch):
        monkeypatch.setattr(sys.modules[__name__], "METHOD_GAIN", 3.0)

    return M(), edit


def _comprehension_global():
    class M(_Lin):
        def forward(self, x):
            return sum([t * COMPREHENSION_GAIN for t in (self.lin(x), x)]).sin()

    def edit(model, monkeypatch):
        monkeypatch.setattr(sys.modules[__name__], "COMPREHENSION_GAIN", 3.0)

    return M(), edit


def _closure_cell():
    def gain(k):
        def apply(x):
            return x * k

        return apply

    class M(_Lin):
        def __init__(self):
            super().__init__()
            self.apply_gain = gain(2.0)

        def forward(self, x):
            return self.apply_gain(self.lin(x)).sin()

    def edit(model, monkeypatch):
        model.apply_gain.__closure__[0].cell_contents = 3.0

    return M(), edit


def _class_forward_patched():
    class M(_Lin):
        def forward(self, x):
            return self.lin(x).sin()

    def edit(model, monkeypatch):
        monkeypatch.setattr(type(model), "forward", lambda self, x: self.lin(x).cos())

    return M(), edit


def _library_forward_patched():
    class M(_Lin):
        def forward(self, x):
            return self.lin(x).sin()

    def edit(model, monkeypatch):
        monkeypatch.setattr(nn.Linear, "forward", lambda self, x: F.linear(x, self.weight, self.bias).tanh())

    return M(), edit


def _library_function_patched():
    class M(_Lin):
        def forward(self, x):
            return F.gelu(self.lin(x))

    def edit(model, monkeypatch):
        monkeypatch.setattr(F, "gelu", lambda x, approximate="none": x.sigmoid() * x)

    return M(), edit


def _attention_backend():
    class M(_Lin):
        def forward(self, x):
            q = self.lin(x).view(1, 1, 3, 4)
            return F.scaled_dot_product_attention(q, q, q)

    def edit(model, monkeypatch):
        torch.backends.cuda.enable_flash_sdp(not torch.backends.cuda.flash_sdp_enabled())  # the fixture restores it

    return M(), edit


@dataclasses.dataclass
class _Config:
    scale: float = 2.0


def _config_dataclass():
    class M(_Lin):
        def __init__(self):
            super().__init__()
            self.config = _Config()

        def forward(self, x):
            return self.lin(x) * self.config.scale

    def edit(model, monkeypatch):
        model.config.scale = 3.0

    return M(), edit


def _config_namespace():
    class M(_Lin):
        def __init__(self):
            super().__init__()
            self.config = types.SimpleNamespace(inner=types.SimpleNamespace(scale=2.0))

        def forward(self, x):
            return self.lin(x) * self.config.inner.scale

    def edit(model, monkeypatch):
        model.config.inner.scale = 3.0

    return M(), edit


def _module_level_object():
    class M(_Lin):
        def forward(self, x):
            return self.lin(x) * SETTINGS.scale

    def edit(model, monkeypatch):
        monkeypatch.setattr(SETTINGS, "scale", 3.0)

    return M(), edit


def _deep_dict():
    class M(_Lin):
        def __init__(self):
            super().__init__()
            self.table = {"a": {"b": {"c": {"d": {"scale": 2.0}}}}}

        def forward(self, x):
            return self.lin(x) * self.table["a"]["b"]["c"]["d"]["scale"]

    def edit(model, monkeypatch):
        model.table["a"]["b"]["c"]["d"]["scale"] = 3.0

    return M(), edit


def _partial_keywords():
    class M(_Lin):
        def __init__(self):
            super().__init__()
            self.act = functools.partial(F.leaky_relu, negative_slope=0.1)

        def forward(self, x):
            return self.act(self.lin(x) - 10)

    def edit(model, monkeypatch):
        model.act.keywords["negative_slope"] = 0.3

    return M(), edit


def _inherited_class_attribute():
    class Base(_Lin):
        SCALE = 2.0

    class M(Base):
        def forward(self, x):
            return self.lin(x) * self.SCALE

    def edit(model, monkeypatch):
        Base.SCALE = 3.0

    return M(), edit


def _tuple_class_attribute():
    class M(_Lin):
        DIMS: tuple = (0,)

        def forward(self, x):
            return self.lin(x).sin().sum(dim=self.DIMS)

    def edit(model, monkeypatch):
        type(model).DIMS = (1,)

    return M(), edit


def _data_edited_in_place():
    class M(_Lin):
        def forward(self, x):
            return self.lin(x).sin()

    def edit(model, monkeypatch):
        model.lin.weight.data.mul_(2)

    return M(), edit


def _data_replaced():
    class M(_Lin):
        def forward(self, x):
            return self.lin(x).sin()

    def edit(model, monkeypatch):
        model.lin.weight.data = torch.randn(4, 4)

    return M(), edit


CASES = [
    _helper_global,
    _method_global,
    _comprehension_global,
    _closure_cell,
    _class_forward_patched,
    _library_forward_patched,
    _library_function_patched,
    _attention_backend,
    _config_dataclass,
    _config_namespace,
    _module_level_object,
    _deep_dict,
    _partial_keywords,
    _inherited_class_attribute,
    _tuple_class_attribute,
    _data_edited_in_place,
    _data_replaced,
]


@pytest.fixture(autouse=True)
def _fresh_cache():
    bw.clear_trace_cache()
    flash = torch.backends.cuda.flash_sdp_enabled()
    yield
    torch.backends.cuda.enable_flash_sdp(flash)
    bw.clear_trace_cache()


@pytest.mark.parametrize("case", CASES, ids=lambda f: f.__name__[1:])
def test_an_edit_outside_forward_misses_the_cache(case, monkeypatch):
    torch.manual_seed(0)
    model, edit = case()
    x = torch.randn(3, 4)
    before = _result(bw.extract(model, x))
    edit(model, monkeypatch)
    cached = _result(bw.extract(model, x))
    fresh = _result(bw.extract(model, x, cache=False))
    assert _differs(before, fresh), "the edit changed nothing a fresh trace sees: the case proves nothing"
    _assert_same(cached, fresh)


def test_an_input_edited_through_numpy_misses_the_cache():
    torch.manual_seed(0)
    model, x = nn.Linear(4, 4), torch.randn(3, 4)
    before = _result(bw.extract(model, x))
    x.numpy()[:] = 2.0
    cached, fresh = _result(bw.extract(model, x)), _result(bw.extract(model, x, cache=False))
    assert _differs(before, fresh)
    _assert_same(cached, fresh)


def test_an_unchanged_model_still_hits_the_cache():
    """Correctness first, but a repeated call on a model nobody touched is the cache's whole point."""
    torch.manual_seed(0)
    for case in CASES:
        model, _ = case()
        x = torch.randn(3, 4)
        first = bw.extract(model, x)
        again = bw.extract(model, x)
        assert again.partitions[0].trace is first.partitions[0].trace, case.__name__
