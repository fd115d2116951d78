"""What the torch.fx route refuses (`fx_route.refusals()`, and the model's `warnings.warn`) acts only on the trace:
in its thread, while it runs. Each refusal sends the capture to Dynamo even where the model's own code catches
it; the same function called by another thread during the trace, or through a reference kept past it, is the
function it was; and after any trace every patched owner holds exactly the entries it held before.

The cases are generated from the lists the route itself patches on the torch installed (`refusals()`,
`trace_patches`): a refusal added there without a way to call it here fails `test_every_refusal_has_a_call_here`.
"""

from __future__ import annotations

import io
import logging
import threading
import warnings
from typing import TYPE_CHECKING

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import bwd_widgets as bw
from bwd_widgets.core.compat import dynamo_config
from bwd_widgets.core.errors import NotForFx
from bwd_widgets.core.fx_route import (
    DYNAMO_DISABLED,
    RECURRENT,
    RECURRENT_LAYERS,
    fx_trace,
    refusals,
    trace_patched,
    trace_patches,
)
from bwd_widgets.core.logger_calls import LoggerCalls, logger_methods
from bwd_widgets.core.trace_window import TraceWindow

if TYPE_CHECKING:
    from collections.abc import Callable

SINK = io.StringIO()
checkpoint_body = checkpoint.__wrapped__  # type: ignore[attr-defined]  # torch._disable_dynamo's functools.wraps


def _with_saved_tensor_hooks(x: torch.Tensor) -> object:
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        return x.sin()


@torch._dynamo.disable
def _run_eagerly(x: torch.Tensor) -> torch.Tensor:
    """What torch.compile runs eagerly between two graphs (`torch.compiler.disable` is the same)."""
    return torch.sin(x) * 2


CALLS: dict[str, Callable[[torch.Tensor], object]] = {
    "torch.utils.checkpoint.checkpoint": lambda x: torch.utils.checkpoint.checkpoint(torch.sin, x, use_reentrant=False),
    # code that reaches checkpoint's own body, not through the wrapper torch puts on it (torch._disable_dynamo,
    # refused as set_eval_frame below), reaches the route's patches of what it calls: torch 2.13's generator and
    # 2.14's on (compat.checkpoint_generator), and the reentrant Function
    "torch.utils.checkpoint._checkpoint_without_reentrant_generator": lambda x: checkpoint_body(
        torch.sin, x, use_reentrant=False
    ),
    "torch.utils.checkpoint._checkpoint_without_reentrant_generator_impl": lambda x: checkpoint_body(
        torch.sin, x, use_reentrant=False
    ),
    "torch.utils.checkpoint.CheckpointFunction.apply": lambda x: checkpoint_body(torch.sin, x, use_reentrant=True),
    "torch.autograd.graph.saved_tensors_hooks.__enter__": _with_saved_tensor_hooks,
    "torch._dynamo.graph_break": lambda x: torch._dynamo.graph_break(),
    "torch.compiler.is_compiling": lambda x: torch.compiler.is_compiling(),
    "torch.compiler.is_dynamo_compiling": lambda x: torch.compiler.is_dynamo_compiling(),
    "builtins.print": lambda x: print("between the layers", file=SINK),
    "torch._dynamo.eval_frame.set_eval_frame": _run_eagerly,
    "warnings.warn": lambda x: warnings.warn("between the layers", stacklevel=1),
}
"""Each refused function as a model's forward calls it (on a hidden value `x`)."""


def _owner_key(owner: object, name: str) -> str:
    """`torch.utils.checkpoint.checkpoint` for a module's function, `...CheckpointFunction.apply` for a class's."""
    if isinstance(owner, type):
        return f"{owner.__module__}.{owner.__qualname__}.{name}"
    return f"{getattr(owner, '__name__', owner)}.{name}"


REFUSED = {_owner_key(owner, name): why for owner, name, why, _ in refusals()} | {
    "warnings.warn": "a warnings.warn call",
    "torch._dynamo.eval_frame.set_eval_frame": DYNAMO_DISABLED,
}
"""Why each patched function refuses the trace: `refusals()`, and the two the route builds its own way."""


def test_every_refusal_has_a_call_here() -> None:
    """Every function the trace patches, but the logger's methods (which note and do not refuse), is called here."""
    patched = {_owner_key(owner, name) for owner, name, _ in trace_patches(TraceWindow(), LoggerCalls())}
    loggers = {_owner_key(logging.Logger, name) for name in logger_methods()}
    assert patched - loggers == set(REFUSED)
    assert set(REFUSED) <= set(CALLS), set(REFUSED) - set(CALLS)


class CallsBetweenLayers(nn.Module):
    """Two layers with `CALLS[call]` between them, its failure caught by the model's own code where `caught`."""

    def __init__(self, call: str, caught: bool) -> None:
        super().__init__()
        self.call, self.caught = call, caught
        self.first, self.second = nn.Linear(8, 8), nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.tanh(self.first(x))
        if self.caught:
            try:
                CALLS[self.call](hidden)
            except Exception:  # noqa: BLE001, S110 - the model's own guard: the capture must not depend on it
                pass
        else:
            CALLS[self.call](hidden)
        return self.second(hidden).sum()


@pytest.mark.filterwarnings("ignore:between the layers")
@pytest.mark.parametrize("caught", [False, True], ids=["raised", "caught by the model"])
@pytest.mark.parametrize("call", sorted(REFUSED))
def test_a_refusal_sends_the_capture_to_dynamo_even_where_the_model_catches_it(call: str, caught: bool) -> None:
    with pytest.raises(NotForFx, match=REFUSED[call].replace("(", r"\(").replace(")", r"\)")):
        fx_trace(CallsBetweenLayers(call, caught), LoggerCalls())


@pytest.mark.filterwarnings("ignore:between the layers")
@pytest.mark.parametrize("call", sorted(REFUSED))
def test_a_refused_function_is_itself_to_another_thread_and_after_the_trace(call: str) -> None:
    """Patched for the whole process while torch.fx traces: the trace's own call is refused, another thread's
    call in the meantime and a call through a reference kept past the trace do what the function does."""
    x = torch.randn(4, 8)
    expected = CALLS[call](x)
    window = TraceWindow()
    others: list[object] = []

    def in_another_thread() -> None:
        try:
            others.append(CALLS[call](x))
        except Exception as error:  # noqa: BLE001 - the assertion below names it
            others.append(error)

    with trace_patched(trace_patches(window, LoggerCalls())):
        thread = threading.Thread(target=in_another_thread)
        thread.start()
        thread.join()
        with pytest.raises(NotForFx):
            CALLS[call](x)
        window.open = False  # the trace over, its patch is what a reference kept past it calls
        after = CALLS[call](x)
    assert window.refused == [REFUSED[call]]
    assert not isinstance(others[0], Exception), f"another thread's call failed: {others[0]!r}"
    _assert_same(others[0], expected)
    _assert_same(after, expected)


def _assert_same(got: object, expected: object) -> None:
    if isinstance(expected, torch.Tensor):
        assert isinstance(got, torch.Tensor) and torch.equal(got, expected)
    else:
        assert got == expected


class _Branches(nn.Module):
    """A branch on a tensor's value: torch.fx's trace fails on it (not a refusal), Dynamo breaks the graph."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.linear(x)
        return hidden.relu().sum() if hidden.sum() > 0 else hidden.tanh().sum()


class _Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x).relu().sum()


@pytest.mark.filterwarnings("ignore:between the layers")
@pytest.mark.parametrize("model", ["traced", "refused", "failed"])
def test_every_patched_owner_holds_what_it_held_before_after_a_capture(model: str) -> None:
    """The route's patches put back each owner's own entries, not what reading them gives: an attribute the owner
    inherits (`CheckpointFunction.apply`, `Function`'s classmethod) stays inherited."""
    models: dict[str, Callable[[], nn.Module]] = {
        "traced": _Small,
        "refused": lambda: CallsBetweenLayers("builtins.print", caught=False),
        "failed": _Branches,
    }
    owners = [(owner, name) for owner, name, _ in trace_patches(TraceWindow(), LoggerCalls())]
    missing = object()
    before = [(name in vars(owner), vars(owner).get(name, missing)) for owner, name in owners]
    bw.extract(models[model](), torch.randn(4, 8), cache=False)
    after = [(name in vars(owner), vars(owner).get(name, missing)) for owner, name in owners]
    assert after == before, [_owner_key(owner, name) for (owner, name), b, a in zip(owners, before, after) if a != b]


class _DisabledLayer(nn.Module):
    """A layer whose own `forward` is under `torch.compiler.disable`: `nn.Module.__call__` calls the wrapper."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)

    @torch.compiler.disable
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sin(self.linear(x))


@torch.compile(backend="eager")
def _compiled_inside(x: torch.Tensor) -> torch.Tensor:
    return torch.cos(x) * 3


class _Layers(nn.Module):
    def __init__(self, inner: str) -> None:
        super().__init__()
        self.inner, self.first, self.disabled = inner, nn.Linear(8, 8), _DisabledLayer()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.first(x)
        hidden = self.disabled(hidden) if self.inner == "disabled forward" else _compiled_inside(hidden)
        return hidden.sum()


def test_a_disabled_forward_is_refused_and_a_compiled_function_is_not() -> None:
    """A layer's disabled `forward` is reached through torch's `nn.Module.__call__`: still the model's code under
    `torch.compiler.disable`, refused. A `torch.compile`d function the model calls, and torch's own disabled
    functions (fx's `Tracer.trace` runs under one), turn Dynamo's frame switch too: not refused as disabled."""
    with pytest.raises(NotForFx, match=DYNAMO_DISABLED.replace("(", r"\(").replace(")", r"\)")):
        fx_trace(_Layers("disabled forward"), LoggerCalls())
    try:  # refused or not for what else it does (it asks whether torch.compile runs), never as a disabled function
        fx_trace(_Layers("compiled function"), LoggerCalls())
    except NotForFx as refused:
        assert str(refused) != DYNAMO_DISABLED


class _Recurrent(nn.Module):
    """A recurrent layer (`RECURRENT_LAYERS[layer]`) between two linear layers, its call caught or not by the model."""

    def __init__(self, layer: type[nn.Module], caught: bool) -> None:
        super().__init__()
        self.first, self.rnn, self.last, self.caught = (
            nn.Linear(8, 8),
            layer(8, 8, batch_first=True),
            nn.Linear(8, 2),
            caught,
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.first(x)
        try:
            hidden = self.rnn(hidden)[0]
        except NotForFx:
            if not self.caught:
                raise
        return self.last(hidden).sum()


RECURRENT_PLACES = ("inside", "inside, caught", "at the root", "a subclass at the root", "a method at the root")
"""Where the recurrent layer is: called by the model (which lets the refusal through, or catches it), or the model
(the layer itself, a subclass with a forward of its own, the layer's bound `forward`)."""


def _recurrent_model(layer: type[nn.Module], place: str) -> Callable:
    if place == "at the root":
        return layer(8, 8, batch_first=True)
    if place == "a subclass at the root":

        class Own(layer):  # type: ignore[misc, valid-type]
            def forward(self, x: torch.Tensor) -> object:
                return super().forward(x * 2)

        return Own(8, 8, batch_first=True)
    if place == "a method at the root":
        return layer(8, 8, batch_first=True).forward
    return _Recurrent(layer, caught=place == "inside, caught")


@pytest.mark.parametrize("place", RECURRENT_PLACES)
@pytest.mark.parametrize("layer", RECURRENT_LAYERS, ids=lambda layer: layer.__name__)
def test_a_recurrent_layer_is_refused_unless_allow_rnn(layer: type[nn.Module], place: str) -> None:
    """torch.compile leaves nn.RNN, nn.GRU and nn.LSTM out of its graphs while `allow_rnn` is unset, and traces
    them with it set: torch.fx's route refuses the layer (the model catching it or not, or the model being the
    layer) only while it is unset, and an extraction then names the setting torch.compile needs to make the graphs
    shown, as many as it makes under it (`RECURRENT_PLACES`: on 2.15 Dynamo's words for a root layer do not name
    the setting, and a subclass's own forward fails its trace without it)."""
    torch.manual_seed(0)
    model = _recurrent_model(layer, place)
    assert dynamo_config.allow_rnn is False
    if isinstance(model, nn.Module):  # a method takes Dynamo's route only
        with pytest.raises(NotForFx, match=RECURRENT):
            fx_trace(model, LoggerCalls())
        with dynamo_config.patch(allow_rnn=True):
            if isinstance(model, _Recurrent):
                fx_trace(model, LoggerCalls())
            else:  # torch.fx cannot trace the layer's own forward (it branches on its input): refused for that
                with pytest.raises(NotForFx) as refused:
                    fx_trace(model, LoggerCalls())
                assert RECURRENT not in str(refused.value), refused.value
    model, x = _recurrent_model(layer, "inside" if place == "inside, caught" else place), torch.randn(2, 3, 8)
    graphs: list[torch.fx.GraphModule] = []

    def counting(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    with dynamo_config.patch(allow_rnn=True):
        torch.compile(model, backend=counting)(x)
    torch._dynamo.reset()
    extraction = bw.extract(model, x, cache=False)  # on 2.15, Dynamo's words for a root layer do not name allow_rnn
    assert extraction.torch_compile_settings == {"allow_rnn": True}
    assert len(extraction.partitions) == len(graphs)
    assert any("allow_rnn" in note for note in extraction.notes), extraction.notes
    assert dynamo_config.allow_rnn is False
