"""extract(): run a model through AOT Autograd and keep its forward, backward and joint graphs.

An nn.Module over tensors goes through torch.fx straight to AOT Autograd (no bytecode tracing);
anything else, or what torch.fx would get wrong, goes through Dynamo. The user's model, session and
random state are left as they were.

`extract` is a short pipeline: the call (inputs, which of them get a gradient), the trace cache, the
capture (by route, in real or fake mode), the result.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable

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
from .core.fake import faked
from .core.kinds import MODES, InputKind, Mode
from .core.partitioners import Partitioner, resolve_partitioner
from .extraction import BackwardExtraction
from .graphnet import GraphNetSample
from .requires_grad import (
    NO_GRAD_KEYWORDS,
    RequiresGrad,
    decide_requires_grad,
    default_requires_grad,
    requires_grad_applied,
)
from .trace_cache import clear_trace_cache, keep, kept_extraction, rng_digest, trace_key

__all__ = ["MODES", "RequiresGrad", "clear_trace_cache", "default_requires_grad", "extract"]


def extract(
    model: Callable | GraphNetSample,
    *example_inputs: object,
    partitioner: object = "default",
    memory_budget: float | None = None,
    mode: Mode = "real",
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
    call = _prepare(model, example_inputs, mode, requires_grad, name)
    resolved = resolve_partitioner(partitioner, memory_budget)
    key = trace_key(call.model, call.inputs, call.requires_grad, mode, capture_scalars) if cache else None
    kept = kept_extraction(key)
    if kept is not None:
        return dataclasses.replace(kept.rerun(resolved), model_name=call.name)
    digest = rng_digest()
    extraction, notes = _capture(call, resolved, mode, capture_scalars)
    if key is not None and not notes:
        keep(key, extraction, digest, call.model, call.inputs)
    return extraction


@dataclasses.dataclass(frozen=True)
class _Call:
    """One call to extract, its inputs read and checked."""

    model: Callable
    inputs: tuple
    name: str
    signature: list[str]
    arg_names: list[str]
    parameters: dict[str, torch.nn.Parameter]
    requires_grad: dict[str, bool]
    """Argument or qualified parameter name -> whether it gets a gradient."""
    input_names: dict[str, tuple[InputKind, str]]
    """For GraphNet samples: argument name -> (kind, the name GraphNet's sample gives it)."""
    notes: list[str]


def _prepare(
    model: Callable | GraphNetSample, inputs: tuple, mode: Mode, requires_grad: RequiresGrad, name: str | None
) -> _Call:
    if mode not in MODES:
        raise BwdWidgetsError(f"unknown mode {mode!r}: use 'real' or 'fake'.")
    input_names: dict[str, tuple[InputKind, str]] = {}
    rule_names: dict[str, str] = {}
    notes: list[str] = []
    graphnet_rule = isinstance(model, GraphNetSample)
    if isinstance(model, GraphNetSample):
        sample, model = model, model.module
        inputs = inputs or tuple(sample.meta_inputs() if mode == "fake" else sample.inputs)
        name = name or sample.name
        input_names, rule_names, notes = sample.input_sources, sample.original_names, list(sample.notes)
    name = name or type(model).__name__
    signature = signature_names(model)
    arg_names = [signature[i] if i < len(signature) else f"input_{i}" for i in range(len(inputs))]
    parameters = dict(model.named_parameters()) if isinstance(model, torch.nn.Module) else {}
    decided = decide_requires_grad(requires_grad, graphnet_rule, arg_names, inputs, parameters, rule_names)
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
    return _Call(model, inputs, name, signature, arg_names, parameters, decided, input_names, notes)


def _capture(
    call: _Call, resolved: Partitioner, mode: Mode, capture_scalars: bool
) -> tuple[BackwardExtraction, list[str]]:
    """Trace and run once; the extraction and what the run had to say (a note means: do not cache)."""
    started = time.perf_counter()
    inputs = [
        value.detach().requires_grad_(call.requires_grad[arg]) if isinstance(value, torch.Tensor) else value
        for arg, value in zip(call.arg_names, call.inputs)
    ]
    with requires_grad_applied(call.parameters, call.requires_grad):
        session, notes, backward_ran = _capture_by_route(call, inputs, resolved, mode, capture_scalars)
        grads = {n: t.grad for n, t in zip(call.arg_names, inputs) if isinstance(t, torch.Tensor)}
        grads.update({n: p.grad for n, p in call.parameters.items()})
    if not session.regions:
        raise NoDifferentiableOutputError(
            f"{call.name} produced no backward graph: no output depends on an input or parameter requiring grad."
        )
    extraction = BackwardExtraction(
        partitions=session.build(call.notes + notes, backward_ran),
        mode=mode,
        model_name=call.name,
        seconds=time.perf_counter() - started,
        autograd_gradients={n: g for n, g in grads.items() if g is not None},
        requires_grad=call.requires_grad,
    )
    return extraction, notes


def _capture_by_route(
    call: _Call, inputs: list, resolved: Partitioner, mode: Mode, capture_scalars: bool
) -> tuple[CaptureSession, list[str], bool]:
    """torch.fx where it keeps the model's meaning, else (or when it fails) Dynamo."""
    routes = ["fx", "dynamo"] if capture_scalars and fx_eligible(call.model, inputs) else ["dynamo"]
    for route in routes:
        session = CaptureSession(resolved, mode == "real", call.input_names, call.signature)
        for tensor in list(call.parameters.values()) + inputs:
            if isinstance(tensor, torch.Tensor):
                tensor.grad = None
        try:
            notes, backward_ran = _run(session, route, call.model, inputs, mode, capture_scalars)
            return session, notes, backward_ran
        except NotForFx:
            continue
        except BwdWidgetsError:
            raise
        except Exception as error:
            if route != routes[-1]:
                continue  # what torch.fx's graph cannot do (data-dependent ops), Dynamo may
            raise ExtractionFailed(f"torch could not capture {call.name}: {describe_failure(error)}") from None
        finally:
            session.finish()
    raise AssertionError("the last route either returns or raises")


def _run(
    session: CaptureSession, route: str, model: Callable, inputs: list, mode: Mode, capture_scalars: bool
) -> tuple[list[str], bool]:
    """Compile by `route` and run forward (and, in real mode, backward) once; the session records.

    Returns the run's notes and whether the real backward ran."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.random.fork_rng(devices=[]))
        stack.enter_context(torch._functorch.config.patch(force_non_lazy_backward_lowering=True))
        stack.enter_context(torch._dynamo.config.patch(capture_scalar_outputs=capture_scalars))
        stack.enter_context(torch.enable_grad())
        session.rng_state = torch.get_rng_state()
        if route == "dynamo":
            stack.enter_context(own_dynamo_entries())
        if mode == "fake":
            inputs = stack.enter_context(faked(model, inputs))
        compiled = _compiled(session, route, model, inputs)
        if mode == "fake":
            _differentiable_outputs(compiled(*inputs))
            return [], False
        try:
            differentiable = _differentiable_outputs(compiled(*inputs))
            try:
                torch.autograd.backward(differentiable, [torch.ones_like(t) for t in differentiable])
            except RuntimeError as error:
                if not session.regions:
                    raise
                return [f"the real backward run failed, so no real backward values are kept: {one_line(error)}"], False
        finally:
            session.restore_mutated()
    return [], True


def _compiled(session: CaptureSession, route: str, model: Callable, inputs: list) -> Callable:
    if route == "fx":
        assert isinstance(model, torch.nn.Module)  # fx_eligible admits modules only
        return session.compile_fx(model, inputs)
    return session.compile_dynamo(model)


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
