"""extract(): run a model through AOT Autograd and keep its forward, backward and joint graphs.

An nn.Module over tensors goes through torch.fx straight to AOT Autograd (no bytecode tracing);
anything else, or what torch.fx would get wrong, goes through Dynamo. The user's model, session and
random state are left as they were.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.utils._pytree as pytree

from .core.capture import CaptureSession, fx_eligible, own_dynamo_entries, signature_names
from .core.errors import (
    BwdWidgetsError,
    ExtractionFailed,
    NoDifferentiableOutputError,
    NotForFx,
    NothingRequiresGradError,
    describe_failure,
    one_line,
)
from .core.partitioners import resolve_partitioner
from .core.trace import Partition
from .extraction import BackwardExtraction
from .graphnet import GraphNetSample

NO_GRAD_KEYWORDS = (
    "running_mean",
    "running_var",
    "num_batches_tracked",
    "mask",
    "indices",
    "position_ids",
    "anchor",
)
MODES = ("real", "fake")
TRACE_CACHE_SIZE = 2
RequiresGrad = bool | dict[str, bool] | Callable[[str, torch.Tensor], bool] | None


@dataclasses.dataclass
class _Kept:
    """A trace kept for the next call with the same model, inputs and mode."""

    extraction: BackwardExtraction
    rng_digest: str | None
    """Set when the graph draws random numbers: a hit also needs the same generator state."""
    model: object
    """Held so that the ids in the key stay taken."""
    inputs: tuple


_traces: OrderedDict[tuple, _Kept] = OrderedDict()


def default_requires_grad(name: str, tensor: object) -> bool:
    """GraphNet's rule, for GraphNet samples: floating point, except statistics, masks and indices.

    Pass `requires_grad=bw.default_requires_grad` to apply it to a model of your own.
    """
    if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
        return False
    return not any(keyword in name for keyword in NO_GRAD_KEYWORDS)


def extract(
    model: Callable | GraphNetSample,
    *example_inputs: object,
    partitioner: object = "default",
    memory_budget: float | None = None,
    mode: str = "real",
    requires_grad: RequiresGrad = None,
    name: str | None = None,
    capture_scalars: bool = True,
    cache: bool = True,
) -> BackwardExtraction:
    """Capture the forward, backward and joint graphs of `model(*example_inputs)`.

    partitioner: a registered name ("default", "min_cut"), a memory budget in [0, 1]
        (min-cut), or a partition_fn(joint_gm, joint_inputs, *, num_fwd_outputs, ...).
    memory_budget: with "min_cut", torch's activation_memory_budget for this call.
    mode: "real" runs forward and backward (real values are kept); "fake" runs
        nothing: shapes only, under FakeTensorMode, for models of any size.
    requires_grad: None: floating-point inputs, and parameters as they are (GraphNet's
        name rule for GraphNet samples); a bool for every floating input and parameter; a
        dict {name: bool} by argument name or qualified parameter name; or callable(name, tensor).
    capture_scalars: keep `.item()` inside the graph (Dynamo's capture_scalar_outputs)
        instead of breaking it there; GraphNet samples pass scalar settings such as
        batch-norm momentum as tensors, and one graph beats thirty.
    cache: an nn.Module extracted again with the same state (submodules, attributes,
        parameters, buffers, hooks, training flags, globals its forward reads), the same
        inputs, mode and autocast state reuses the kept joint graph instead of tracing again.
    `model` may also be a GraphNetSample from load_graphnet_sample().
    """
    if mode not in MODES:
        raise BwdWidgetsError(f"unknown mode {mode!r}: use 'real' or 'fake'.")
    resolved = resolve_partitioner(partitioner, memory_budget)
    sample_notes: list[str] = []
    input_names: dict[str, tuple[str, str]] = {}
    rule_names: dict[str, str] = {}
    graphnet_rule = False
    if isinstance(model, GraphNetSample):
        sample = model
        model = sample.module
        example_inputs = example_inputs or tuple(sample.meta_inputs() if mode == "fake" else sample.inputs)
        name = name or sample.name
        input_names, rule_names, graphnet_rule = sample.input_sources, sample.original_names, True
        sample_notes = list(sample.notes)
    name = name or type(model).__name__
    signature = signature_names(model)
    arg_names = [signature[i] if i < len(signature) else f"input_{i}" for i in range(len(example_inputs))]
    parameters = dict(model.named_parameters()) if isinstance(model, torch.nn.Module) else {}
    decided = _decide_requires_grad(requires_grad, graphnet_rule, arg_names, example_inputs, parameters, rule_names)
    if not any(decided.values()):
        if graphnet_rule and requires_grad is None:
            raise NothingRequiresGradError(
                f"GraphNet's rule leaves no input of {name} requiring grad (it skips integer tensors and names "
                f"containing {', '.join(NO_GRAD_KEYWORDS)}): pass requires_grad={{'name': True}} to choose which do."
            )
        raise NothingRequiresGradError(
            "no input or parameter requires grad: pass floating-point inputs, parameters that require "
            "grad, or requires_grad={'name': True} to choose which do."
        )

    key = _trace_key(model, example_inputs, decided, mode, capture_scalars) if cache else None
    kept = _traces.get(key) if key is not None else None
    if kept is not None and kept.rng_digest in (None, _rng_digest()):
        _traces.move_to_end(key)
        return dataclasses.replace(kept.extraction.rerun(resolved), model_name=name)

    started = time.perf_counter()
    inputs = [
        value.detach().requires_grad_(decided[arg]) if isinstance(value, torch.Tensor) else value
        for arg, value in zip(arg_names, example_inputs)
    ]
    rng_digest = _rng_digest()
    routes = ["fx", "dynamo"] if capture_scalars and fx_eligible(model, inputs) else ["dynamo"]
    with _requires_grad_applied(parameters, decided):
        for route in routes:
            session = CaptureSession(resolved, mode == "real", input_names, signature)
            for tensor in list(parameters.values()) + inputs:
                if isinstance(tensor, torch.Tensor):
                    tensor.grad = None
            try:
                notes = _run(session, route, model, inputs, mode, capture_scalars)
                break
            except NotForFx:
                continue
            except BwdWidgetsError:
                raise
            except Exception as error:
                if route != routes[-1]:
                    continue  # what torch.fx's graph cannot do (data-dependent ops), Dynamo may
                raise ExtractionFailed(f"torch could not capture {name}: {describe_failure(error)}") from None
            finally:
                session.finish()
        grads = {n: t.grad for n, t in zip(arg_names, inputs) if isinstance(t, torch.Tensor)}
        grads.update({n: p.grad for n, p in parameters.items()})
        autograd_gradients = {n: g for n, g in grads.items() if g is not None}

    if not session.partitions:
        raise NoDifferentiableOutputError(
            f"{name} produced no backward graph: no output depends on an input or parameter requiring grad."
        )
    for partition in session.partitions:
        partition.note_random_recompute()
    session.partitions[0].trace.notes.extend(sample_notes + notes)
    extraction = BackwardExtraction(
        partitions=session.partitions,
        mode=mode,
        model_name=name,
        seconds=time.perf_counter() - started,
        autograd_gradients=autograd_gradients,
        requires_grad=decided,
    )
    if key is not None and not notes:
        random = any(_draws_random_numbers(p) for p in extraction.partitions)
        _traces[key] = _Kept(extraction, rng_digest if random else None, model, example_inputs)
        while len(_traces) > TRACE_CACHE_SIZE:
            _traces.popitem(last=False)
    return extraction


def clear_trace_cache() -> None:
    """Forget kept traces (they hold the model, its inputs and, in real mode, its real values)."""
    _traces.clear()


def _run(
    session: CaptureSession, route: str, model: Callable, inputs: list, mode: str, capture_scalars: bool
) -> list[str]:
    """Compile by `route` and run forward (and, in real mode, backward) once; the session records."""
    notes: list[str] = []
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.random.fork_rng(devices=[]))
        stack.enter_context(torch._functorch.config.patch(force_non_lazy_backward_lowering=True))
        stack.enter_context(torch._dynamo.config.patch(capture_scalar_outputs=capture_scalars))
        stack.enter_context(torch.enable_grad())
        session.rng_state = torch.get_rng_state()
        if route == "dynamo":
            stack.enter_context(own_dynamo_entries())
        if mode == "fake":
            fake_inputs = stack.enter_context(_faked(model, inputs))
            compiled = session.compile_fx(model, fake_inputs) if route == "fx" else session.compile_dynamo(model)
            _differentiable_outputs(compiled(*fake_inputs))
            return notes
        try:
            compiled = session.compile_fx(model, inputs) if route == "fx" else session.compile_dynamo(model)
            differentiable = _differentiable_outputs(compiled(*inputs))
            try:
                torch.autograd.backward(differentiable, [torch.ones_like(t) for t in differentiable])
            except RuntimeError as error:
                if not session.partitions:
                    raise
                notes.append(f"the real backward run failed, so no real backward values are kept: {one_line(error)}")
                for partition in session.partitions:
                    partition.backward_inputs = None
                    partition.trace.tangent_values = None
        finally:
            session.restore_mutated()
    return notes


def _decide_requires_grad(
    requires_grad: RequiresGrad,
    graphnet_rule: bool,
    arg_names: list[str],
    inputs: Sequence[object],
    parameters: dict[str, torch.nn.Parameter],
    rule_names: dict[str, str],
) -> dict[str, bool]:
    """Which floating inputs and parameters get a gradient; unknown names in a dict are an error."""
    if isinstance(requires_grad, dict):
        known = set(arg_names) | set(parameters) | set(rule_names.values())
        unknown = [n for n in requires_grad if n not in known]
        if unknown:
            close = difflib.get_close_matches(unknown[0], sorted(known), n=3)
            hint = (
                f"did you mean {', '.join(repr(c) for c in close)}?"
                if close
                else f"known: {', '.join(sorted(known)[:8])}."
            )
            raise BwdWidgetsError(
                f"requires_grad names {unknown[0]!r}, which is neither an argument nor a parameter: {hint}"
            )

    def decide(name: str, tensor: object, default: bool) -> bool:
        if not isinstance(tensor, torch.Tensor) or not (tensor.is_floating_point() or tensor.is_complex()):
            return False
        rule_name = rule_names.get(name, name)
        if isinstance(requires_grad, dict):
            for candidate in (name, rule_name):
                if candidate in requires_grad:
                    return bool(requires_grad[candidate])
        elif callable(requires_grad):
            return bool(requires_grad(name, tensor))
        elif isinstance(requires_grad, bool):
            return requires_grad
        if graphnet_rule:
            return default and default_requires_grad(rule_name, tensor)
        return default

    decided = {n: decide(n, v, True) for n, v in zip(arg_names, inputs) if isinstance(v, torch.Tensor)}
    decided.update({n: decide(n, p, p.requires_grad) for n, p in parameters.items()})
    return decided


@contextlib.contextmanager
def _requires_grad_applied(parameters: dict[str, torch.nn.Parameter], decided: dict[str, bool]) -> Iterator[None]:
    """Parameters get the decided flags and no .grad for the run; flags and .grad come back after."""
    flags = {n: p.requires_grad for n, p in parameters.items()}
    grads = {n: p.grad for n, p in parameters.items()}
    try:
        for n, p in parameters.items():
            p.requires_grad_(decided[n])
            p.grad = None
        yield
    finally:
        for n, p in parameters.items():
            p.requires_grad_(flags[n])
            p.grad = grads[n]


def _flatten_outputs(outputs: object) -> list:
    if dataclasses.is_dataclass(outputs) and not isinstance(outputs, type):
        outputs = {f.name: getattr(outputs, f.name) for f in dataclasses.fields(outputs)}
    result = []
    for leaf in pytree.tree_leaves(outputs):
        if dataclasses.is_dataclass(leaf) and not isinstance(leaf, type):
            result.extend(_flatten_outputs(leaf))
        else:
            result.append(leaf)
    return result


def _differentiable_outputs(outputs: object) -> list[torch.Tensor]:
    tensors = [t for t in _flatten_outputs(outputs) if isinstance(t, torch.Tensor) and t.requires_grad]
    if not tensors:
        raise NoDifferentiableOutputError(
            "no output is a differentiable tensor: return a floating-point tensor computed "
            "from an input or parameter that requires grad."
        )
    return tensors


# --- the trace cache key --------------------------------------------------------------

_SIMPLE = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.Size)


def _tensor_key(t: torch.Tensor) -> tuple:
    return (id(t), t._version, tuple(t.shape), t.dtype, t.device.type, t.requires_grad)


def _value_key(value: object, depth: int = 0) -> object:
    """Values for plain data, identities for everything else: a change to either misses the cache."""
    if isinstance(value, torch.Tensor):
        return _tensor_key(value)
    if isinstance(value, _SIMPLE):
        return (type(value).__name__, str(value) if isinstance(value, (torch.dtype, torch.device)) else value)
    if isinstance(value, (list, tuple)) and depth < 3:
        return (type(value).__name__, tuple(_value_key(v, depth + 1) for v in value))
    if isinstance(value, dict) and depth < 3:
        return ("dict", tuple((str(k), _value_key(v, depth + 1)) for k, v in value.items()))
    return (type(value).__name__, id(value))


def _globals_key(function: object) -> tuple:
    """The globals a forward reads by name (a constant changed between calls misses the cache)."""
    code = getattr(function, "__code__", None)
    namespace = getattr(function, "__globals__", {})
    if code is None:
        return ()
    return tuple((n, _value_key(namespace[n])) for n in code.co_names if n in namespace)


def _module_key(module: torch.nn.Module) -> tuple:
    entries = []
    for path, sub in module.named_modules(remove_duplicate=False):
        attributes = tuple(
            (k, _value_key(v)) for k, v in vars(sub).items() if k not in ("_parameters", "_buffers", "_modules")
        )
        cls = type(sub)
        class_data = tuple(
            (k, _value_key(v)) for k, v in vars(cls).items() if isinstance(v, _SIMPLE) and not k.startswith("__")
        )
        entries.append((path, id(sub), cls, attributes, class_data, _globals_key(cls.forward)))
    tensors = list(module.named_parameters(remove_duplicate=False)) + list(module.named_buffers(remove_duplicate=False))
    return (tuple(entries), tuple((n, _tensor_key(t)) for n, t in tensors))


def _trace_key(
    model: object, example_inputs: tuple, decided: dict[str, bool], mode: str, capture_scalars: bool
) -> tuple | None:
    """What makes two calls trace the same joint graph; None where that cannot be told cheaply.

    Only nn.Modules are kept: a plain function's behaviour hangs on whatever it reads.
    """
    if not isinstance(model, torch.nn.Module):
        return None
    leaves, spec = pytree.tree_flatten(list(example_inputs))
    session_state = (
        torch.is_autocast_enabled("cpu"),
        torch.get_autocast_dtype("cpu"),
        torch.is_autocast_enabled("cuda"),
        torch.get_autocast_dtype("cuda"),
        torch.get_default_dtype(),
        torch.are_deterministic_algorithms_enabled(),
    )
    return (
        id(model),
        _module_key(model),
        str(spec),
        tuple(_value_key(v) for v in leaves),
        tuple(sorted(decided.items())),
        mode,
        capture_scalars,
        session_state,
    )


def _rng_digest() -> str:
    return hashlib.sha1(torch.get_rng_state().numpy().tobytes()).hexdigest()


def _draws_random_numbers(partition: Partition) -> bool:
    from .core.analysis import random_ops

    graph = partition.trace.joint
    return bool(random_ops(graph, {n.name for n in graph.graph.nodes}))


@contextlib.contextmanager
def _faked(model: Callable, inputs: list) -> Iterator[list]:
    """Swap parameters, buffers and inputs for fake tensors: no compute, no memory."""
    from torch._guards import detect_fake_mode
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    from torch.nn.utils.stateless import _reparametrize_module

    state = {}
    if isinstance(model, torch.nn.Module):
        state.update(model.named_parameters(remove_duplicate=False))
        state.update(model.named_buffers(remove_duplicate=False))
    tensors = list(state.values()) + [t for t in inputs if isinstance(t, torch.Tensor)]
    fake_mode = detect_fake_mode(tensors) or FakeTensorMode()

    def fake(tensor: object) -> object:
        if not isinstance(tensor, torch.Tensor) or isinstance(tensor, FakeTensor):
            return tensor
        if tensor.device.type == "meta":
            with fake_mode:
                result = torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype, device="cpu")
        else:
            result = fake_mode.from_tensor(tensor)
        return result.requires_grad_(tensor.requires_grad) if result.is_floating_point() else result

    fake_state = {n: fake(t) for n, t in state.items()}
    fake_inputs = [fake(t) for t in inputs]
    with contextlib.ExitStack() as stack:
        if isinstance(model, torch.nn.Module):
            stack.enter_context(_reparametrize_module(model, fake_state, tie_weights=True))
        stack.enter_context(fake_mode)
        yield fake_inputs
