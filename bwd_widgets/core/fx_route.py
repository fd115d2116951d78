"""The torch.fx route: trace an nn.Module as GraphNet's own extractor does (module paths and source lines
kept), refusing what torch.fx would silently get wrong; and a fake-mode run of such a graph.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import inspect
import sys
import warnings
from typing import TYPE_CHECKING, Any

import torch
import torch.fx
import torch.utils.checkpoint

from .compat import (
    FakeTensor,
    FakeTensorMode,
    OptimizedModule,
    _LazyGraphModule,
    checkpoint_generator,
    detect_fake_mode,
    dynamo,
    dynamo_config,
    dynamo_eval_frame,
    global_module_hooks,
    module_hooks,
)
from .errors import NotForFx
from .naming import TensorNames, is_library_file
from .trace_window import TraceWindow

if TYPE_CHECKING:
    import types
    from collections.abc import Callable, Iterator

    from .kinds import Backend
    from .logger_calls import LoggerCalls


def fake_values(gm: torch.fx.GraphModule, inputs: list) -> dict[torch.fx.Node, object]:
    """Each node's value in fake mode: shapes, requires_grad and aliasing, no compute. Nodes past one fake mode
    cannot run (`.item()` needs a value) have none: their outputs are left as they are."""
    interpreter = _FakeInterpreter(gm, detect_fake_mode(inputs) or FakeTensorMode(allow_non_fake_inputs=True))
    with contextlib.suppress(Exception), interpreter.mode:
        interpreter.run(*map(interpreter.fake, inputs))
    return interpreter.values


class _FakeInterpreter(torch.fx.Interpreter):
    def __init__(self, gm: torch.fx.GraphModule, mode: FakeTensorMode) -> None:
        super().__init__(gm)
        self.mode = mode
        self.values: dict[torch.fx.Node, object] = {}

    def fake(self, value: object) -> object:
        """The fake twin of a real tensor, one per tensor (so views of it share its fake storage)."""
        if isinstance(value, torch.Tensor) and not isinstance(value, FakeTensor):
            return self.mode.from_tensor(value)
        return value

    def run_node(self, n: torch.fx.Node) -> object:
        self.values[n] = self.fake(super().run_node(n))
        return self.values[n]


class _Tracer(torch.fx.Tracer):
    """torch.fx's tracer with source lines, refusing what it would silently get wrong."""

    def __init__(self, tied: set[int], window: TraceWindow) -> None:
        super().__init__()
        self.record_stack_traces = True
        self._modes = _modes()
        self._tied = tied
        self._window = window

    def call_module(
        self, m: torch.nn.Module, forward: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """Each submodule call of the trace; a recurrent layer Dynamo will not wrap is refused (`RECURRENT`)."""
        if isinstance(m, RECURRENT_LAYERS) and not dynamo_config.allow_rnn:
            self._window.refuse(RECURRENT)
        return super().call_module(m, forward, args, kwargs)

    def is_leaf_module(self, m: torch.nn.Module, module_qualified_name: str) -> bool:
        """A leaf holding a tied tensor is traced through: its reads of the tensor then go by the tensor's
        first name (torch.fx looks it up by identity), so AOT Autograd gets it once, with one gradient."""
        own = list(m.parameters(recurse=False)) + list(m.buffers(recurse=False))
        if any(id(t) in self._tied for t in own):
            return False
        return super().is_leaf_module(m, module_qualified_name)

    def create_proxy(self, *args: Any, **kwargs: Any) -> torch.fx.Proxy:
        if _modes() != self._modes:
            raise NotForFx("grad mode or autocast changes inside forward")
        return super().create_proxy(*args, **kwargs)


def _modes() -> tuple:
    return (torch.is_grad_enabled(), torch.is_autocast_enabled("cpu"), torch.is_autocast_enabled("cuda"))


def fx_route_possible(
    model: object, args: list, keywords: bool, output: object, capture_scalars: bool, backend: Backend
) -> bool:
    """Whether a capture may take the torch.fx route: aot_eager only (Inductor's pre-grad passes run on Dynamo's
    graph), positional inputs, no output chosen, `.item()` kept in the graph, and a module torch.fx keeps the
    meaning of (`fx_eligible`). The capture's routes and the trace cache's guard check read this one rule."""
    plain = backend == "aot_eager" and not keywords and output is None and capture_scalars
    return plain and fx_eligible(model, args)


def fx_eligible(model: object, inputs: list) -> bool:
    """torch.fx keeps the meaning of plain modules over tensors and numbers: no hooks, no compiled parts,
    no *args, no forward patched onto the instance."""
    if not isinstance(model, torch.nn.Module) or not inputs or "forward" in vars(model):
        return False  # torch.fx traces the class's forward, not one patched onto the instance
    if not all(isinstance(v, (torch.Tensor, int, float)) for v in inputs):
        return False
    try:
        parameters = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        return False
    if len(parameters) != len(inputs) or any(
        p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters
    ):
        return False
    if global_module_hooks():
        return False
    for module in model.modules():
        if isinstance(module, OptimizedModule):
            return False
        if module_hooks(module):
            return False
    return True


DYNAMO_DISABLED = "a function torch.compile does not trace (torch._dynamo.disable)"

RECURRENT = "an nn.RNN, nn.GRU or nn.LSTM layer, which torch.compile runs eagerly unless allow_rnn is set"
RECURRENT_LAYERS = (torch.nn.RNN, torch.nn.GRU, torch.nn.LSTM)
"""The layers Dynamo refuses to wrap while `torch._dynamo.config.allow_rnn` is unset (its builder's check, 2.13.0 to
2.15.0), breaking the graph around them: torch.fx would trace them into the graph. Refused here, the capture goes
to Dynamo, whose own words then name the setting (`extraction/extract.py` `_SWITCHES`: captured with it, and a note
saying so), so what is shown is what `torch.compile` makes under the settings the extraction names."""

ASKS_WHETHER_COMPILING = "code that asks whether torch.compile runs (torch.compiler.is_compiling())"
"""Why a model that asks is traced by Dynamo: torch.compile answers True there, torch.fx would answer False, and
model code takes another path on the answer (transformers' `is_torchdynamo_compiling`, torch's region budgets)."""


def trace_patches(window: TraceWindow, logger_calls: LoggerCalls) -> list[tuple[object, str, Callable]]:
    """What `fx_trace` replaces, process-wide, while torch.fx traces (`window`): each a refusal of what torch.fx
    would get wrong (`refusals`), and the logger's methods, which note in `logger_calls` where torch.compile would
    break the graph."""
    return [
        (owner, name, window.refusing(what, getattr(owner, name), models_frame=models_frame))
        for owner, name, what, models_frame in refusals()
    ] + [_warn_refused(window), _disabled_call_refused(window), *logger_calls.fx_patches(window)]


def refusals() -> list[tuple[object, str, str, int | None]]:
    """What torch.fx would get wrong, as (owner, name, why, where the model's own call must be for it to count:
    `TraceWindow.refusing`'s `models_frame`): torch's features it cannot trace (reached however they are called: an
    imported name, FSDP's wrapper...), the question whose answer it would get wrong, and the calls torch.compile
    breaks the graph at (Dynamo cannot trace them, 2.13.0 to 2.15.0) that torch.fx would trace straight past."""
    return [
        (torch.utils.checkpoint, "checkpoint", "activation checkpointing", None),
        (torch.utils.checkpoint, checkpoint_generator(), "activation checkpointing", None),
        (torch.utils.checkpoint.CheckpointFunction, "apply", "activation checkpointing", None),
        (torch.autograd.graph.saved_tensors_hooks, "__enter__", "saved-tensor hooks", None),
        (dynamo, "graph_break", "an explicit graph break", None),
        # torch's other spellings (torch._dynamo.is_compiling, torch._utils.is_compiling) call these two
        (torch.compiler, "is_compiling", ASKS_WHETHER_COMPILING, None),
        (torch.compiler, "is_dynamo_compiling", ASKS_WHETHER_COMPILING, None),
        (builtins, "print", "a print call", 0),
    ]


def _warn_refused(window: TraceWindow) -> tuple[object, str, Callable]:
    """`warnings.warn`, refused where the model's code calls it in `window` (as `refusals()`'s print), and
    otherwise the function it was: a warning still names the line that called it, not this module's."""
    original = warnings.warn

    @functools.wraps(original)
    def refused_warn(
        message: Any, category: Any = None, stacklevel: int = 1, source: Any = None, **kwargs: Any
    ) -> None:
        if window.caller(sys._getframe(1)) == "model":  # noqa: SLF001 - whose code made the call
            window.refuse("a warnings.warn call")
        original(message, category, max(stacklevel, 1) + 1, source, **kwargs)

    return (warnings, "warn", refused_warn)


def _disabled_call_refused(window: TraceWindow) -> tuple[object, str, Callable]:
    """Dynamo's `set_eval_frame`, refused in `window` where the wrapper `torch._dynamo.disable` (or
    `torch.compiler.disable`) made around a function of the model's code calls it, as that wrapper does first
    (2.13.0 to 2.15.0): torch.compile runs such a function eagerly between two graphs, where torch.fx would trace into
    it. Whoever called the function (the model, `nn.Module.__call__` for a disabled `forward`, a decorator of
    Python's). torch's own disabled functions (fx's `Tracer.trace`, `checkpoint`) and a `torch.compile`d function
    pass; so does `disable(fn, recursive=False)`, whose wrapper never calls it."""
    original = vars(dynamo_eval_frame)["set_eval_frame"]  # imported there from torch._C, not re-exported

    @functools.wraps(original)
    def set_eval_frame(*args: Any, **kwargs: Any) -> Any:
        if window.tracing() and _disables_the_models_code(sys._getframe(1)):  # noqa: SLF001 - the wrapper calling
            window.refuse(DYNAMO_DISABLED)
        return original(*args, **kwargs)

    return (dynamo_eval_frame, "set_eval_frame", set_eval_frame)


def _disables_the_models_code(frame: types.FrameType) -> bool:
    """Whether `frame` is the wrapper `torch._dynamo.disable` made (its `DisableContext` is `self` there) around a
    function of the model's own code, not torch's or this package's."""
    if not isinstance(frame.f_locals.get("self"), dynamo_eval_frame.DisableContext):
        return False
    disabled = frame.f_locals.get("fn")
    if not callable(disabled):
        return False
    code = getattr(inspect.unwrap(getattr(disabled, "__func__", disabled)), "__code__", None)
    return code is not None and not is_library_file(code.co_filename)


@contextlib.contextmanager
def trace_patched(patches: list[tuple[object, str, Callable]]) -> Iterator[None]:
    """`patches` in place for the block, and after it, whatever happens, each owner's own entries as they were:
    an attribute it inherited (`CheckpointFunction.apply`, a classmethod of `Function`) is inherited again, not
    left behind as a bound method of its own."""
    missing = object()
    applied: list[tuple[object, str, object]] = []
    try:
        for owner, name, replacement in patches:
            original = vars(owner).get(name, missing)
            setattr(owner, name, replacement)
            applied.append((owner, name, original))
        yield
    finally:
        for owner, name, original in reversed(applied):
            if original is missing:
                delattr(owner, name)
            else:
                setattr(owner, name, original)


def fx_trace(module: torch.nn.Module, logger_calls: LoggerCalls) -> torch.fx.GraphModule:
    window = TraceWindow()
    tracer = _Tracer(TensorNames(module).tied(), window)
    if isinstance(module, RECURRENT_LAYERS) and not dynamo_config.allow_rnn:  # the root: no call_module for it
        raise NotForFx(RECURRENT)
    try:
        with trace_patched(trace_patches(window, logger_calls)):
            graph = tracer.trace(module)
    except NotForFx:
        raise
    except Exception as error:  # control flow on values, unpacked shapes...: Dynamo reads those
        refused = window.refused
        raise NotForFx(refused[0] if refused else f"torch.fx cannot trace it ({type(error).__name__})") from error
    finally:
        window.open = False
    if window.refused:
        raise NotForFx(window.refused[0])
    for node in graph.nodes:
        target = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
        changes_input = node.args and isinstance(node.args[0], torch.fx.Node) and node.args[0].op == "placeholder"
        if (
            node.op in ("call_method", "call_function")
            and target.endswith("_")
            and not target.startswith("_")
            and changes_input
        ):
            raise NotForFx("an input changed in place")  # eager autograd's rules for that need Dynamo
    # Lazy: AOT Autograd interprets the graph node by node, so its Python code is never needed.
    return _LazyGraphModule(tracer.root, graph, class_name=type(module).__name__)
