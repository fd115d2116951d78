"""Which torch bwd_widgets is tested on, and the one place that imports torch's private APIs.

The range below is the single source of truth: `pyproject.toml`'s dependency must read `TORCH_REQUIREMENT`
(tests/test_torch_version.py holds them equal). Outside the range the package still imports and runs, with
one `UntestedTorchWarning` at import. Everything below the range check is a private torch API the package
needs; when a torch release moves one, this file is the only one to change (the same test keeps the rest of
the package off private names).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import re
import threading
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import torch
import torch.fx
import torch.utils.checkpoint

if TYPE_CHECKING:
    import types

_F = TypeVar("_F", bound=Callable[..., Any])
_M = TypeVar("_M", bound=torch.nn.Module)

TESTED_TORCH = ("2.13.0", "2.14.1", "2.15.0")
"""The torch releases the test suite runs on: 2.13.0 (CPU build), 2.14.1 and 2.15.0 (CUDA builds, run on a CPU)."""
TORCH_MIN = TESTED_TORCH[0]
"""The oldest release tested: the declared range's lower bound."""
TORCH_BELOW = "2.17"
"""One minor release past the newest tested: the declared range's (exclusive) upper bound."""
TORCH_REQUIREMENT = f"torch>={TORCH_MIN},<{TORCH_BELOW}"


class UntestedTorchWarning(UserWarning):
    """The installed torch is outside the range bwd_widgets is tested on."""


def _release(version: str) -> tuple[int, ...]:
    """`2.14.1+cu128` -> (2, 14, 1); a pre-release or local build counts as its release (`2.13.0a0` as 2.13.0)."""
    found = re.match(r"\d+(?:\.\d+)*", str(version).strip())
    if not found:
        raise ValueError(f"not a torch version: {version!r}")
    numbers = [int(part) for part in found.group().split(".")]
    return tuple(numbers + [0] * (3 - len(numbers)))


def torch_is_tested(version: str | None = None) -> bool:
    """Whether `version` (the installed torch by default) lies in the declared range."""
    installed = _release(torch.__version__ if version is None else version)
    return _release(TORCH_MIN) <= installed < _release(TORCH_BELOW)


def check_torch_version(version: str | None = None) -> bool:
    """Warn once, in one sentence, when torch is outside the tested range; True when it is inside."""
    version = str(torch.__version__ if version is None else version)
    if torch_is_tested(version):
        return True
    warnings.warn(
        f"bwd_widgets is tested with torch {' and '.join(TESTED_TORCH)} (it declares {TORCH_REQUIREMENT}) "
        f"but torch {version} is installed: it may work, and if an extraction fails, "
        f"install a tested torch (pip install '{TORCH_REQUIREMENT}') or report the failure with your torch version.",
        UntestedTorchWarning,
        stacklevel=3,
    )
    return False


# Private torch APIs, each with why it is needed. Importing them here (not where they are used) keeps a
# torch release that moves one from breaking the package in many places, and lets the error say which torch.
try:
    # Dynamo's settings, patched for one trace (GraphNet's validator traces under GraphNet's settings).
    # Dynamo's module (its graph_break, refused on the torch.fx route), its compiled-module class, and the
    # tables a capture cleans after itself: compiled code on code objects, and its backends.
    import torch._dynamo as dynamo
    import torch._dynamo.config as dynamo_config

    # AOT Autograd's settings: the min-cut memory budget, patched for one call.
    import torch._functorch.config as functorch_config

    # torch's partitioner module itself: its decisions (the min-cut flow graph's reasons, the knapsack below
    # budget 1) are recorded by wrapping its functions for one split (core/decisions.py).
    import torch._functorch.partitioners as torch_partitioners

    # Pytrees: the nested inputs and outputs models take and return (transformers' ModelOutput registers as one).
    import torch.utils._pytree as pytree

    # Compiled code in torch's boxed calling convention (the compilers hand it back to AOT Autograd).
    from functorch.compile import make_boxed_func
    from torch._C._dynamo import eval_frame as dynamo_frames
    from torch._dynamo import convert_frame as dynamo_convert_frame

    # Dynamo's Python frame switch: a function under `torch._dynamo.disable` turns Dynamo off with its
    # `set_eval_frame` as it starts (the torch.fx route refuses what torch.compile runs eagerly so).
    from torch._dynamo import eval_frame as dynamo_eval_frame

    # AOT Autograd as a Dynamo backend, and straight on a torch.fx module (the route GraphNet's extractor takes).
    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.eval_frame import OptimizedModule
    from torch._dynamo.eval_frame import cached_backends as dynamo_backends

    # AOT Autograd's graph compiler, whose text of the joint, forward and backward graphs for torch's logs is
    # skipped while nothing reads it (`graph_text_skipped_unless_logged`); its output kinds; AOT Autograd itself.
    from torch._functorch._aot_autograd import graph_compile as aot_graph_compile
    from torch._functorch._aot_autograd.schemas import OutputType
    from torch._functorch.aot_autograd import aot_module_simplified

    # The two partitioners torch ships (public only through the legacy `functorch.compile` re-export), and
    # min-cut's own op classification (views, random ops), to name a recomputed random op.
    from torch._functorch.partitioners import (
        OpTypes,
        default_partition,
        get_default_op_list,
        min_cut_rematerialization_partition,
    )

    # The fake mode of tensors already fake, to count FLOPs without real compute. And the tracing context
    # through which AOT Autograd hands its compilers what it learnt of the graph's outputs (`OutputType`:
    # which alias an input), as it does for Inductor: the torch.fx route reads it instead of running the
    # forward once more.
    from torch._guards import TracingContext, detect_fake_mode, tracing

    # torch's structured trace (TORCH_TRACE, tlparse): while it has a handler, the graphs' text is read.
    from torch._logging._internal import trace_log

    # The higher-order operators a partition wraps a recomputed random op in (min-cut's `functionalize_rng_ops`):
    # the FLOP count runs the op they wrap (core/flops.py), which torch's FLOP counter cannot.
    from torch._prims.rng_prims import run_and_save_rng_state, run_with_rng_state

    # Fake tensors: counted FLOPs and lifted constants of fake-mode traces.
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    # CUDA's memory history and snapshot: g.measure() on CUDA records the run in the format memory_viz reads.
    from torch.cuda.memory import _record_memory_history, _snapshot

    # A GraphModule whose Python code is generated only when read or run (cheap copies of big graphs).
    from torch.fx._lazy_graph_module import _LazyGraphModule, _use_lazy_graph_module

    # Parameters and buffers swapped for fake ones for one call, tied weights kept tied (fake mode).
    from torch.nn.utils.stateless import _reparametrize_module

    # A mode that sees every op of this thread: the storages an eager step under an offload plan's
    # saved_tensors_hooks makes, counted as they come and go (core/eager_memory.py).
    from torch.utils._python_dispatch import TorchDispatchMode
except ImportError as error:  # a torch release moved a private API: name the torch and what is tested
    raise ImportError(
        f"bwd_widgets cannot import a private torch API from torch {torch.__version__} ({error}); "
        f"it is tested with torch {' and '.join(TESTED_TORCH)}: install '{TORCH_REQUIREMENT}'."
    ) from error

_GRAPH_TEXT = (
    getattr(aot_graph_compile, "_log_joint_graph", None),
    getattr(aot_graph_compile, "_log_fw_bw_graphs", None),
)
_graph_text_lock = threading.Lock()
_graph_text_skips = 0


def _graph_text_read() -> bool:
    """Whether torch's structured trace (TORCH_TRACE, tlparse) or its AOT graph logs would read the text. Until
    torch's lazy trace handler has decided whether a trace is on (at the process's first compile, removing itself
    when not), it counts as reading."""
    loggers = [getattr(aot_graph_compile, name, None) for name in ("aot_joint_log", "aot_graphs_log")]
    return bool(trace_log.handlers) or any(log is None or log.isEnabledFor(logging.INFO) for log in loggers)


@contextlib.contextmanager
def graph_text_skipped_unless_logged() -> Iterator[None]:
    """AOT Autograd writes its joint, forward and backward graphs out as text for its logs on every call (about
    5% of a small model's extraction); `aot_module_simplified` offers no `enable_log=False`. While nothing reads
    that text, skip it as `enable_log=False` does (both functions then return None). Nested and concurrent
    captures share one patch; a torch without these functions, or with its logs read, runs as it is."""
    global _graph_text_skips
    joint, fw_bw = _GRAPH_TEXT
    if joint is None or fw_bw is None or _graph_text_read():
        yield
        return
    with _graph_text_lock:
        if _graph_text_skips == 0:
            aot_graph_compile._log_joint_graph = lambda *args, **kwargs: None
            aot_graph_compile._log_fw_bw_graphs = lambda *args, **kwargs: (None, None)
        _graph_text_skips += 1
    try:
        yield
    finally:
        with _graph_text_lock:
            _graph_text_skips -= 1
            if _graph_text_skips == 0:
                aot_graph_compile._log_joint_graph, aot_graph_compile._log_fw_bw_graphs = joint, fw_bw


# Private attributes of torch's objects, each read or set through one function below with why it is needed; each
# was checked on the tested releases (torch 2.13.0, 2.14.1 and 2.15.0), as the note at its end says.


# autograd's in-place version counter (no public read): has a tensor kept by reference changed? (2.13.0, 2.14.1, 2.15.0)
def tensor_version(tensor: torch.Tensor) -> int:
    return tensor._version


# The address of a storage's C++ object: one id per live storage, fake storages included (2.13.0, 2.14.1, 2.15.0).
def storage_id(storage: torch.UntypedStorage) -> int:
    return int(storage._cdata)


# torch's bytes of a node's value (`_size_of`, read when called): budget ratios as torch measures them (2.13.0, 2.14.1, 2.15.0).
def partitioner_size_of() -> Callable[[torch.fx.Node], int]:
    size_of: Callable[[torch.fx.Node], int] = torch_partitioners._size_of
    return size_of


# An aten op's schema (`OpOverload._schema`): the arguments it writes or aliases; None for others (2.13.0, 2.14.1, 2.15.0).
def op_schema(target: object) -> torch.FunctionSchema | None:
    schema: torch.FunctionSchema | None = getattr(target, "_schema", None)
    return schema


# An aten op's overload packet (`_overloadpacket`): `aten.add` of `aten.add.Tensor`; None for others (2.13.0, 2.14.1, 2.15.0).
def op_packet(target: object) -> object | None:
    return getattr(target, "_overloadpacket", None)


# Compiled entries Dynamo keeps on a code object: a capture drops those it added to code compiled anew (2.13.0, 2.14.1, 2.15.0).
# Before 2.13 (outside the tested range) Dynamo only lists them (`_debug_get_cache_entry_list`).
def dynamo_cache_entries(code: types.CodeType) -> int:
    counter = getattr(dynamo_frames, "_get_total_cache_entry_count", None)
    if counter is None:
        return len(dynamo_frames._debug_get_cache_entry_list(code))
    count: int = counter(code)
    return count


# torch's mark (`_boxed_call`, as make_boxed_func sets) of compiled code taking one list of arguments (2.13.0, 2.14.1, 2.15.0).
def mark_boxed(compiled: _F) -> _F:
    compiled._boxed_call = True  # type: ignore[attr-defined]  # a function attribute torch reads
    return compiled


# Hooks on every module (`torch.nn.modules.module`'s global tables), which torch.fx's trace would skip (2.13.0, 2.14.1, 2.15.0).
def global_module_hooks() -> bool:
    tables = torch.nn.modules.module
    return bool(tables._global_forward_hooks or tables._global_forward_pre_hooks or tables._global_backward_hooks)


# Hooks on one module (forward, backward and their pre-hooks), which torch.fx's trace would skip (2.13.0, 2.14.1, 2.15.0).
def module_hooks(module: torch.nn.Module) -> bool:
    if module._forward_hooks or module._forward_pre_hooks or module._backward_hooks:
        return True
    return bool(getattr(module, "_backward_pre_hooks", None))


# A module's table of children (`_modules`, None entries included; no public API gives it): the advisor's shadow copies
# get tables of their own, so a plan's code that replaces a block touches only the copy (2.13.0, 2.14.1, 2.15.0).
def child_modules(module: torch.nn.Module) -> dict[str, torch.nn.Module | None]:
    return module._modules


def shallow_module_copy(module: _M) -> _M:
    """A shallow copy of `module` with a table of children of its own (parameters and children shared)."""
    copied = copy.copy(module)
    copied._modules = module._modules.copy()
    return copied


def min_cut_solver() -> tuple[object, str]:
    """Where min-cut's max-flow solver is looked up when it runs, as (module, name): torch 2.15 solves the flow
    graph with its own `minimum_cut` (`torch/_functorch/_activation_checkpointing/min_cut.py`, imported into the
    partitioner module); 2.13 and 2.14 call `networkx.minimum_cut`. The same graph, edges and reasons reach both."""
    if callable(getattr(torch_partitioners, "minimum_cut", None)):
        return torch_partitioners, "minimum_cut"
    import networkx

    return networkx, "minimum_cut"


REGION_BACKWARD_NODE = "CompiledFunctionBackward"
"""The autograd node a compiled region leaves in the forward's graph: AOT Autograd's `CompiledFunction` (an
autograd.Function made per region, named so on 2.13.0, 2.14.1 and 2.15.0), whose saved values are its partition's."""


def checkpoint_generator() -> str:
    """The name of the generator `torch.utils.checkpoint.checkpoint` runs without reentry, as the checkpoint module
    holds it: `_checkpoint_without_reentrant_generator` on 2.13; from 2.14 it calls
    `_checkpoint_without_reentrant_generator_impl`, keeping the old name as a wrapper of it for callers outside
    torch. Patching this one catches both."""
    newer = "_checkpoint_without_reentrant_generator_impl"
    return (
        newer if callable(getattr(torch.utils.checkpoint, newer, None)) else "_checkpoint_without_reentrant_generator"
    )


# The module or function `torch.compile` wrapped (`OptimizedModule._orig_mod`, a compiled function's
# `_torchdynamo_orig_callable`): extract traces the user's own model, named as they name it (2.13.0, 2.14.1, 2.15.0).
def compiled_original(model: object) -> Callable[..., Any] | None:
    if isinstance(model, OptimizedModule):
        original: Callable[..., Any] = model._orig_mod
        return original
    wrapped = getattr(model, "_torchdynamo_orig_callable", None)
    return wrapped if callable(wrapped) else None


# Whether pytree would refuse a key path through `value`: a node registered without a `flatten_with_keys_fn`
# (diffusers' `BaseOutput`), which `tree_flatten_with_path` raises on (2.13.0, 2.14.1, 2.15.0).
def keyless_pytree_node(value: object) -> bool:
    node = pytree.SUPPORTED_NODES.get(type(value))
    return node is not None and node.flatten_with_keys_fn is None


def inductor_compile(
    gm: torch.fx.GraphModule,
    example_inputs: list,
    compile_graph: Callable[[torch.fx.GraphModule, list, bool], Callable[..., Any]],
    partition_fn: Callable[..., Any],
) -> Callable[..., Any]:
    """Inductor's own compile of one Dynamo graph (`torch._inductor.compile_fx.compile_fx`: its pre-grad passes, its
    decompositions, AOT Autograd, its joint-graph passes, min-cut), with two steps handed to the caller: the split of
    the joint graph Inductor's joint passes made (Inductor's module-level `partition_fn` runs its passes, then a
    `partitioner_fn_override` where one is given) and the compilation of the forward and backward graphs that split
    gives (`inner_compile`, which receives them before Inductor's post-grad passes and code generation: no C++ is
    compiled). `compile_graph(gm, example_inputs, is_backward)`. AOT Autograd's cache is off for the call: a cached
    compile would skip both steps. Only this thread's compile is redirected (2.13.0, 2.14.1, 2.15.0)."""
    from torch._inductor import compile_fx as inductor_module

    inductor: Any = inductor_module  # its globals are replaced for the call, which its own types do not allow
    original = inductor.partition_fn
    owner = threading.get_ident()

    def partition(joint: torch.fx.GraphModule, joint_inputs: list, **kwargs: Any) -> Any:
        if threading.get_ident() != owner:  # another thread's own torch.compile: Inductor's split, untouched
            return original(joint, joint_inputs, **kwargs)
        return original(joint, joint_inputs, partitioner_fn_override=partition_fn, **kwargs)

    def inner_compile(graph: torch.fx.GraphModule, inputs: list, **options: Any) -> Callable[..., Any]:
        return compile_graph(graph, inputs, bool(options.get("is_backward")))

    inductor.partition_fn = partition
    try:
        with functorch_config.patch(enable_autograd_cache=False):
            compiled: Callable[..., Any] = inductor.compile_fx(gm, example_inputs, inner_compile=inner_compile)
            return compiled
    finally:
        inductor.partition_fn = original


def inductor_lays_out_channels_last(forward: torch.fx.GraphModule) -> bool:
    """Whether Inductor's code generation lays this training forward graph's convolutions out channels_last
    (`GraphLowering.decide_layout_opt`, its `layout_optimization` heuristic, read from torch; 2.13.0, 2.14.1,
    2.15.0): the forward inputs such a convolution reads are then copied, and the copy is what autograd keeps."""
    from torch._inductor.graph import GraphLowering

    return bool(GraphLowering.decide_layout_opt(forward, is_inference=False))


def dynamo_setting(name: str) -> bool:
    """Whether this torch's Dynamo has the setting `torch._dynamo.config.<name>` (a capture may set it for itself)."""
    return isinstance(getattr(dynamo_config, name, None), bool)


def graph_break_reasons() -> Counter[str]:
    """Dynamo's counts of why it broke a graph or gave up on code (its `graph_break` and `unimplemented`
    counters, process-wide): the difference across a capture is what Dynamo said of the user's forward."""
    from torch._dynamo.utils import counters

    return Counter(counters["graph_break"]) + Counter(counters["unimplemented"])


def dynamo_words(reason: str) -> str:
    """Dynamo's reason in one line: its first line, then its hints ("Set torch._dynamo.config.allow_rnn=True...")."""
    lines = [line.strip() for line in reason.splitlines()]
    hints = [line.removeprefix("Hint:").strip() for line in lines if line.startswith("Hint:")]
    return "; ".join([lines[0].rstrip("."), *hints[:1]]) if lines else ""


_USER_LINE = re.compile(r'# File "([^"]+)", line (\d+), in [^,]+, code: (.+)')
"""Where Dynamo's reason says the user's code was (`# File "...", line 12, in forward, code: if y.sum() > 0:`)."""


def graph_break_note(reason: str) -> str:
    """A graph break as a note, in Dynamo's words: its reason's first line and first hint, and the user's line
    where its reason names it."""
    where = _USER_LINE.search(reason)
    at = f" at {where.group(1)}:{where.group(2)} (`{where.group(3).strip()}`)" if where else ""
    return f"Dynamo broke the graph{at}: {dynamo_words(reason).rstrip('.')}."


_SKIPPED_FRAME = re.compile(r"frame skipped: (\S+) \((.+?) line (\d+)\)")
"""Where Dynamo's reason says it gave up on a whole frame (its debug context: `frame skipped: forward (FILE line N)`)."""


def eager_frame_note(reason: str) -> str | None:
    """Where Dynamo ran a whole frame eagerly (a graph break inside a loop, on 2.13 to 2.15), a note in its words:
    that frame's own ops run outside every compiled region, so what they save is kept by eager autograd and no
    graph shows it. None where the reason skips no frame."""
    found = _SKIPPED_FRAME.search(reason)
    if found is None:
        return None
    explained = re.findall(r"Explanation: (.+)", reason[: found.start()])
    why = f" ({explained[-1].strip().rstrip('.')})" if explained else ""
    return (
        f"Dynamo ran {found.group(1)} ({found.group(2)}:{found.group(3)}) eagerly{why}: its own ops run outside every "
        "compiled region, so what they save for backward is kept by eager autograd, and no graph here shows it "
        "(where they saved anything, a note counts it)."
    )


def region_memory_budget_available() -> bool:
    """Whether this torch has `torch.autograd.graph.region_activation_memory_budget` (a budget for the graph
    traced under it, read by min-cut when torch.compile partitions that graph)."""
    return callable(getattr(torch.autograd.graph, "region_activation_memory_budget", None))


def cpu_offload_policies() -> tuple[str, ...]:
    """The `CheckpointPolicy` members of this torch that ask for a CPU offload (`MUST_CPU_OFFLOAD`,
    `PREFER_CPU_OFFLOAD`), and whether AOT Autograd has the switch of its offload pass
    (`enable_activation_offloading`): () where either is missing."""
    from torch.utils.checkpoint import CheckpointPolicy

    names = tuple(name for name in ("MUST_CPU_OFFLOAD", "PREFER_CPU_OFFLOAD") if hasattr(CheckpointPolicy, name))
    return names if isinstance(getattr(functorch_config, "enable_activation_offloading", None), bool) else ()


__all__ = [
    "REGION_BACKWARD_NODE",
    "checkpoint_generator",
    "compiled_original",
    "cpu_offload_policies",
    "region_memory_budget_available",
    "dynamo_setting",
    "dynamo_words",
    "keyless_pytree_node",
    "graph_break_note",
    "eager_frame_note",
    "graph_break_reasons",
    "min_cut_solver",
    "graph_text_skipped_unless_logged",
    "inductor_compile",
    "inductor_lays_out_channels_last",
    "child_modules",
    "dynamo_cache_entries",
    "global_module_hooks",
    "mark_boxed",
    "module_hooks",
    "op_packet",
    "op_schema",
    "partitioner_size_of",
    "shallow_module_copy",
    "storage_id",
    "tensor_version",
    "TESTED_TORCH",
    "TORCH_BELOW",
    "TORCH_MIN",
    "TORCH_REQUIREMENT",
    "FakeTensor",
    "TorchDispatchMode",
    "OptimizedModule",
    "_record_memory_history",
    "_reparametrize_module",
    "_snapshot",
    "aot_autograd",
    "aot_module_simplified",
    "dynamo",
    "dynamo_backends",
    "dynamo_convert_frame",
    "dynamo_frames",
    "dynamo_eval_frame",
    "make_boxed_func",
    "torch_partitioners",
    "FakeTensorMode",
    "OpTypes",
    "OutputType",
    "TracingContext",
    "UntestedTorchWarning",
    "_LazyGraphModule",
    "_use_lazy_graph_module",
    "check_torch_version",
    "default_partition",
    "detect_fake_mode",
    "dynamo_config",
    "functorch_config",
    "get_default_op_list",
    "min_cut_rematerialization_partition",
    "pytree",
    "run_and_save_rng_state",
    "run_with_rng_state",
    "tracing",
    "torch_is_tested",
]
