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
import inspect
import re
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

import torch

from ..core.capture import CaptureSession, own_dynamo_entries, torch_failure_logs_quiet
from ..core.compat import (
    compiled_original,
    dynamo_config,
    dynamo_setting,
    dynamo_words,
    eager_frame_note,
    functorch_config,
    graph_break_note,
    graph_break_reasons,
    pytree,
)
from ..core.eager_saves import saved_by_eager
from ..core.errors import (
    BwdWidgetsError,
    CallError,
    ExtractionFailed,
    NoDifferentiableOutputError,
    NotForFx,
    NothingRequiresGradError,
    OutputChoiceError,
    describe_failure,
    one_line,
    raised_by_us,
)
from ..core.fake import faked
from ..core.fx_route import RECURRENT_LAYERS, fx_route_possible
from ..core.interrupts import interrupts_held
from ..core.kinds import DEFAULT_BACKEND, MODES, Backend, InputKind, Mode
from ..core.logger_calls import LoggerCalls
from ..core.model_libraries import settle
from ..core.model_state import left_as_it_was
from ..core.naming import signature_names
from ..core.outputs import (
    OutputChoice,
    Picked,
    bind_inputs,
    differentiable_leaves,
    differentiable_outputs,
    outputs_note,
    selecting,
    starts_from_loss,
)
from ..core.partitioners import Partitioner, resolve_for_backend
from ..core.trace import TORCH_WORK
from ..graphnet.sample import GraphNetSample
from .cache import clear_trace_cache, keep, kept_extraction, rng_digest, trace_key
from .requires_grad import (
    NO_GRAD_KEYWORDS,
    RequiresGrad,
    decide_requires_grad,
    decided_from_loss,
    default_requires_grad,
    gradient_note,
    requires_grad_applied,
    ruled_inputs,
)
from .result import BackwardExtraction

if TYPE_CHECKING:
    from collections import Counter

__all__ = ["MODES", "RequiresGrad", "clear_trace_cache", "default_requires_grad", "extract"]


def extract(
    model: Callable | GraphNetSample,
    *example_inputs: object,
    partitioner: object = None,
    memory_budget: float | None = None,
    mode: Mode = "real",
    backend: Backend = DEFAULT_BACKEND,
    requires_grad: RequiresGrad = None,
    name: str | None = None,
    capture_scalars: bool = True,
    cache: bool = True,
    output: OutputChoice = None,
    model_kwargs: dict[str, object] | None = None,
    **keyword_inputs: object,
) -> BackwardExtraction:
    """Capture the forward, backward and joint graphs of `model(*example_inputs, **keyword_inputs)`.

    Keyword arguments this function does not take go to the model, as a transformers model is called:
    `extract(model, input_ids=ids, labels=labels)`; `model_kwargs={...}` passes one whose name is taken here.

    partitioner: a registered name ("default", "min_cut"), a memory budget in [0, 1] (min-cut), or a
        partition_fn(joint_gm, joint_inputs, *, num_fwd_outputs, ...); None: "default", min-cut on Inductor.
    memory_budget: with "min_cut", torch's activation_memory_budget for this call.
    mode: "real" runs forward and backward (real values are kept); "fake" runs nothing: shapes only.
    backend: "aot_eager" splits AOT Autograd's joint graph as traced; "inductor", the partition torch.compile(model)
        makes: Inductor's compile up to its code generation (its passes and decompositions), through Dynamo.
    requires_grad: None: where the backward starts from a loss, inputs as you made them ("training": a
        data batch gets none), else every floating-point input ("floating"); parameters as they are.
        A rule by name; a bool for all; {name: bool} (the rest by default); or callable(name, tensor).
    capture_scalars: keep `.item()` inside the graph (Dynamo's capture_scalar_outputs) instead of breaking
        it there; GraphNet samples pass scalar settings such as batch-norm momentum as tensors.
    output: which part of the model's output the backward starts from: by default its loss when it
        holds one (a transformers ModelOutput given labels=), else every differentiable output; a key,
        attribute or index (`output="logits"`), or callable(output). The result's notes say which.
    cache: an nn.Module extracted again reuses the kept joint graph when a fingerprint of all a
        trace could read is unchanged (its modules and their attributes, the code their forwards
        reach and the globals it reads, config objects, tensors and, in real mode, their bytes,
        torch's settings); anything it cannot fingerprint cheaply is traced afresh (README: "When
        the trace cache is used").
    `model` may also be a GraphNetSample from load_graphnet_sample().
    Ctrl-C during the capture stops it when the capture ends: torch's tracers patch global state that an
    interrupt midway would leave broken (every module returning a Proxy).
    """
    keywords = dict(model_kwargs or {}, **keyword_inputs)
    call = _prepare(model, example_inputs, keywords, output, mode, requires_grad, name, backend)
    resolved = resolve_for_backend(partitioner, memory_budget, backend)
    key = None
    if cache and (output is None or isinstance(output, (str, int))):
        example = (call.inputs, call.keywords, output)
        rule = call.requires_grad_from_loss
        key = trace_key(call.model, example, call.requires_grad, mode, capture_scalars, rule, backend)
    kept = kept_extraction(key)
    if kept is not None:
        return dataclasses.replace(kept.rerun(resolved), model_name=call.name)
    digest = rng_digest()
    with TORCH_WORK:  # no partition in another thread while the tracers patch torch
        extraction, notes = _capture(call, resolved, mode, capture_scalars)
    if key is not None and not notes:
        keep(key, extraction, digest, call.model, call.inputs)
    return extraction


_EXTRACT_OPTIONS = frozenset(inspect.signature(extract).parameters)


@dataclasses.dataclass(frozen=True)
class _Call:
    """One call to extract, its inputs read and checked."""

    model: Callable
    inputs: tuple
    keywords: dict[str, object]
    """Keyword inputs that could not be passed positionally (they skip a parameter)."""
    output: OutputChoice
    name: str
    signature: list[str]
    arg_names: list[str]
    """Names of `inputs`, then of `keywords`."""
    parameters: dict[str, torch.nn.Parameter]
    requires_grad: dict[str, bool]
    """Argument or qualified parameter name -> whether it gets a gradient."""
    requires_grad_from_loss: dict[str, bool] | None
    """Where the user's choice leaves it to the default and the training rule decides otherwise: the decision
    if the backward starts from a loss, which only the capture finds out (the output is picked in the trace)."""
    ruled: dict[str, torch.Tensor]
    """The tensor inputs whose gradient a rule decides (the user named no choice for them), for the note."""
    graphnet_rule: bool
    asked: RequiresGrad
    """The user's own `requires_grad=` choice."""
    input_names: dict[str, tuple[InputKind, str]]
    """For GraphNet samples: argument name -> (kind, the name GraphNet's sample gives it)."""
    notes: list[str]
    backend: Backend
    """Whose partition the capture shows (`core/kinds.py`)."""


def _prepare(
    model: Callable | GraphNetSample,
    inputs: tuple,
    keywords: dict[str, object],
    output: OutputChoice,
    mode: Mode,
    requires_grad: RequiresGrad,
    name: str | None,
    backend: Backend = DEFAULT_BACKEND,
) -> _Call:
    if mode not in MODES:
        raise BwdWidgetsError(f"unknown mode {mode!r}: use 'real' or 'fake'.")
    if name is not None and not isinstance(name, str):
        raise BwdWidgetsError(f"name={name!r} is not text: pass a string such as name='my_model', or leave it out.")
    input_names: dict[str, tuple[InputKind, str]] = {}
    rule_names: dict[str, str] = {}
    notes: list[str] = []
    graphnet_rule = isinstance(model, GraphNetSample)
    if isinstance(model, GraphNetSample):
        sample, model = model, model.module
        inputs = inputs or tuple(sample.meta_inputs() if mode == "fake" else sample.inputs)
        name = name or sample.name
        input_names, rule_names, notes = sample.input_sources, sample.original_names, list(sample.notes)
    while (original := compiled_original(model)) is not None:
        model = original  # torch.compile(net): trace the user's net, its inputs and parameters named as theirs
    name = name or type(model).__name__
    if not callable(model):
        raise CallError(_not_a_model(model))
    if output is not None and not isinstance(output, (str, int)) and not callable(output):
        raise OutputChoiceError(f"output={output!r}: pass a key such as 'loss', an index, or callable(output).")
    inputs, keywords = bind_inputs(model, inputs, keywords)
    settle(model)
    signature = signature_names(model)
    arg_names = [signature[i] if i < len(signature) else f"input_{i}" for i in range(len(inputs))]
    arg_names += list(keywords)
    values = (*inputs, *keywords.values())
    parameters = dict(model.named_parameters()) if isinstance(model, torch.nn.Module) else {}
    decided = decide_requires_grad(requires_grad, graphnet_rule, arg_names, values, parameters, rule_names)
    from_loss = decided_from_loss(
        requires_grad, graphnet_rule, decided, model, arg_names, values, parameters, rule_names
    )
    ruled = ruled_inputs(requires_grad, arg_names, values, rule_names)
    if not any(decided.values()) and isinstance(model, torch.nn.Module):  # a function's are what it closes over
        if graphnet_rule and requires_grad is None:
            raise NothingRequiresGradError(
                f"GraphNet's rule leaves no input of {name} requiring grad (it skips integer tensors and names "
                f"containing {', '.join(NO_GRAD_KEYWORDS)}): pass requires_grad={{'name': True}} to choose which do."
            )
        raise _nothing_requires_grad()
    return _Call(
        model, inputs, keywords, output, name, signature, arg_names, parameters, decided, from_loss, ruled,
        graphnet_rule, requires_grad, input_names, notes, backend,
    )  # fmt: skip


def _not_a_model(value: object) -> str:
    """What to do instead, where a result of ours is passed as the model."""
    from .loaded_trace import TraceLoad

    got = f"expected a model (an nn.Module or a function), got {type(value).__name__}"
    if isinstance(value, TraceLoad):
        regions = f"{len(value)} compiled region" + ("" if len(value) == 1 else "s")
        return f"{got}: it holds a run's {regions}, each extracted already; use one, e.g. load[0]."
    if isinstance(value, BackwardExtraction):
        return f"{got}, an extraction already: show it with bw.show(g), or pass the model and its inputs."
    return f"{got}."


def prepared_call(model: Callable | GraphNetSample, inputs: tuple, options: dict[str, object], mode: Mode) -> _Call:
    """The call `extract(model, *inputs, **options)` makes, read and checked as it reads it: the model, its
    inputs and keyword inputs, their names, which get a gradient, and the output the backward starts from."""
    given = {k: v for k, v in options.items() if k not in _EXTRACT_OPTIONS}
    keywords = dict(options.get("model_kwargs") or {}, **given)  # type: ignore[call-overload]  # as extract merges
    output, requires_grad, name = options.get("output"), options.get("requires_grad"), options.get("name")
    backend = options.get("backend", DEFAULT_BACKEND)
    return _prepare(model, inputs, keywords, output, mode, requires_grad, name, backend)  # type: ignore[arg-type]


def _capture(
    call: _Call, resolved: Partitioner, mode: Mode, capture_scalars: bool
) -> tuple[BackwardExtraction, list[str]]:
    """Trace and run once; the extraction and what the run had to say (a note means: do not cache).

    A capture that fails while the default gives floating inputs a gradient (a model setting `requires_grad` on
    a tensor computed from its input, which torch refuses) is tried under the training rule, and kept where its
    backward starts from a loss: there the default is that rule; elsewhere the first failure stands."""
    try:
        extraction, notes, _ = _capture_as_decided(call, resolved, mode, capture_scalars)
    except NoDifferentiableOutputError:
        if any(call.requires_grad.values()):
            raise
        raise _nothing_requires_grad() from None  # a function closing over no parameter that requires grad
    except ExtractionFailed as failed:
        if call.requires_grad_from_loss is None:
            raise
        try:
            extraction, notes, from_loss = _capture_as_decided(_trained(call), resolved, mode, capture_scalars)
        except BwdWidgetsError:
            from_loss = False
        if not from_loss:
            raise failed from None
    return extraction, notes


def _nothing_requires_grad() -> NothingRequiresGradError:
    return NothingRequiresGradError(
        "no input or parameter requires grad: pass floating-point inputs, parameters that require "
        "grad, or requires_grad={'name': True} to choose which do."
    )


def _trained(call: _Call) -> _Call:
    """The call under the training rule, which the default is where the backward starts from a loss."""
    assert call.requires_grad_from_loss is not None
    return dataclasses.replace(call, requires_grad=call.requires_grad_from_loss, requires_grad_from_loss=None)


def _capture_as_decided(
    call: _Call, resolved: Partitioner, mode: Mode, capture_scalars: bool
) -> tuple[BackwardExtraction, list[str], bool]:
    """`_capture` with the gradients `call` decided, or the training rule's where the backward turns out to
    start from a loss; also whether it did."""
    started = time.perf_counter()
    with torch.inference_mode(False):  # an input made under inference_mode is copied into a normal tensor
        values = [
            _leaf(value).requires_grad_(call.requires_grad[arg]) if isinstance(value, torch.Tensor) else value
            for arg, value in zip(call.arg_names, (*call.inputs, *call.keywords.values()))
        ]
    inputs = _Inputs(values[: len(call.inputs)], dict(zip(call.keywords, values[len(call.inputs) :])))
    with interrupts_held(), requires_grad_applied(call.parameters, call.requires_grad):
        session, told, notes, backward_ran = _capture_by_route(call, inputs, resolved, mode, capture_scalars)
        grads = {n: t.grad for n, t in zip(call.arg_names, values) if isinstance(t, torch.Tensor)}
        grads.update({n: p.grad for n, p in call.parameters.items()})
    if not session.regions:
        _no_region(call.name, any(g is not None for g in grads.values()), session.graph_breaks)
    if call.requires_grad_from_loss is not None and session.started_from_loss:
        # the backward starts from a loss: a training step's data gets no gradient; captured again so
        with contextlib.suppress(NoDifferentiableOutputError):  # nothing else needs a gradient: keep this one
            return _capture_as_decided(_trained(call), resolved, mode, capture_scalars)
    said = gradient_note(call.ruled, call.requires_grad, _why_gradient(call, session.started_from_loss))
    extraction = BackwardExtraction(
        partitions=session.build(call.notes + ([said] if said else []) + told + session.notes + notes, backward_ran),
        mode=mode,
        model_name=call.name,
        seconds=time.perf_counter() - started,
        autograd_gradients={n: g for n, g in grads.items() if g is not None},
        requires_grad=call.requires_grad,
        eager_storages=tuple(session.eager_storages),
        torch_compile_settings=dict(session.torch_compile_settings),
    )
    return extraction, notes, session.started_from_loss


def _why_gradient(call: _Call, from_loss: bool) -> str:
    """Why the rule gave an input a gradient, for `gradient_note`."""
    if call.asked == "floating":
        return "requires_grad='floating' gives every floating-point input one"
    if call.graphnet_rule:
        return "GraphNet's rule for its samples gives every floating-point input but statistics, masks and indices one"
    if from_loss:
        return "the backward starts from a loss, but nothing else in the call requires grad"
    return "every floating-point input gets one where the backward does not start from a loss"


def _no_region(name: str, gradients_came: bool, breaks: Counter[str]) -> NoReturn:
    """No compiled region holds a backward: say whether that is because nothing needs a gradient, or because
    Dynamo compiled none of the forward (in its own words, read from its graph-break counts)."""
    if not gradients_came and not breaks:
        raise NoDifferentiableOutputError(
            f"{name} produced no backward graph: no output depends on an input or parameter requiring grad."
        )
    says = f": Dynamo says {dynamo_words(next(iter(breaks)))}" if breaks else ""
    raise ExtractionFailed(
        f"{name} has no backward graph to show: its forward ran outside every compiled region, Dynamo compiled "
        f"no part of it{says}"
    )


def _leaf(value: torch.Tensor) -> torch.Tensor:
    """The input as a fresh leaf: inference tensors (made under `torch.inference_mode()`) cannot be saved
    for backward, so those are copied."""
    return value.clone() if value.is_inference() else value.detach()


@dataclasses.dataclass
class _Inputs:
    """The call's inputs with their requires_grad set: positional, then by keyword."""

    args: list
    kwargs: dict[str, object]


_Capture = tuple[CaptureSession, list[str], list[str], bool]
"""A capture: the session, what to tell about the outputs, the run's notes, and whether backward ran."""


def _capture_by_route(
    call: _Call, inputs: _Inputs, resolved: Partitioner, mode: Mode, capture_scalars: bool
) -> _Capture:
    """torch.fx where it keeps the model's meaning, else (or when it fails) Dynamo; on Dynamo, again with the
    settings torch's own hints name where they are safe for a capture (`_SWITCHES`)."""
    fx = fx_route_possible(call.model, inputs.args, bool(inputs.kwargs), call.output, capture_scalars, call.backend)
    routes = ["fx", "dynamo"] if fx else ["dynamo"]
    preset = _preset(call)
    for route in routes:
        try:
            captured = _attempt(
                route, call, inputs, resolved, mode, capture_scalars, preset if route == "dynamo" else {}
            )
        except NotForFx:
            continue
        except BwdWidgetsError:
            raise
        except Exception as error:  # noqa: BLE001 - any failure of torch or the model: one sentence
            if route != routes[-1]:
                continue  # what torch.fx's graph cannot do (data-dependent ops), Dynamo may
            raise _failure(call, error) from None
        if route == "fx":
            return captured
        named = {s: why for s, why in _switches_named(captured[0].graph_breaks).items() if s not in preset}
        captured, settings = _past_refusals(captured, named, call, inputs, resolved, mode, capture_scalars, preset)
        if preset:
            captured = (captured[0], captured[1], [*(_SWITCHES[s] for s in preset), *captured[2]], captured[3])
        if captured[0].repeated_region:
            whole = _traced_into_skipped(call, inputs, resolved, mode, capture_scalars, settings)
            if whole is not None:
                return whole
        return captured
    raise AssertionError("the last route either returns or raises")


ROUTE_BY_THREAD: dict[int, str] = {}
"""The route ("fx" or "dynamo") each thread's capture is taking now: what the cell's progress line reads to
name the tracer at work (`jupyter/progress.py`), since AOT Autograd and Dynamo each call the other's tracer."""


def _attempt(
    route: str,
    call: _Call,
    inputs: _Inputs,
    resolved: Partitioner,
    mode: Mode,
    capture_scalars: bool,
    settings: dict[str, bool],
) -> _Capture:
    """One capture by `route`, under Dynamo `settings` for its own trace (put back after, whatever happens)."""
    session = _session(call, inputs, resolved, mode)
    options: dict[str, Any] = dict(settings)
    patched = dynamo_config.patch(options) if options else contextlib.nullcontext()
    ROUTE_BY_THREAD[threading.get_ident()] = route
    before = graph_break_reasons()
    logger_calls = LoggerCalls()
    try:
        with patched:
            told, notes, backward_ran = _run(session, route, call, inputs, mode, capture_scalars, logger_calls)
    finally:
        ROUTE_BY_THREAD.pop(threading.get_ident(), None)
        session.finish()
    session.graph_breaks = graph_break_reasons() - before
    if session.graph_breaks or len(session.regions) > 1:
        notes = [*notes, *_graph_breaks(session.graph_breaks, len(session.regions))]
    scalars = _scalar_setting(session, capture_scalars)
    if scalars:
        notes = [*notes, _SCALARS_KEPT]
    session.torch_compile_settings = {**settings, **logger_calls.setting(), **scalars}
    logged = logger_calls.note()
    return session, told, notes if logged is None else [*notes, logged], backward_ran


def _scalar_setting(session: CaptureSession, capture_scalars: bool) -> dict[str, bool]:
    """`capture_scalar_outputs`, as the capture set it, where a graph shown reads a number from a tensor (`.item()`,
    `CaptureSession.reads_scalar`) and the user's setting is off: `torch.compile` then breaks the graph there."""
    if not capture_scalars or dynamo_config.capture_scalar_outputs or not session.reads_scalar:
        return {}
    return {"capture_scalar_outputs": True}


_SCALARS_KEPT = (
    "a graph here reads a scalar from a tensor (.item()) and keeps it inside, as torch._dynamo.config."
    "capture_scalar_outputs does (this capture set it for its own trace: extract's capture_scalars, True unless told); "
    "torch.compile with your settings breaks the graph there, as extract(..., capture_scalars=False) shows."
)


def _graph_breaks(reasons: Counter[str], regions: int) -> list[str]:
    """The breaks between a capture's regions, in Dynamo's words: each reason it recorded, with the user's line
    where the reason names it; where it recorded none, that it did not (its log does: never a guess here)."""
    if reasons:
        eager = [note for reason in reasons if (note := eager_frame_note(reason)) is not None]
        return [*dict.fromkeys(graph_break_note(reason) for reason in reasons), *dict.fromkeys(eager)]
    return [
        f"Dynamo broke the forward into {regions} compiled regions and recorded no reason on this torch: "
        "TORCH_LOGS=graph_breaks shows where and why."
    ]


def _failure(call: _Call, error: Exception) -> BwdWidgetsError:
    """The capture's failure as one sentence: ours as we raised it, torch's refusal to change a computed tensor's
    requires_grad pointed at `requires_grad=`, anything else in torch's words and the user's line."""
    ours = raised_by_us(error)
    if ours is not None:
        return ours
    refused = _input_gradient_refused(call, error)
    if refused is not None:
        return refused
    return ExtractionFailed(f"torch could not capture {call.name}: {describe_failure(error)}")


_NON_LEAF_FLAG = "you can only change requires_grad flags of leaf variables"
"""torch's refusal (autograd's `requires_grad` setter) to set the flag on a tensor computed from one needing a
gradient: a model that sets it on its input's features in training (transformers' Wav2Vec2) meets it when its
input gets a gradient, which a training step's data never has."""


def _input_gradient_refused(call: _Call, error: BaseException) -> ExtractionFailed | None:
    """Torch refused a model's `t.requires_grad = True` on a tensor computed from an input that has a gradient:
    the input's gradient was extract's choice (floating inputs get one by default), so say how to choose
    otherwise."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    inputs = [n for n in call.arg_names if call.requires_grad.get(n) and n not in call.parameters]
    if not inputs or not any(_NON_LEAF_FLAG in str(e) for e in chain):
        return None
    choice = ", ".join(f"{n!r}: False" for n in inputs)
    where = re.search(r" \(at (.+)\)$", describe_failure(error))
    line = f" (at {where.group(1)})" if where else ""
    return ExtractionFailed(
        f"{call.name} sets requires_grad on a tensor it computes from {', '.join(inputs)}{line}, which torch "
        "refuses while that input has a gradient, and extract gives floating-point inputs one unless told: pass "
        f"requires_grad={{{choice}}} to extract, as a training step's data has none."
    )


_SWITCHES = {
    "allow_rnn": (
        "Dynamo leaves nn.RNN, nn.GRU and nn.LSTM out of its graphs unless torch._dynamo.config.allow_rnn is set, "
        "so this capture set it for its own trace only: the recurrent layers are in the graphs, and your setting is "
        "as it was."
    ),
    "skip_fwd_side_effects_in_bwd_under_checkpoint": (
        "Dynamo breaks the graph at a checkpoint whose forward has a Python side effect (it cannot repeat one in "
        "the backward's recomputation), which leaves the checkpointed layers outside every compiled region; this "
        "capture set torch._dynamo.config.skip_fwd_side_effects_in_bwd_under_checkpoint for its own trace only, as "
        "Dynamo's hint says, so they are captured whole (the recomputation does not repeat the side effects), and "
        "your setting is as it was."
    ),
}
"""Dynamo's settings a capture may set for its own trace when Dynamo's hint names one as the way past what it
refused, with the note that says so. Each leaves the graphs' meaning as eager autograd's: the recurrent layers'
ops (Dynamo calls its RNN support experimental: the zoo's LSTM and GRU models check their gradients against
eager), or the checkpointed region without its Python side effects replayed in backward."""
_NAMED_SETTING = re.compile(r"torch\._dynamo\.config\.(\w+)\s*=\s*True")


def _switches_named(breaks: Counter[str]) -> dict[str, str]:
    """The settings of `_SWITCHES` that Dynamo's own words name, unset here, each with the reason that named it."""
    named: dict[str, str] = {}
    for reason in breaks:
        for setting in _NAMED_SETTING.findall(reason):
            if setting in _SWITCHES and dynamo_setting(setting) and not getattr(dynamo_config, setting):
                named.setdefault(setting, reason)
    return named


def _preset(call: _Call) -> dict[str, bool]:
    """The settings of `_SWITCHES` a Dynamo capture starts with: `allow_rnn` where the model is an nn.RNN, nn.GRU
    or nn.LSTM (or a method of one) and the user's setting is off. Dynamo compiles none of it otherwise, and its
    words on 2.15 do not name the setting (a subclass's own forward fails the trace)."""
    owner = getattr(call.model, "__self__", call.model)
    return {"allow_rnn": True} if isinstance(owner, RECURRENT_LAYERS) and not dynamo_config.allow_rnn else {}


def _past_refusals(
    first: _Capture,
    named: dict[str, str],
    call: _Call,
    inputs: _Inputs,
    resolved: Partitioner,
    mode: Mode,
    capture_scalars: bool,
    preset: dict[str, bool],
) -> tuple[_Capture, dict[str, bool]]:
    """Capture again with the settings Dynamo's hints name (`named`: `_switches_named`) beside `preset` (those the
    first capture was made with), and keep that capture, with a note for each, where it captured anything; else the
    first, with a note saying what was tried. Returns the capture kept and the settings it was made with."""
    if not named:
        return first, preset
    settings = {**preset, **dict.fromkeys(named, True)}
    try:
        again = _attempt("dynamo", call, inputs, resolved, mode, capture_scalars, settings)
    except Exception as error:  # noqa: BLE001 - the retry is optional: any failure keeps the first capture
        tried = ", ".join(f"torch._dynamo.config.{s}" for s in named)
        note = f"a capture with {tried} set, as Dynamo's hint says, failed too: {describe_failure(error)}"
        return (first[0], first[1], [*first[2], note], first[3]), preset
    if not again[0].regions:
        return first, preset
    return (again[0], again[1], [*(_SWITCHES[s] for s in named), *again[2]], again[3]), settings


def _session(call: _Call, inputs: _Inputs, resolved: Partitioner, mode: Mode) -> CaptureSession:
    """A fresh capture, the gradients of the call's tensors cleared (a capture before may have set them)."""
    module = call.model if isinstance(call.model, torch.nn.Module) else None
    for tensor in list(call.parameters.values()) + inputs.args + list(inputs.kwargs.values()):
        if isinstance(tensor, torch.Tensor):
            tensor.grad = None
    return CaptureSession(
        resolved, mode == "real", call.input_names, call.signature, module=module, backend=call.backend
    )


def _traced_into_skipped(
    call: _Call, inputs: _Inputs, resolved: Partitioner, mode: Mode, capture_scalars: bool, settings: dict[str, bool]
) -> _Capture | None:
    """Dynamo skips functions torch marks so (`checkpoint_sequential` in torch.utils): it compiles the frame
    they call, which the model then runs again and again. Capture again with torch's own switch to trace into
    them (`torch._dynamo.dont_skip_tracing`), beside the `settings` the kept capture used; None (keep the first
    capture and its note) where that fails or still repeats a region."""
    if not dynamo_setting("dont_skip_tracing"):
        return None
    try:
        session, told, notes, backward_ran = _attempt(
            "dynamo", call, inputs, resolved, mode, capture_scalars, {**settings, "dont_skip_tracing": True}
        )
    except Exception:  # noqa: BLE001 - the retry is optional: any failure keeps the first capture
        return None
    if session.repeated_region:
        return None
    told_first = (
        "Dynamo skips functions torch marks as not to be traced (such as checkpoint_sequential), so it compiled "
        "one frame that the model ran again and again; captured again tracing into them "
        "(torch._dynamo.dont_skip_tracing), which gave the whole forward."
    )
    return session, told, [told_first, *[_SWITCHES[s] for s in settings], *notes], backward_ran


def _run(
    session: CaptureSession,
    route: str,
    call: _Call,
    inputs: _Inputs,
    mode: Mode,
    capture_scalars: bool,
    logger_calls: LoggerCalls,
) -> tuple[list[str], list[str], bool]:
    """Compile by `route` and run forward (and, in real mode, backward) once; the session records, and
    `logger_calls` where the forward logs.

    Returns what to tell about the outputs, the run's notes, and whether the real backward ran."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(left_as_it_was(call.model))  # each route's try: a failed one leaves no Proxy for the next
        stack.enter_context(torch.random.fork_rng(devices=[]))
        stack.enter_context(functorch_config.patch(force_non_lazy_backward_lowering=True))
        stack.enter_context(dynamo_config.patch(capture_scalar_outputs=capture_scalars))
        stack.enter_context(torch_failure_logs_quiet())
        stack.enter_context(torch.inference_mode(False))  # extract called inside inference_mode still records
        stack.enter_context(torch.enable_grad())
        session.rng_state = torch.get_rng_state()
        if route == "dynamo":
            stack.enter_context(own_dynamo_entries())
            stack.enter_context(dynamo_config.patch(ignore_logging_functions=logger_calls.ignored))
        args, kwargs = inputs.args, inputs.kwargs
        if mode == "fake":
            faked_values = stack.enter_context(faked(call.model, args + list(kwargs.values())))
            args, kwargs = faked_values[: len(args)], dict(zip(kwargs, faked_values[len(args) :]))
            compiled = _compiled(session, route, call, args, logger_calls)
            session.held = _held(call, args + list(kwargs.values()))
            picked = _picked(compiled(*args, **kwargs))
            _read_saved_outside(session, route, picked)
            session.started_from_loss = starts_from_loss(picked.value)
            return _told(picked, call.output), [], False
        session.keep_unchanged(_changeable(call.model, args + list(kwargs.values())))
        try:
            compiled = _compiled(session, route, call, args, logger_calls)
            session.held = _held(call, args + list(kwargs.values()))
            picked = _picked(compiled(*args, **kwargs))
            _read_saved_outside(session, route, picked)
            session.started_from_loss = starts_from_loss(picked.value)
            told = _told(picked, call.output)
            differentiable = differentiable_outputs(picked.value)
            try:
                torch.autograd.backward(differentiable, [torch.ones_like(t) for t in differentiable])
            except RuntimeError as error:
                if not session.regions:
                    raise
                note = f"the real backward run failed, so no real backward values are kept: {one_line(error)}"
                return told, [note], False
        finally:
            session.restore_mutated()
    return told, [], True


def _held(call: _Call, values: list) -> list[torch.Tensor]:
    """What the model and the caller hold whatever the forward saves: the model's parameters and buffers (fake ones
    inside fake mode) and the tensors its modules keep as plain attributes, a function's closure tensors, and the
    call's own tensors `values`, those nested in the containers pytree flattens (lists, tuples, dicts) included."""
    module = call.model if isinstance(call.model, torch.nn.Module) else None
    held = [*module.parameters(), *module.buffers()] if module is not None else []
    if module is not None:
        held += [v for m in module.modules() for v in vars(m).values() if isinstance(v, torch.Tensor)]
    nested = pytree.tree_leaves(values)
    return held + [*call.parameters.values(), *(v for v in nested if isinstance(v, torch.Tensor))]


def _read_saved_outside(session: CaptureSession, route: str, picked: Picked) -> None:
    """On Dynamo's route, what eager autograd saved outside every compiled region for the picked output's backward
    (`session.eager_storages`, keyed as the regions key what they took in and handed on), read before the backward
    runs; what the model and the caller hold (`session.held`) left out. The torch.fx route compiles the whole forward
    as one region: nothing runs outside it. Either way the forward is over (`CaptureSession.forward_ran`)."""
    if route == "dynamo":
        outputs = [t for _, t in differentiable_leaves(picked.value)]
        session.eager_storages = saved_by_eager(outputs, session.held or [], session.noted_key, session.canonical)
    session.forward_ran()


def _changeable(model: Callable, values: list) -> list[torch.Tensor]:
    """What the real run may change in place, compiled or not (eager code after a graph break, a hook): the
    model's buffers and the inputs that need no gradient (autograd forbids changing the others in place)."""
    buffers = list(model.buffers()) if isinstance(model, torch.nn.Module) else []
    return buffers + [v for v in values if isinstance(v, torch.Tensor) and not v.requires_grad]


def _picked(result: object) -> Picked:
    """The compiled call's result, on either route: what the backward starts from, and what the output held."""
    assert isinstance(result, tuple) and len(result) == 3
    return Picked(*result)


def _told(picked: Picked, output: OutputChoice) -> list[str]:
    """A note naming the outputs the backward starts from, where the output holds more than one part."""
    differentiable_outputs(picked.value)  # no differentiable output: say so now, in one sentence
    note = outputs_note(picked, output)
    return [] if note is None else [note]


def _compiled(session: CaptureSession, route: str, call: _Call, args: list, logger_calls: LoggerCalls) -> Callable:
    if route == "fx":
        assert isinstance(call.model, torch.nn.Module)  # fx_route_possible admits modules only
        return session.compile_fx(call.model, args, logger_calls)
    return session.compile_dynamo(selecting(call.model, call.output))
