"""After any operation the user's model, its classes and the module-level state its forward writes to hold what
they held before, and its next eager call returns what it did before (issue: a first-use cache filled during
a real-mode capture kept a torch.fx Proxy, in fake mode a FakeTensor; call counters and logs stayed changed).

The families: where the forward writes (the instance, its class, a module-level dict, a list it appends to, an
int it counts), each through both capture routes (torch.fx for a plain module, Dynamo when the forward has a
keyword-only argument torch.fx cannot take... here: a graph break), in real and fake mode, and through each
operation that runs the forward (extract, advise, sweep, rerun, measure).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import bwd_widgets as bw
from bwd_widgets.core.kinds import MODES

MODULE_CACHE: dict[int, torch.Tensor] = {}
"""A module-level cache a forward fills on first use, keyed by sequence length (as rotary tables are)."""


class InstanceCache(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)
        self._table: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._table is None:
            self._table = torch.arange(x.shape[-1], dtype=x.dtype).sin()
        return self.linear(x) * self._table


class ClassCache(nn.Module):
    table: torch.Tensor | None = None

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if type(self).table is None:
            type(self).table = torch.arange(x.shape[-1], dtype=x.dtype).cos()
        return self.linear(x) * type(self).table


class ModuleCache(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] not in MODULE_CACHE:
            MODULE_CACHE[x.shape[-1]] = torch.linspace(0, 1, x.shape[-1], dtype=x.dtype)
        return self.linear(x) * MODULE_CACHE[x.shape[-1]]


class Counting(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)
        self.calls = 0
        self.log: list[str] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        self.log.append("forward")
        return self.linear(x).relu()


class Broken(nn.Module):
    """The same caches through Dynamo: a graph break sends the forward down that route."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inner(x)
        torch._dynamo.graph_break()
        return h.tanh()


MODELS = {"instance": InstanceCache, "class": ClassCache, "module": ModuleCache, "counting": Counting}
ROUTES = {"fx": lambda m: m, "dynamo": Broken}


def _state(model: nn.Module) -> dict[str, object]:
    """What the user can see of the model and of what its forward writes to."""
    inner = model.inner if isinstance(model, Broken) else model
    return {
        "instance": {k: v for k, v in vars(inner).items() if not k.startswith("_") or k == "_table"},
        "class": ClassCache.table,
        "module": dict(MODULE_CACHE),
        "calls": getattr(inner, "calls", None),
        "log": list(getattr(inner, "log", [])),
    }


def _operations() -> dict[str, object]:
    def extract(model, x, mode):
        return bw.extract(model, x, mode=mode, cache=False)

    def advise(model, x, mode):
        return bw.advise(model, x, target=10**9, mode=mode, progress=False, measure=False, offload=False)

    def sweep(model, x, mode):
        return bw.sweep(model, x, budgets=[0.5, 1.0], mode=mode, progress=False, cache=False)

    def rerun_and_measure(model, x, mode):
        extraction = bw.extract(model, x, mode=mode, cache=False).rerun("min_cut", 0.5)
        return extraction.measure() if mode == "real" else extraction

    return {"extract": extract, "advise": advise, "sweep": sweep, "rerun_and_measure": rerun_and_measure}


OPERATIONS = _operations()


@pytest.fixture(autouse=True)
def _clean_caches():
    MODULE_CACHE.clear()
    ClassCache.table = None
    yield
    MODULE_CACHE.clear()
    ClassCache.table = None


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("route", sorted(ROUTES))
@pytest.mark.parametrize("writes", sorted(MODELS))
def test_the_model_and_what_its_forward_writes_are_left_as_they_were(writes, route, mode, operation):
    torch.manual_seed(0)
    model = ROUTES[route](MODELS[writes]())
    x = torch.randn(4, 8)
    before = _state(model)
    OPERATIONS[operation](model, x, mode)
    assert _state(model) == before
    expected = model(x)  # the user's next eager call works: no Proxy, no FakeTensor was left behind
    assert type(expected) is torch.Tensor and torch.isfinite(expected).all()


FILLED = {
    "instance": lambda model: model._table,
    "class": lambda model: ClassCache.table,
    "module": lambda model: MODULE_CACHE[8],
}
"""Where each model keeps the cache its first call fills (tokens 4 x 8)."""


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("route", sorted(ROUTES))
@pytest.mark.parametrize("writes", sorted(FILLED))
def test_a_cache_filled_before_stays_the_users(writes, route, mode):
    """A cache the user's own eager call filled is theirs: an extraction, real or fake (where a fake forward
    reads the real table: issue 44, item 2), neither fails on it, drops it nor replaces it."""
    model = ROUTES[route](MODELS[writes]())
    inner = model.inner if isinstance(model, Broken) else model
    x = torch.randn(4, 8)
    expected = model(x)
    table = FILLED[writes](inner)
    extraction = bw.extract(model, x, mode=mode, cache=False)
    assert extraction.backward_node_count > 0
    assert FILLED[writes](inner) is table and torch.equal(model(x), expected)
