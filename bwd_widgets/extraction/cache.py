"""The trace cache: an nn.Module extracted again reuses its kept joint graph only when torch.compile would
reuse a compiled graph for the same call.

Three rounds of a hand-made fingerprint each missed something a trace reads (a global hook, a patched
`F.linear`, a method replaced on a helper's class, a flag four modules deep). So the reuse decision is
torch's own: before a trace, a *guard capture* has Dynamo trace the same call whole (`fullgraph`), on the
state the trace is about to see, and keeps the guards Dynamo builds for it (every global, attribute,
closure cell, module hook, dict and torch function the call read); nothing of the model runs, since the
graph Dynamo compiles raises before it computes anything. A later call reuses the trace when those guards
pass on it, as torch.compile decides to reuse a compiled graph, and when what guards do not cover is
unchanged: each tensor the graph reads (version, storage, hooks such as `p.register_hook`, and in real mode
its bytes), the global module hook tables, the classes of guarded objects (a method replaced on a plain
class), torch settings the AOT stage reads, and the random generator's state when the graph draws random
numbers. Where Dynamo gives no guards (a graph break, a call it cannot trace) or they may not speak for
the trace (the torch.fx route on code that asks which tracer runs), the trace is not kept: a stale graph
is worse than a second trace.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import functools
import hashlib
import types
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch.nn.modules import module as module_tables

from ..core.analysis import random_ops
from ..core.capture import torch_failure_logs_quiet
from ..core.compat import (
    TracingContext,
    dynamo,
    dynamo_backends,
    dynamo_config,
    dynamo_frames,
    functorch_config,
    graph_text_skipped_unless_logged,
    pytree,
    tensor_version,
)
from ..core.fx_route import fx_route_possible
from ..core.interrupts import interrupts_held
from ..core.kinds import DEFAULT_BACKEND
from ..core.logger_calls import skipped_in_a_capture
from ..core.trace import TORCH_WORK
from .result import BackwardExtraction

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ..core.kinds import Backend, Mode
    from ..core.trace import Partition

TRACE_CACHE_SIZE = 2


@dataclasses.dataclass
class Guarded:
    """Dynamo's guards for one call, and the state of what they do not cover, taken before its trace."""

    compiled: Callable[..., object]
    """The guard capture's compiled entry: calling it runs Dynamo's own guard check, then hands the graph's
    tensors to `_StopBeforeGraph` instead of computing."""
    guards: Any
    """The guard manager of the entry's one cache entry (`GuardManagerWrapper`)."""
    tensors: tuple
    """`_tensor_state` of each tensor the graph reads, in the graph's order."""
    outside: tuple
    """`_outside_guards()` when taken."""
    classes: tuple[type, ...]
    """The classes of every value the guards look at; `_class_members` of them when taken is `members`."""
    members: tuple


@dataclasses.dataclass
class TraceKey:
    """One call to extract: where its trace is kept, and what the guard capture and the check need."""

    slot: tuple
    """Model identity and the call's settings: a kept trace is looked up here, then checked."""
    model: torch.nn.Module
    args: tuple
    kwargs: dict
    real: bool
    capture_scalars: bool
    fx_possible: bool
    """torch.fx may capture this call instead of Dynamo (`_capture_by_route` tries it first)."""
    guarded: Guarded | None = None
    """Set by `kept_extraction` on a miss: the guards a trace made now is kept with."""


@dataclasses.dataclass
class _Kept:
    """A trace kept for the next call whose guards pass."""

    extraction: BackwardExtraction
    rng_digest: str | None
    """Set when the graph draws random numbers: a hit also needs the same generator state."""
    guarded: Guarded
    model: weakref.ref
    """The model, weakly: a model the user deletes takes its kept trace with it (`_forget`), which also frees
    the slot its id names before another object can take that id."""
    inputs: tuple


_traces: OrderedDict[tuple, _Kept] = OrderedDict()


def trace_key(
    model: object,
    example_inputs: tuple,
    decided: dict[str, bool],
    mode: Mode,
    capture_scalars: bool,
    from_loss: dict[str, bool] | None = None,
    backend: Backend = DEFAULT_BACKEND,
) -> TraceKey | None:
    """Where a call's trace is kept; None for what is never kept. `example_inputs` is (positional inputs,
    keyword inputs, output choice); `decided`, which tensors get a gradient, and `from_loss`, the training rule's
    decision where the capture may switch to it (`extract._Call.requires_grad_from_loss`): the default and
    `requires_grad="floating"` decide alike before a capture, not after. Only nn.Modules are kept: a plain
    function's guard capture would see the function, not a model the user goes on editing."""
    if not isinstance(model, torch.nn.Module):
        return None
    inputs, keywords, output = example_inputs
    args, kwargs = tuple(inputs), dict(keywords)
    slot = (
        id(model),
        mode,
        tuple(sorted(decided.items())),
        None if from_loss is None else tuple(sorted(from_loss.items())),  # the rule the capture may switch to
        capture_scalars,
        output,
        str(pytree.tree_flatten(list(args))[1]),
        backend,
    )
    fx_possible = fx_route_possible(model, list(args), bool(kwargs), output, capture_scalars, backend)
    return TraceKey(slot, model, args, kwargs, mode == "real", capture_scalars, fx_possible)


def kept_extraction(key: TraceKey | None) -> BackwardExtraction | None:
    """The extraction kept for this call, if its guards and what they do not cover still hold; on a miss,
    take the guards the trace about to be made will be kept with (`key.guarded`)."""
    if key is None:
        return None
    kept = _traces.get(key.slot)
    if kept is not None and kept.rng_digest in (None, rng_digest()) and _still_holds(kept.guarded, key):
        _traces.move_to_end(key.slot)
        return kept.extraction
    key.guarded = guard_capture(key)
    return None


def keep(key: TraceKey, extraction: BackwardExtraction, digest: str, model: object, inputs: tuple) -> None:
    """Keep `extraction` for the next call whose guards pass; not kept when no guards were had for it.
    `digest` (the generator state before it ran) matters only when its graphs draw random numbers."""
    if key.guarded is None:
        return
    random = any(_draws_random_numbers(p) for p in extraction.partitions)
    held = weakref.ref(model, functools.partial(_forget, key.slot))
    _traces[key.slot] = _Kept(extraction, digest if random else None, key.guarded, held, inputs)
    while len(_traces) > TRACE_CACHE_SIZE:
        _traces.popitem(last=False)


def _forget(slot: tuple, gone: weakref.ref) -> None:
    """A kept model was collected: its trace goes (unless the slot already holds another's)."""
    kept = _traces.get(slot)
    if kept is not None and kept.model is gone:
        del _traces[slot]


def clear_trace_cache() -> None:
    """Forget kept traces (they hold the model, its inputs, Dynamo's guards and, in real mode, real values)."""
    _traces.clear()


class _StopBeforeGraph(Exception):  # noqa: N818 - not an error: how the graph hands back its inputs
    """Raised by the guard capture's graph in place of running it; carries the tensors it was given."""


class _Recompiled(Exception):  # noqa: N818
    """Dynamo tried to compile the entry again: its guards failed after all."""


_ENTRY_SOURCE = "def entry(model, args, kwargs):\n    return model(*args, **kwargs)\n"


def _fresh_entry() -> Callable[..., object]:
    """A function of its own code object and globals for each guard capture: Dynamo keeps the compiled entry
    on the code object and names it in the globals, and both go when the kept trace goes (the globals must
    not hold the function: Dynamo's cleanup registry holds them until the compiled code dies). No other
    compile counts against its recompile limit."""
    namespace: dict[str, object] = {}
    exec(compile(_ENTRY_SOURCE, "<bwd_widgets trace cache guard capture>", "exec"), namespace)  # noqa: S102
    made = namespace["entry"]
    assert isinstance(made, types.FunctionType)
    return types.FunctionType(made.__code__, {"__builtins__": builtins}, "entry")


_TRACER_SWITCHES = frozenset(
    {"is_compiling", "is_dynamo_compiling", "is_torchdynamo_compiling", "is_exporting", "is_fx_tracing"}
)
"""Names of torch's "which tracer runs" checks: code that reads one may take another path under torch.fx
than under Dynamo, so Dynamo's guards would not speak for a torch.fx trace of it."""


@dataclasses.dataclass
class _Told:
    """What the guard capture's backend saw: whether it compiled, and every name the traced code reads."""

    compiled: bool = False
    names: frozenset[str] = frozenset()


def guard_capture(key: TraceKey) -> Guarded | None:
    """Dynamo's guards for `model(*args, **kwargs)` as it stands now, or None where Dynamo gives none that
    speak for the trace: a graph break (fullgraph), a call Dynamo cannot trace, no graph, code that asks
    which tracer runs on a call torch.fx may capture, a graph input the tensor check cannot read."""
    entry, told = _fresh_entry(), _Told()

    def backend(gm: torch.fx.GraphModule, example_inputs: list) -> Callable[..., object]:
        if told.compiled:
            raise _Recompiled
        traced = TracingContext.get_traced_code() or []
        told.compiled, told.names = True, frozenset(n for code in traced for n in code.co_names)

        def graph(*tensors: object) -> object:
            raise _StopBeforeGraph(tensors)

        return graph

    compiled = torch.compile(entry, backend=backend, fullgraph=True, dynamic=False)
    if dynamo_backends.get(id(backend)) is backend:
        del dynamo_backends[id(backend)]  # kept for torch._dynamo.reset() only; would hold the guards forever
    with TORCH_WORK, interrupts_held(), graph_text_skipped_unless_logged(), torch_failure_logs_quiet():  # as a capture
        tensors = _graph_tensors(compiled, key, guarding=True)
    entries = _cache_entries(entry.__code__)
    if tensors is None or len(entries) != 1:
        return None
    if key.fx_possible and told.names & _TRACER_SWITCHES:
        return None
    try:
        states = tuple(_tensor_state(t, key.real) for t in tensors)
    except _NotKeyable:
        return None
    guards = entries[0].guard_manager
    classes = tuple(_guarded_classes(guards.root, set()))
    return Guarded(compiled, guards, states, _outside_guards(), classes, _class_members(classes))


def _still_holds(guarded: Guarded, key: TraceKey) -> bool:
    """Dynamo's guards pass on this call (its own check, as torch.compile makes it before reusing a compiled
    graph), and what they do not cover is unchanged."""
    if _outside_guards() != guarded.outside or _class_members(guarded.classes) != guarded.members:
        return False
    with _as_traced():
        if not guarded.guards.check({"model": key.model, "args": key.args, "kwargs": key.kwargs}):
            return False
    tensors = _graph_tensors(guarded.compiled, key, guarding=False)
    if tensors is None:
        return False
    try:
        return tuple(_tensor_state(t, key.real) for t in tensors) == guarded.tensors
    except _NotKeyable:
        return False


def _graph_tensors(compiled: Callable[..., object], key: TraceKey, guarding: bool) -> tuple | None:
    """Call the guard capture's entry: Dynamo checks its guards (compiling on the first call), then its
    graph raises with the tensors it reads: parameters, buffers, inputs, global tensors, numpy arrays.
    None where Dynamo fails, compiles again, compiles no graph, or would not compile at all."""
    stance = vars(dynamo.eval_frame)["_stance"]  # torch.compiler.set_stance replaces the object (2.13.0, 2.15.0)
    if dynamo_config.disable or stance.stance != "default" or stance.skip_guard_eval_unsafe:
        return None  # torch.compile turned off, or a stance that runs frames eagerly: the call would run the model
    settings = _guard_settings(key.capture_scalars) if guarding else contextlib.nullcontext()
    try:
        with _as_traced(), settings:
            compiled(key.model, key.args, key.kwargs)
    except _StopBeforeGraph as stopped:
        return tuple(stopped.args[0])
    except Exception:  # noqa: BLE001 - Dynamo refusing or failing on the call: no guards, not kept
        return None
    return None


@contextlib.contextmanager
def _as_traced() -> Iterator[None]:
    """The grad modes a capture traces under (extract's `_run`): the guard capture and every check see them
    too, so Dynamo's global-state guard compares like with like. Both are the calling thread's own."""
    with torch.inference_mode(False), torch.enable_grad():
        yield


def _guard_settings(capture_scalars: bool) -> contextlib.AbstractContextManager[None]:
    """Dynamo's guards made strict where torch.compile trades safety for speed: hooks on modules (skipped by
    default: a hook added later would go unseen), tensors in an unchanged dict, aliasing of parameters. As
    in the capture, a logger call is skipped rather than breaking the graph, and `.item()` stays in the graph
    when the capture keeps it there. Read while Dynamo builds the guards only: a check patches nothing."""
    patched: contextlib.AbstractContextManager[None] = dynamo_config.patch(
        skip_nnmodule_hook_guards=False,
        skip_tensor_guards_with_matching_dict_tags=False,
        skip_no_tensor_aliasing_guards_on_parameters=False,
        capture_scalar_outputs=capture_scalars,
        ignore_logging_functions=skipped_in_a_capture(),
    )
    return patched


def _cache_entries(code: types.CodeType) -> list:
    """Dynamo's cache entries on a code object, each with its `guard_manager` (2.13.0, 2.15.0; move to compat)."""
    entries: list = vars(dynamo_frames)["_debug_get_cache_entry_list"](code)
    return entries


class _NotKeyable(Exception):  # noqa: N818
    """A tensor whose state cannot be read cheaply and safely: the trace is not kept."""


def _tensor_state(t: object, real: bool) -> tuple:
    """What Dynamo's tensor guards leave out: hooks (`p.register_hook` changes the real gradients), and in
    real mode the storage, in-place version and bytes (`p.data.mul_(2)` and a numpy array edited in place
    bump no version counter). A fake trace reads no values: shapes and hooks are enough there."""
    if not isinstance(t, torch.Tensor):
        return ("value", type(t).__name__)
    hooks = tuple(
        (k, id(v))
        for table in (t._backward_hooks, getattr(t, "_post_accumulate_grad_hooks", None))  # noqa: SLF001
        for k, v in (table or {}).items()
    )
    meta = (tuple(t.shape), t.dtype, t.device.type, t.requires_grad, hooks)
    if not real or t.device.type == "meta":
        return meta
    if type(t) not in (torch.Tensor, torch.nn.Parameter, torch.nn.Buffer) or t.layout != torch.strided:
        raise _NotKeyable("a tensor subclass or a sparse tensor")
    if t.is_inference():
        raise _NotKeyable("an inference tensor keeps no version counter")
    data = t.detach().resolve_conj().resolve_neg().contiguous().reshape(-1).view(torch.uint8).cpu()
    digest = hashlib.sha1(data.numpy().data).hexdigest()
    return (*meta, t.stride(), t.data_ptr(), tensor_version(t), digest)


def _guarded_classes(manager: Any, found: set[type]) -> set[type]:
    """The type of every value in Dynamo's guard tree (`L['model'].helper` is a `Helper`). Dynamo guards an
    object's type but resolves its methods through the class unguarded: a method replaced on a plain class
    passes its guards (torch.compile, 2.13 to 2.15, reuses its old graph then)."""
    children = list(manager.get_child_managers())
    if hasattr(manager, "get_key_value_managers"):  # a dict's keys and values hang off their own managers
        children += [m for pair in manager.get_key_value_managers().values() for m in pair if m is not None]
    for child in children:
        cls = child.get_type_of_guarded_value()
        if isinstance(cls, type) and cls.__module__ != "builtins":
            found.add(cls)
        _guarded_classes(child, found)
    return found


def _class_members(classes: tuple[type, ...]) -> tuple:
    """What each class and its bases hold, by identity: a method or class attribute replaced shows."""
    return tuple(tuple((k, id(v)) for k, v in vars(klass).items()) for cls in classes for klass in cls.__mro__)


_GLOBAL_HOOK_TABLES = (
    "_global_forward_pre_hooks",
    "_global_forward_hooks",
    "_global_forward_hooks_with_kwargs",
    "_global_forward_hooks_always_called",
    "_global_backward_pre_hooks",
    "_global_backward_hooks",
    "_global_is_full_backward_hook",
)


def _outside_guards() -> tuple:
    """Process-wide state a trace reads that Dynamo does not guard: the global module hook tables
    (`register_module_forward_hook`), and torch settings the AOT stage reads."""
    tables = vars(module_tables)
    hooks = []
    for name in _GLOBAL_HOOK_TABLES:
        table = tables.get(name)
        hooks.append((name, tuple((k, id(v)) for k, v in table.items()) if isinstance(table, dict) else table))
    return (tuple(hooks), _torch_settings())


def _torch_settings() -> tuple:
    """torch's global settings a trace reads: autocast, default dtype, determinism, which attention and
    matmul kernels are allowed (each changes the ops recorded), and Dynamo's and AOT Autograd's configs."""
    backends = torch.backends
    return (
        torch.is_autocast_enabled("cpu"),
        torch.get_autocast_dtype("cpu"),
        torch.is_autocast_enabled("cuda"),
        torch.get_autocast_dtype("cuda"),
        torch.get_default_dtype(),
        torch.are_deterministic_algorithms_enabled(),
        torch.get_float32_matmul_precision(),
        backends.cuda.flash_sdp_enabled(),
        backends.cuda.mem_efficient_sdp_enabled(),
        backends.cuda.math_sdp_enabled(),
        backends.cuda.cudnn_sdp_enabled(),
        backends.cuda.matmul.allow_tf32,
        backends.cudnn.enabled,
        backends.cudnn.allow_tf32,
        backends.mkldnn.enabled,
        dynamo_config.get_hash(),
        functorch_config.get_hash(),
    )


def rng_digest() -> str:
    return hashlib.sha1(torch.get_rng_state().numpy().tobytes()).hexdigest()


def _draws_random_numbers(partition: Partition) -> bool:
    graph = partition.trace.joint
    return bool(random_ops(graph, {n.name for n in graph.graph.nodes}))
