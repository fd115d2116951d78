"""The trace cache is never wrong: every edit a fresh trace would see misses it (issue 23, findings 1-3; issue 44,
items 6-11).

Each case builds a model, extracts it, edits something the model's behaviour hangs on outside its own
`forward` or its own attributes, and extracts again: the cached call must equal a fresh trace, and the
edit must have changed the result (else the case proves nothing). Since issue 44 the reuse decision is
Dynamo's guards for the call plus what they do not cover (`extraction/cache.py`); the families at the end
hold the kinds of edits a hand-made fingerprint had missed.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import sys
import types

import numpy as np
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


@pytest.mark.parametrize("mode", ["real", "fake"])
def test_a_deleted_model_takes_its_kept_trace_and_memory_with_it(mode):
    """Issue 43, item 4 ("memory comes back after del"): the cache holds a model weakly, so `del model` frees the
    model, its kept trace and the real values the trace holds, while the extraction the user keeps still works."""
    import gc
    import weakref

    from bwd_widgets.examples import Transformer
    from bwd_widgets.extraction import cache

    bw.clear_trace_cache()
    torch.manual_seed(0)
    model, x = Transformer(width=32, depth=2), torch.randint(0, 64, (2, 16))
    extraction = bw.extract(model, x, mode=mode)
    assert (
        len(cache._traces) == 1
        and bw.extract(model, x, mode=mode).partitions[0].trace is extraction.partitions[0].trace
    )
    kept = weakref.ref(model)
    del model
    gc.collect()
    assert kept() is None and len(cache._traces) == 0
    assert extraction.rerun("min_cut", 0.5).saved_tensors, "the user's own extraction still partitions again"
    del extraction
    gc.collect()
    assert not [o for o in gc.get_objects() if isinstance(o, cache._Kept)], "nothing of the kept trace remains"


# Issue 44, items 6-11: the reuse decision is Dynamo's guards plus what they do not cover. Each family edits one
# kind of thing the trace reads in several ways; a rerun before the edit hits (where Dynamo gives guards).

NUMPY_TABLE = np.array([1.0, 2.0])
HELPER_OBJECT_GAIN = 2.0


def _check_family(model, edit, monkeypatch, x=None, mode="real", hits=True):
    torch.manual_seed(0)
    x = torch.randn(3, 4) if x is None else x
    first = bw.extract(model, x, mode=mode)
    again = bw.extract(model, x, mode=mode)
    assert (again.partitions[0].trace is first.partitions[0].trace) == hits, "a rerun without edits"
    before = _result(first)
    edit(model, monkeypatch)
    cached = _result(bw.extract(model, x, mode=mode))
    fresh = _result(bw.extract(model, x, mode=mode, cache=False))
    assert _differs(before, fresh), "the edit changed nothing a fresh trace sees: the case proves nothing"
    _assert_same(cached, fresh)


def _lin_sin():
    class M(_Lin):
        def forward(self, x):
            return self.lin(x).sin()

    return M()


@pytest.fixture
def _global_hooks():
    handles = []
    yield handles
    for handle in handles:
        handle.remove()


_GLOBAL_HOOKS = {
    "forward_hook": lambda: torch.nn.modules.module.register_module_forward_hook(
        lambda m, i, o: o * 2 if isinstance(m, nn.Linear) else o
    ),
    "forward_hook_with_kwargs": lambda: torch.nn.modules.module.register_module_forward_hook(
        lambda m, a, k, o: o.cos() if isinstance(m, nn.Linear) else o, with_kwargs=True
    ),
    "forward_hook_always_called": lambda: torch.nn.modules.module.register_module_forward_hook(
        lambda m, i, o: o + 1 if isinstance(m, nn.Linear) else o, always_call=True
    ),
    "forward_pre_hook": lambda: torch.nn.modules.module.register_module_forward_pre_hook(
        lambda m, i: (i[0] * 3,) if isinstance(m, nn.Linear) else None
    ),
}


@pytest.mark.parametrize("hook", _GLOBAL_HOOKS, ids=str)
def test_a_global_module_hook_registered_misses_the_cache(hook, monkeypatch, _global_hooks):
    """Item 6: Dynamo does not guard the global hook tables; the cache compares them itself."""
    _check_family(_lin_sin(), lambda model, mp: _global_hooks.append(_GLOBAL_HOOKS[hook]()), monkeypatch)


def _patched(holder, name, make):
    original = getattr(holder, name)
    return lambda model, mp: mp.setattr(holder, name, make(original))


_TORCH_FUNCTIONS = {
    "F.linear via nn.Linear": (
        lambda: nn.Linear(4, 4),
        _patched(F, "linear", lambda f: lambda x, w, b=None: f(x, w, b).tanh()),
    ),
    "F.gelu via nn.GELU": (
        lambda: nn.Sequential(nn.Linear(4, 4), nn.GELU()),
        _patched(F, "gelu", lambda f: lambda x, approximate="none": x.sigmoid() * x),
    ),
    "F.layer_norm via nn.LayerNorm": (
        lambda: nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4)),
        _patched(
            F,
            "layer_norm",
            lambda f: lambda x, shape, weight=None, bias=None, eps=1e-5: f(x, shape, weight, bias, eps) * 2,
        ),
    ),
    "torch.tanh in a forward": (
        lambda: nn.Sequential(nn.Linear(4, 4), nn.Tanh()),
        _patched(torch, "tanh", lambda f: lambda x, **kw: f(x * 2, **kw)),
    ),
}


@pytest.mark.parametrize("case", _TORCH_FUNCTIONS, ids=str)
def test_a_patched_torch_function_misses_the_cache(case, monkeypatch):
    """Item 7: torch's functions reached only through torch's own modules (`nn.Linear.forward` calls
    `F.linear`): Dynamo guards them by identity."""
    make, edit = _TORCH_FUNCTIONS[case]
    _check_family(make(), edit, monkeypatch)


class _Helper:
    OFFSET = 0.0

    def scale(self, x):
        return x * HELPER_OBJECT_GAIN + self.OFFSET

    @property
    def factor(self):
        return 2.0


def _helper_model():
    class M(_Lin):
        def __init__(self):
            super().__init__()
            self.helper = _Helper()

        def forward(self, x):
            return self.helper.scale(self.lin(x)).sin() * self.helper.factor

    return M()


_HELPER_EDITS = {
    "global read by its method": lambda model, mp: mp.setattr(sys.modules[__name__], "HELPER_OBJECT_GAIN", 3.0),
    "method replaced on its class": lambda model, mp: mp.setattr(_Helper, "scale", lambda self, x: x.cos()),
    "class attribute changed": lambda model, mp: mp.setattr(_Helper, "OFFSET", 1.0),
    "property replaced on its class": lambda model, mp: mp.setattr(_Helper, "factor", property(lambda self: 5.0)),
    "method set on the instance": lambda model, mp: mp.setattr(model.helper, "scale", lambda x: x.cos(), raising=False),
}


@pytest.mark.parametrize("edit", _HELPER_EDITS, ids=str)
def test_an_edit_to_a_plain_helper_object_misses_the_cache(edit, monkeypatch):
    """Item 8: a method replaced on a plain class passes Dynamo's guards (torch.compile reuses its graph
    then); the cache compares the members of every class the guards look at."""
    _check_family(_helper_model(), _HELPER_EDITS[edit], monkeypatch)


class _NumpyBranch(_Lin):
    def forward(self, x):
        y = self.lin(x)
        return y.sin() if NUMPY_TABLE[0] > 0 else y.cos()


class _NumpyScale(_Lin):
    def forward(self, x):
        return self.lin(x) * torch.from_numpy(NUMPY_TABLE).float().sum()


class _NumpyAttribute(_Lin):
    def __init__(self):
        super().__init__()
        self.table = np.array([1.0, 2.0])

    def forward(self, x):
        return self.lin(x).sin() if self.table[1] > 1 else self.lin(x).cos()


@pytest.mark.parametrize(
    ("model", "mode", "hits"),
    [
        (_NumpyBranch, "real", False),
        (_NumpyBranch, "fake", False),
        (_NumpyScale, "real", True),
        (_NumpyAttribute, "real", False),
    ],
    ids=["branch, real", "branch, fake", "values in the graph, real", "module attribute branch, real"],
)
def test_a_numpy_array_edited_in_place_misses_the_cache(model, mode, hits, monkeypatch):
    """Item 9: forward branching on a numpy array gives Dynamo no graph without a break, so no guards: not
    kept. An array whose values enter the graph is one of its tensors: its bytes are compared (real mode)."""
    saved = NUMPY_TABLE.copy()

    def edit(m, mp):
        (m.table if isinstance(m, _NumpyAttribute) else NUMPY_TABLE)[:] = -5.0

    try:
        _check_family(model(), edit, monkeypatch, mode=mode, hits=hits)
    finally:
        NUMPY_TABLE[:] = saved


_DEEP_READS = {
    "attribute chain": "return self.lin(x) * {pkg}.sub.subsub.settings.FLAG",
    "helper function in that module": "return {pkg}.sub.subsub.settings.scaled(self.lin(x))",
    "object in that module": "return self.lin(x) * {pkg}.sub.subsub.settings.CONFIG.flag",
    "branch on the flag": "return self.lin(x).sin() if {pkg}.sub.subsub.settings.FLAG > 2 else self.lin(x).cos()",
}


@pytest.mark.parametrize("read", _DEEP_READS, ids=str)
def test_a_flag_four_modules_deep_misses_the_cache(read, tmp_path, monkeypatch):
    """Item 10: `pkg.sub.subsub.settings.FLAG`, in a package made for the test, read four ways."""
    pkg = f"bw_deep_{abs(hash(read)) % 10**8}"
    inner = tmp_path / pkg / "sub" / "subsub"
    inner.mkdir(parents=True)
    for folder in (tmp_path / pkg, tmp_path / pkg / "sub", inner):
        (folder / "__init__.py").write_text("")
    (inner / "settings.py").write_text(
        "import types\nFLAG = 2.0\nCONFIG = types.SimpleNamespace(flag=2.0)\n\n\ndef scaled(x):\n    return x * FLAG\n"
    )
    model_file = tmp_path / f"{pkg}_model.py"
    body = _DEEP_READS[read].format(pkg=pkg)
    model_file.write_text(
        f"import torch\nimport {pkg}.sub.subsub.settings\n\n\nclass M(torch.nn.Module):\n"
        f"    def __init__(self):\n        super().__init__()\n        self.lin = torch.nn.Linear(4, 4)\n\n"
        f"    def forward(self, x):\n        {body}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        model = importlib.import_module(f"{pkg}_model").M()
        settings = importlib.import_module(f"{pkg}.sub.subsub.settings")

        def edit(m, mp):
            settings.FLAG = 3.0
            settings.CONFIG.flag = 3.0

        _check_family(model, edit, monkeypatch)
    finally:
        for name in [n for n in sys.modules if n.startswith(pkg)]:
            del sys.modules[name]


def _hooked(register):
    def edit(model, mp):
        register(model)

    return edit


_TENSOR_HOOKS = {
    "weight.register_hook": _hooked(lambda m: m.lin.weight.register_hook(lambda g: g * 2)),
    "bias.register_hook": _hooked(lambda m: m.lin.bias.register_hook(lambda g: g + 1)),
    "post-accumulate hook": _hooked(
        lambda m: m.lin.weight.register_post_accumulate_grad_hook(lambda p: p.grad.mul_(3))
    ),
    "hook on a nested block's parameter": _hooked(lambda m: m.lin.weight.register_hook(lambda g: -g)),
}


@pytest.mark.parametrize("hook", _TENSOR_HOOKS, ids=str)
def test_a_tensor_hook_on_a_parameter_misses_the_cache(hook):
    """Item 11: Dynamo does not guard tensor hooks, which change the real gradients: each tensor the graph
    reads is compared with its hooks."""
    model = nn.Sequential(_lin_sin()) if "nested" in hook else _lin_sin()
    target = model[0] if "nested" in hook else model
    _check_family(model, lambda m, mp: _TENSOR_HOOKS[hook](target, mp), None)


class _TracerSwitch(_Lin):
    def forward(self, x):
        if torch.compiler.is_compiling():
            return self.lin(x).sin() * HELPER_GAIN
        return self.lin(x)


def test_the_fx_route_is_not_kept_where_code_asks_which_tracer_runs(monkeypatch):
    """Code that asks which tracer runs is captured on torch.compile's path (tests/test_torch_partition.py holds
    the partition), and its trace is not kept (the guard capture does not speak for code that asks): a rerun
    traces again, and an edit on the compiled path is seen."""
    edit = lambda model, mp: mp.setattr(sys.modules[__name__], "HELPER_GAIN", 3.0)  # noqa: E731
    _check_family(_TracerSwitch(), edit, monkeypatch, hits=False)


class _Recording(nn.Module):
    def __init__(self, log):
        super().__init__()
        self.lin, self.bn, self.log = nn.Linear(4, 4), nn.BatchNorm1d(4), log

    def forward(self, x):
        self.log.append("ran")
        self.seen = getattr(self, "seen", 0) + 1
        return self.bn(self.lin(x)).sin()


@pytest.mark.parametrize("stance", ["default", "force_eager", "eager_then_compile"])
def test_the_guard_capture_runs_nothing_of_the_model(stance):
    """Dynamo traces the call and its graph raises before computing: no side effect of the forward, no batch
    norm statistic, no attribute written. Where torch.compile would run frames eagerly, there is no guard
    capture at all (and so nothing kept)."""
    from bwd_widgets.extraction import cache

    log = []
    model, x = _Recording(log), torch.randn(3, 4)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    key = cache.trace_key(model, ((x,), {}, None), {"x": True}, "real", True)
    with torch.compiler.set_stance(stance):
        guarded = cache.guard_capture(key)
    assert (guarded is not None) == (stance == "default")
    assert log == [] and "seen" not in vars(model)
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[name]), name
    if guarded is not None:
        assert cache._still_holds(guarded, key)
        model.lin.weight.register_hook(lambda g: g)
        assert not cache._still_holds(guarded, key)
        assert log == []
