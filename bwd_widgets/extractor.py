"""extract(): run a model through torch.compile + AOT Autograd and analyse its backward."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator

import torch
import torch.utils._pytree as pytree

from .core.capture import CaptureSession, signature_names
from .core.errors import (
    BwdWidgetsError,
    ExtractionFailed,
    NoDifferentiableOutputError,
    NothingRequiresGradError,
    one_line,
)
from .core.partitioners import resolve_partitioner
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
RequiresGrad = bool | dict[str, bool] | Callable[[str, torch.Tensor], bool] | None
TRACE_CACHE_SIZE = 2  # in real mode each kept trace holds copies of real values: keep few
_traces: OrderedDict = OrderedDict()  # trace key -> (extraction, model, inputs): the ids in the key stay taken


def _trace_key(model, example_inputs, decided, mode, capture_scalars):
    """What makes two extract() calls trace the same joint graph (and, in real mode, the same values).

    Identities and version counters: an in-place update of a weight or an input, a
    new shape, another mode, or other requires-grad choices all trace again.
    """

    def tensor_key(t):
        return (id(t), t._version, tuple(t.shape), t.dtype, t.device.type)

    state = []
    if isinstance(model, torch.nn.Module):
        state = [(n, tensor_key(t)) for n, t in list(model.named_parameters()) + list(model.named_buffers())]
        code = getattr(type(model).forward, "__code__", None)
        training = model.training
    else:
        code = getattr(model, "__code__", None)
        training = None
    inputs = tuple(
        tensor_key(v) if isinstance(v, torch.Tensor) else (type(v).__name__, repr(v)[:100]) for v in example_inputs
    )
    return (id(model), id(code), training, tuple(state), inputs, tuple(sorted(decided.items())), mode, capture_scalars)


def default_requires_grad(name: str, tensor: object) -> bool:
    """GraphNet's rule: floating-point tensors, except statistics, masks and indices."""
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
    requires_grad: None for GraphNet's rule (floating point, not running stats,
        masks or indices); a bool for every floating input; a dict {name: bool} to
        override inputs (by argument name) or parameters (by qualified name); or a
        callable(name, tensor) -> bool.
    capture_scalars: keep `.item()` inside the graph (Dynamo's capture_scalar_outputs)
        instead of breaking it there; GraphNet samples pass scalar settings such as
        batch-norm momentum as tensors, and one graph beats thirty.
    cache: a second call with the same model, inputs and mode (same shapes, no
        in-place change to weights or inputs since) partitions the joint graph kept
        from the first call instead of tracing again.
    `model` may also be a GraphNetSample from load_graphnet_sample().
    """
    input_names = {}
    rule_names = {}
    if isinstance(model, GraphNetSample):
        sample = model
        model, example_inputs = sample.module, example_inputs or tuple(sample.inputs)
        name = name or sample.name
        input_names = sample.input_sources
        rule_names = sample.original_names
    if mode not in MODES:
        raise BwdWidgetsError(f"unknown mode {mode!r}: use 'real' or 'fake'.")
    resolved = resolve_partitioner(partitioner, memory_budget)
    name = name or type(model).__name__
    signature = signature_names(model)
    arg_names = [_arg_name(signature, i) for i in range(len(example_inputs))]
    decide = _requires_grad_rule(requires_grad)

    inputs, decided = [], {}
    for arg_name, value in zip(arg_names, example_inputs):
        if isinstance(value, torch.Tensor):
            wanted = decide(rule_names.get(arg_name, arg_name), arg_name, value)
            decided[arg_name] = wanted
            value = value.detach().requires_grad_(wanted)
        inputs.append(value)
    parameters = dict(model.named_parameters()) if isinstance(model, torch.nn.Module) else {}
    old_flags = {n: p.requires_grad for n, p in parameters.items()}
    old_grads = {n: p.grad for n, p in parameters.items()}
    for param_name, param in parameters.items():
        decided[param_name] = decide(param_name, param_name, param, default=param.requires_grad)
    if not any(decided.values()):
        raise NothingRequiresGradError(
            "no input or parameter requires grad: pass floating-point inputs, "
            "or requires_grad={'name': True} to choose which do."
        )
    key = _trace_key(model, example_inputs, decided, mode, capture_scalars) if cache else None
    if key is not None and key in _traces:
        _traces.move_to_end(key)
        return dataclasses.replace(_traces[key][0].rerun(resolved), model_name=name)

    session = CaptureSession(resolved, keep_real_inputs=mode == "real", input_names=input_names, signature=signature)
    started = time.perf_counter()
    autograd_gradients = {}
    notes = []
    torch._dynamo.reset()
    try:
        for param_name, param in parameters.items():
            param.requires_grad_(decided[param_name])
            param.grad = None
        compiled = torch.compile(model, backend=session.backend(), dynamic=False)
        with (
            torch._functorch.config.patch(force_non_lazy_backward_lowering=True),
            torch._dynamo.config.patch(capture_scalar_outputs=capture_scalars),
            torch.enable_grad(),
        ):
            if mode == "fake":
                with _faked(model, inputs) as fake_inputs:
                    outputs = compiled(*fake_inputs)
                    _differentiable_outputs(outputs)
            else:
                outputs = compiled(*inputs)
                differentiable = _differentiable_outputs(outputs)
                try:
                    torch.autograd.backward(differentiable, [torch.ones_like(t) for t in differentiable])
                except RuntimeError as error:
                    if not session.partitions:
                        raise
                    notes.append(
                        f"the real backward run failed, so no real backward values are kept: {one_line(error)}"
                    )
                    for partition in session.partitions:
                        partition.backward_inputs = None
                        partition.trace.tangent_values = None
                autograd_gradients = {
                    n: t.grad
                    for n, t in list(zip(arg_names, inputs)) + list(parameters.items())
                    if isinstance(t, torch.Tensor) and t.grad is not None
                }
    except BwdWidgetsError:
        raise
    except Exception as error:
        raise ExtractionFailed(f"torch could not capture {name}: {one_line(error)}") from error
    finally:
        for param_name, param in parameters.items():
            param.requires_grad_(old_flags[param_name])
            param.grad = old_grads[param_name]
        torch._dynamo.reset()

    if not session.partitions:
        raise NoDifferentiableOutputError(
            f"{name} produced no backward graph: no output depends on an input or parameter requiring grad."
        )
    session.partitions[0].trace.notes.extend(notes)
    extraction = BackwardExtraction(
        partitions=session.partitions,
        mode=mode,
        model_name=name,
        seconds=time.perf_counter() - started,
        autograd_gradients=autograd_gradients,
        requires_grad=decided,
    )
    if key is not None and not notes and key == _trace_key(model, example_inputs, decided, mode, capture_scalars):
        _traces[key] = (extraction, model, example_inputs)
        while len(_traces) > TRACE_CACHE_SIZE:
            _traces.popitem(last=False)
    return extraction


def clear_trace_cache() -> None:
    """Forget kept traces (they hold the model, its inputs and, in real mode, copies of real values)."""
    _traces.clear()


def _arg_name(signature, index):
    if index < len(signature):
        return signature[index]
    return f"input_{index}"


def _requires_grad_rule(requires_grad):
    def decide(rule_name, name, tensor, default=True):
        if not isinstance(tensor, torch.Tensor) or not (tensor.is_floating_point() or tensor.is_complex()):
            return False
        if isinstance(requires_grad, dict):
            if name in requires_grad:
                return bool(requires_grad[name])
            if rule_name in requires_grad:
                return bool(requires_grad[rule_name])
        elif callable(requires_grad):
            return bool(requires_grad(name, tensor))
        elif isinstance(requires_grad, bool):
            return requires_grad
        return default and default_requires_grad(rule_name, tensor)

    return decide


def _flatten_outputs(outputs):
    if dataclasses.is_dataclass(outputs) and not isinstance(outputs, type):
        outputs = {f.name: getattr(outputs, f.name) for f in dataclasses.fields(outputs)}
    leaves = pytree.tree_leaves(outputs)
    result = []
    for leaf in leaves:
        if dataclasses.is_dataclass(leaf) and not isinstance(leaf, type):
            result.extend(_flatten_outputs(leaf))
        else:
            result.append(leaf)
    return result


def _differentiable_outputs(outputs):
    tensors = [t for t in _flatten_outputs(outputs) if isinstance(t, torch.Tensor) and t.requires_grad]
    if not tensors:
        raise NoDifferentiableOutputError(
            "no output is a differentiable tensor: return a floating-point tensor computed "
            "from an input or parameter that requires grad."
        )
    return tensors


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

    def fake(tensor):
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
