"""A partition is torch's partition: at every memory budget, the values bwd_widgets shows as saved are the ones
`torch.compile(model, backend="aot_eager")` saves for the same model, inputs and budget, and with
`bw.extract(..., backend="inductor")` the ones `torch.compile(model)` (Inductor, its C++ code compiled) saves.

Counted independently of our code: a `saved_tensors_hooks` pack hook around the compiled call sees every tensor
the compiled forward hands autograd to keep; each storage counts once, leaving out the parameters, buffers and
inputs (and views of them), which the model and the caller hold anyway. That is the bytes bwd_widgets calls
`saved_activation_bytes`. Held on the course's models, models from the zoo called as their docs call them, and
GraphNet samples, at budgets 0 to 1.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import io
import logging
import warnings
from typing import TYPE_CHECKING

import pytest
import torch
import torch._dynamo
import torch._dynamo.config as dynamo_config
import torch._inductor.config as inductor_config
import transformers.utils.logging  # noqa: F401 - adds warning_once, info_once and warning_advice to every Logger
import zoo_models as zoo
from compiled_saves import CompiledSaves, counted_saves, torch_compile_saved_bytes

import bwd_widgets as bw
from bwd_widgets.core import logger_calls
from bwd_widgets.core.kinds import BACKENDS, MODES
from bwd_widgets.core.logger_calls import logger_methods
from bwd_widgets.examples import MLP, Block, ConvBN, Transformer

from models import ASKS_WHETHER_COMPILING, AsksWhetherCompiling
from shared_data import shared_path

if TYPE_CHECKING:
    from collections.abc import Callable

BUDGETS = (0.0, 0.1, 0.3, 0.5, 0.7, 1.0)


def _course(make: type, shape: tuple, integer: bool = False, **options: int) -> functools.partial:
    def build() -> tuple[object, tuple, dict]:
        torch.manual_seed(0)
        x = torch.randint(0, 64, shape) if integer else torch.randn(*shape)
        return make(**options), (x,), {}

    return functools.partial(build)


def _zoo(name: str) -> functools.partial:
    def build() -> tuple[object, tuple, dict]:
        model, inputs = zoo.BY_NAME[name].make()
        return model, (), inputs

    return functools.partial(build)


def _sample(rel: str) -> functools.partial:
    """A GraphNet sample: bwd_widgets extracts the sample (GraphNet's rule for which inputs need a gradient),
    torch.compile runs its module on the same inputs."""

    def build() -> tuple[object, tuple, dict]:
        sample = bw.load_graphnet_sample(shared_path("graphnet_samples") / rel)
        return sample, tuple(sample.inputs), {}

    return functools.partial(build)


def _with_gradients_as_decided(model: object, args: tuple, kwargs: dict, decided: dict[str, bool]) -> tuple:
    """The call's tensors needing a gradient as the extraction decided (by argument name), for torch.compile."""
    names = list(inspect.signature(model.forward if isinstance(model, torch.nn.Module) else model).parameters)

    def flagged(name: str, value: object) -> object:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value.detach().requires_grad_(decided.get(name, False))
        return value

    return (
        tuple(flagged(name, value) for name, value in zip(names, args)),
        {name: flagged(name, value) for name, value in kwargs.items()},
    )


MODELS = {
    "course_mlp": _course(MLP, (8, 16), width=16, depth=4),
    "course_block": _course(Block, (2, 16, 32), width=32),
    "course_transformer": _course(Transformer, (4, 32), integer=True, width=64, depth=2, heads=4, vocab=64),
    "course_conv_bn": _course(ConvBN, (2, 3, 16, 16)),
    "zoo_bert": _zoo("bert_classifier"),
    "zoo_vit": _zoo("vit"),
    "zoo_vae": _zoo("diffusers_vae"),  # keeps a `chunk`ed piece of its posterior: the whole storage counts
    "asks_whether_compiling": _course(AsksWhetherCompiling, (8, 16)),
    "graphnet_simcc_mobilenetv2": _sample("mmpose/simcc_mobilenetv2"),
    "graphnet_lraspp": _sample("torchvision/lraspp_mobilenet_v3_large"),
}
"""Models whose whole forward is one compiled region and whose output is what the backward starts from (a model
returning more, a transformers LM's logits beside its loss, is compiled by torch.compile with those outputs too),
and GraphNet samples that take no size as an argument (one that does cannot be sized by torch's partitioner on
the torch.fx route below budget 1: tests/test_torch_reasons.py holds its one-sentence error)."""


@functools.cache
def _made(name: str) -> tuple[object, tuple, dict]:
    return MODELS[name]()


INDUCTOR_BUDGETS = {name: (0.0, 0.3, 0.7, 1.0) if name.startswith("course_") else (0.5,) for name in MODELS}
"""Inductor compiles each budget's forward to C++ (4 s for the course's MLP, 15 s for a transformer block, 40 s to 2
minutes for a GraphNet sample on these machines): every budget on the course's models, one on the others, and not the
LR-ASPP sample (its compile alone takes two minutes a budget); the joint graphs are the same as aot_eager's tests
read, decomposed."""
del INDUCTOR_BUDGETS["graphnet_lraspp"]

CASES = [
    pytest.param(backend, name, budget, marks=[pytest.mark.slow] if backend == "inductor" else [])
    for backend in BACKENDS
    for name in sorted(MODELS)
    for budget in (INDUCTOR_BUDGETS.get(name, ()) if backend == "inductor" else BUDGETS)
]
"""Every model at every budget, on each backend bw.extract offers, from the one list of models."""


@pytest.mark.parametrize(("backend", "name", "budget"), CASES)
def test_the_saved_set_is_torch_compiles_at_every_budget(backend: str, name: str, budget: float) -> None:
    """Bytes, and tensors: each storage bwd_widgets counts (`activation_bytes` above 0) is one the pack hook saw."""
    target, args, kwargs = _made(name)
    sample = isinstance(target, bw.GraphNetSample)
    call = () if sample else args
    ours = bw.extract(
        target, *call, partitioner="min_cut", memory_budget=budget, backend=backend, cache=False, **kwargs
    )
    model = target.module if sample else target
    args, kwargs = _with_gradients_as_decided(model, args, kwargs, ours.requires_grad)
    assert len(ours.partitions) == 1 and ours.backend == backend
    # where Inductor's code generation copies convolution inputs to channels_last (the partition's note says so,
    # tests/test_inductor_backend.py holds the copies), the partition is held with that layout choice off
    layout = ours.partitions[0].layout_copies and inductor_config.patch(layout_optimization=False)
    with layout or contextlib.nullcontext():
        compiled = counted_saves(model, args, kwargs, backend=backend, budget=budget)
    shown = [s.activation_bytes for s in ours.saved_tensors if s.activation_bytes]
    assert (ours.saved_activation_bytes, len(shown)) == (compiled.bytes, compiled.tensors)


ZOO_BUDGETS = (0.1, 0.5, 1.0)
"""Budgets across the range for every zoo model (the course's models above take every budget in BUDGETS; a
compile of a zoo model costs 2-10 s here)."""


@functools.cache
def _zoo_extraction(name: str) -> tuple[object, tuple, dict, bw.BackwardExtraction]:
    """One extraction per zoo model, called as a user calls it (`model(**inputs)`, vision models `model(x)`),
    partitioned again at each budget below."""
    entry = zoo.BY_NAME[name]
    model, inputs = entry.make()
    args, kwargs = (tuple(inputs.values()), {}) if entry.positional else ((), inputs)
    return model, args, kwargs, bw.extract(model, *args, partitioner="min_cut", cache=False, **kwargs)


ZOO_TRAINED = zoo.tested() + [entry for entry in zoo.SPEECH if entry.output == "loss"]
"""Every zoo model the checks run on, and the speech models called with labels (a training step): their forward
is 7 compiled regions, two of them run once per encoder layer, with eager code between."""


@pytest.mark.parametrize("budget", ZOO_BUDGETS)
@pytest.mark.parametrize("name", [entry.name for entry in ZOO_TRAINED])
def test_every_zoo_model_saves_what_torch_compile_saves_under_the_settings_it_names(name: str, budget: float) -> None:
    """Every zoo model: what the capture shows saved (its regions' storages, each once, once per run of a region;
    and what eager autograd saved between regions) is what `torch.compile(model)` saves, storage for storage, when
    compiled under the extraction's `torch_compile_settings` (what its notes say torch.compile does otherwise: a
    logger call it breaks the graph at, a recurrent layer it leaves out)."""
    model, args, kwargs, extraction = _zoo_extraction(name)
    ours = extraction.rerun("min_cut", budget)
    args, kwargs = _with_gradients_as_decided(model, args, kwargs, ours.requires_grad)
    outside = CompiledSaves()
    with dynamo_config.patch(**ours.torch_compile_settings):
        compiled = counted_saves(model, args, kwargs, backend="aot_eager", budget=budget, outside_regions=outside)
    assert sorted(ours.saved_storage_bytes + list(ours.saved_outside_regions)) == sorted(compiled.storage_bytes)
    assert sorted(ours.saved_outside_regions) == sorted(outside.storage_bytes)


@pytest.mark.parametrize("asks", sorted(ASKS_WHETHER_COMPILING))
@pytest.mark.parametrize("mode", MODES)
def test_code_asking_whether_torch_compile_runs_gets_torch_compiles_answer(asks: str, mode: str) -> None:
    """torch.fx would answer False where torch.compile answers True: the partition is of the compiled path,
    whichever way the model asks (the asking itself sends the capture to Dynamo), in each mode."""
    torch.manual_seed(0)
    model, x = AsksWhetherCompiling(asks), torch.randn(8, 16)
    ours = bw.extract(model, x, partitioner="min_cut", mode=mode, cache=False)
    compiled = counted_saves(model, (x,), backend="aot_eager")
    shown = [s.activation_bytes for s in ours.saved_tensors if s.activation_bytes]
    assert (ours.saved_activation_bytes, len(shown)) == (compiled.bytes, compiled.tensors) == (512, 1)
    assert "sin" not in ours.forward_code and "relu" in ours.forward_code


@pytest.mark.parametrize("name", ["course_transformer", "zoo_bert"])
def test_a_sweep_point_is_torch_compiles_partition_too(name: str) -> None:
    """The sweep partitions one kept trace again per budget: each point is what a compile at it saves."""
    model, args, kwargs = _made(name)
    sweep = bw.sweep(model, *args, budgets=[0.2, 0.6], progress=False, **kwargs)
    args, kwargs = _with_gradients_as_decided(model, args, kwargs, sweep.points[0].extraction.requires_grad)
    for point in sweep.points:
        assert point.saved_activation_bytes == torch_compile_saved_bytes(model, args, kwargs, point.budget)


PIECES = {
    "chunk": lambda h: h.chunk(2, dim=-1),
    "split": lambda h: h.split(8, dim=-1),
    "split_with_sizes": lambda h: h.split([4, 12], dim=-1),
    "tensor_split": lambda h: h.tensor_split(2, dim=-1),
    "unbind": lambda h: h.unbind(0),
}
"""Views that return several tensors (their schema: `Tensor(a)[]`), each cutting a layer's output into pieces."""


class SavesAPiece(torch.nn.Module):
    """A layer's output cut into pieces (`PIECES[how]`), one piece kept for backward by its product with a scale
    (the scale's gradient reads it): the piece shares the whole output's storage, so autograd holds all of it
    (diffusers' VAE keeps its posterior's `chunk`ed mean so)."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how, self.linear, self.scale = how, torch.nn.Linear(16, 16), torch.nn.Parameter(torch.ones(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        first, second, *_ = PIECES[self.how](self.linear(x))
        return (first * self.scale).sum() + second.sum()


@pytest.mark.parametrize("budget", [0.0, 1.0])
@pytest.mark.parametrize("how", sorted(PIECES))
def test_a_saved_piece_of_a_view_op_counts_its_whole_storage_as_torch_compile_does(how: str, budget: float) -> None:
    torch.manual_seed(0)
    model, x = SavesAPiece(how), torch.randn(8, 16)
    ours = bw.extract(model, x, partitioner="min_cut", memory_budget=budget, cache=False)
    compiled = counted_saves(model, (x,), backend="aot_eager", budget=budget)
    shown = [s.activation_bytes for s in ours.saved_tensors if s.activation_bytes]
    assert (ours.saved_activation_bytes, len(shown)) == (compiled.bytes, compiled.tensors)
    assert ours.saved_activation_bytes == ours.partitions[0].memory.saved_bytes == (512 if budget else 0)


IGNORED_BUDGET_MODEL = _course(Transformer, (1, 4), integer=True, width=256, depth=2, heads=4, vocab=512)
"""Plain min-cut's plan weighs no more than the forward's inputs (its parameters included, by torch's count):
torch keeps that plan at every budget above 0 (tests/test_course_claims.py holds the course's word on it)."""


@pytest.mark.parametrize("budget", [0.1, 0.5, 0.9])
def test_where_torch_ignores_the_budget_the_partition_says_so_in_torchs_terms(budget: float) -> None:
    model, args, kwargs = IGNORED_BUDGET_MODEL()
    whole = bw.extract(model, *args, partitioner="min_cut", memory_budget=1.0, cache=False)
    ours = whole.rerun("min_cut", budget)
    decisions = ours.partitions[0].decisions
    assert decisions.min_cut_bytes <= decisions.input_bytes and decisions.budget_ignored
    assert ours.saved_activation_bytes == whole.saved_activation_bytes
    assert ours.saved_activation_bytes == torch_compile_saved_bytes(model, args, kwargs, budget)
    (note,) = [n for n in ours.notes if "ignored the memory budget" in n]
    assert f"budget {budget:g}" in note and "max_act_size <= min_act_size" in note
    assert not any("ignored the memory budget" in n for n in whole.notes), "budget 1 asks for plain min-cut"


@pytest.mark.parametrize("budget", [0.1, 0.5, 0.9])
def test_where_torch_trades_the_budget_no_partition_says_it_was_ignored(budget: float) -> None:
    model, args, kwargs = _made("course_transformer")
    ours = bw.extract(model, *args, partitioner="min_cut", memory_budget=budget, **kwargs)
    assert not ours.partitions[0].decisions.budget_ignored
    assert not any("ignored the memory budget" in n for n in ours.notes)


class _Kept(logging.Handler):
    """The records a logger made, kept rather than printed."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


LOGGER = logging.getLogger("bwd_widgets.tests.logs_in_forward")
KEPT = _Kept()
LOGGER.propagate = False  # the calls this file's models make print nothing: KEPT keeps them
LOGGER.addHandler(KEPT)
LOGGER.setLevel(logging.DEBUG)


class LogsInForward(torch.nn.Module):
    """Two layers with a logger call between them (`LOGGER.<method>`), as transformers warns once about its loss
    type: Dynamo cannot trace the call, so torch.compile breaks the graph there; the capture skips it instead."""

    def __init__(self, method: str) -> None:
        super().__init__()
        self.method, self.first, self.second = method, torch.nn.Linear(16, 16), torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.tanh(self.first(x))
        log = getattr(LOGGER, self.method)
        log(logging.INFO, "between the layers") if self.method == "log" else log("between the layers")  # the break
        return self.second(hidden).sum()


class LogsInForwardByKeyword(LogsInForward):
    """The same model with a keyword-only input: torch.fx's route takes no such model, so Dynamo's captures it."""

    def forward(self, *, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return super().forward(x)


ROUTES = {
    "torch.fx": lambda method, x: (LogsInForward(method), (x,), {}),
    "dynamo": lambda method, x: (LogsInForwardByKeyword(method), (), {"x": x}),
}
"""Each capture route's model and call (`fx_route_possible` picks the route)."""

_FORWARD, _FIRST = inspect.getsourcelines(LogsInForward.forward)
_AT = _FIRST + next(i for i, line in enumerate(_FORWARD) if line.rstrip().endswith("# the break"))
BREAK_LINE = f"{__file__}:{_AT}"
"""Where LogsInForward's logger call is: the line the note names."""


@pytest.mark.filterwarnings("ignore:The 'warn' method is deprecated:DeprecationWarning")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("route", sorted(ROUTES))
@pytest.mark.parametrize("method", sorted(logger_methods()))
def test_a_logger_call_says_where_torch_compile_breaks_and_how_to_match_it(method: str, route: str, mode: str) -> None:
    """The note's words held against torch, on either capture route and mode: torch.compile breaks the graph at
    the line named, and with the method in the user's `ignore_logging_functions` (the note's advice) it does not,
    saves the set shown, and no note is left; the user's setting is the same set, unchanged, after either capture."""
    torch.manual_seed(0)
    model, args, kwargs = ROUTES[route](method, torch.randn(8, 16))
    users = dynamo_config.ignore_logging_functions
    before = set(users)
    KEPT.records.clear()
    ours = bw.extract(model, *args, partitioner="min_cut", memory_budget=0.5, mode=mode, cache=False, **kwargs)
    assert len(ours.partitions) == 1
    # torch.fx's trace runs the call (Dynamo skips it): its record names the model's line, not bwd_widgets'
    assert all(r.pathname != logger_calls.__file__ for r in KEPT.records), [r.pathname for r in KEPT.records]
    if route == "torch.fx" and not method.endswith(("_once", "_advice")):  # transformers' own log from its file
        assert KEPT.records and {f"{r.pathname}:{r.lineno}" for r in KEPT.records} == {BREAK_LINE}
    (note,) = [n for n in ours.notes if n.startswith("torch.compile would break the graph")]
    assert f"at {BREAK_LINE} (`log(" in note and f"Logger.{method} " in note
    torch._dynamo.reset()
    assert torch._dynamo.explain(model)(*args, **kwargs).graph_break_count == 1
    with dynamo_config.patch(ignore_logging_functions={*before, getattr(logging.Logger, method)}):
        advised = bw.extract(model, *args, partitioner="min_cut", memory_budget=0.5, mode=mode, cache=False, **kwargs)
        torch._dynamo.reset()
        assert torch._dynamo.explain(model)(*args, **kwargs).graph_break_count == 0
        compiled = counted_saves(model, args, kwargs, backend="aot_eager", budget=0.5)
    assert not any(n.startswith("torch.compile would break") for n in advised.notes)
    shown = [s.activation_bytes for s in ours.saved_tensors if s.activation_bytes]
    assert (ours.saved_activation_bytes, len(shown)) == (compiled.bytes, compiled.tensors)
    assert advised.saved_activation_bytes == ours.saved_activation_bytes
    assert dynamo_config.ignore_logging_functions is users and users == before


def test_gpt2s_loss_warning_is_where_torch_compile_breaks_and_the_advice_makes_it_save_the_set_shown() -> None:
    """transformers' GPT-2 with labels warns once about its loss type: torch.compile breaks its graph there, and
    saves 4 bytes (the loss's `total_weight`) less than the one graph shown, until the note's advice is taken."""
    model, inputs = zoo.BY_NAME["gpt2"].make()
    ours = bw.extract(model, partitioner="min_cut", memory_budget=0.5, cache=False, **inputs)
    (note,) = [n for n in ours.notes if n.startswith("torch.compile would break the graph")]
    assert "transformers/modeling_utils.py:" in note and "Logger.warning_once" in note
    args, kwargs = _with_gradients_as_decided(model, (), inputs, ours.requires_grad)
    as_is = counted_saves(model, args, kwargs, backend="aot_eager", budget=0.5)
    with dynamo_config.patch(ignore_logging_functions={logging.Logger.warning_once}):  # type: ignore[attr-defined]
        advised = counted_saves(model, args, kwargs, backend="aot_eager", budget=0.5)
    shown = [s.activation_bytes for s in ours.saved_tensors if s.activation_bytes]
    assert (ours.saved_activation_bytes, len(shown)) == (advised.bytes, advised.tensors)
    assert as_is.bytes != advised.bytes, "the break changes what torch.compile saves: the note's reason to exist"


SINK = io.StringIO()
KEPT_FUNCTIONS: list[Callable] = []


def _caught_print() -> None:
    """A print the model's own code catches the failure of (as code guarding a debug print does)."""
    try:
        print("between the layers", file=SINK)
    except Exception:  # noqa: BLE001, S110 - the model's own guard: the capture must not depend on it
        pass


UNTRACEABLE = {
    "print": lambda: print("between the layers", file=SINK),
    "warnings.warn": lambda: warnings.warn("between the layers", stacklevel=1),
    "caught print": _caught_print,
    "kept warnings.warn": lambda: (KEPT_FUNCTIONS.append(warnings.warn), KEPT_FUNCTIONS[-1]("between the layers")),
    "LoggerAdapter": lambda: logging.LoggerAdapter(LOGGER, {}).warning("between the layers"),
}
"""Calls in a forward that Dynamo cannot trace (with torch's settings as they are), each as a model makes it: one
caught by the model's own code, one through a reference to the function kept for later, and a logger's call made
by Python's `logging` for the model (a `LoggerAdapter`), which no `ignore_logging_functions` entry skips."""


class CallsInForward(torch.nn.Module):
    """Two layers with a call Dynamo cannot trace between them (`UNTRACEABLE[how]`)."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how, self.first, self.second = how, torch.nn.Linear(16, 16), torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.tanh(self.first(x))
        UNTRACEABLE[self.how]()
        return self.second(hidden).sum()


class CallsInForwardByKeyword(CallsInForward):
    """The same model with a keyword-only input, for Dynamo's route."""

    def forward(self, *, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return super().forward(x)


@pytest.mark.filterwarnings("ignore:between the layers")
@pytest.mark.parametrize("by_keyword", [False, True], ids=["torch.fx", "dynamo"])
@pytest.mark.parametrize("how", sorted(UNTRACEABLE))
def test_a_call_torch_compile_breaks_the_graph_at_breaks_the_capture_there_too(how: str, by_keyword: bool) -> None:
    """Where torch.compile breaks the graph, both routes capture its regions (torch.fx would trace past the call:
    that route refuses it), and the saved set is the one its regions save, in Dynamo's words why."""
    torch.manual_seed(0)
    x = torch.randn(8, 16)
    model, args, kwargs = (
        (CallsInForwardByKeyword(how), (), {"x": x}) if by_keyword else (CallsInForward(how), (x,), {})
    )
    ours = bw.extract(model, *args, partitioner="min_cut", memory_budget=0.5, cache=False, **kwargs)
    graphs: list[torch.fx.GraphModule] = []

    def counting(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(model, backend=counting)(*args, **kwargs)
    torch._dynamo.reset()
    assert len(ours.partitions) == len(graphs) == 2
    assert any(n.startswith("Dynamo broke the graph") for n in ours.notes), ours.notes
    compiled = counted_saves(model, args, kwargs, backend="aot_eager", budget=0.5)
    # the value the break hands on, saved by the second region (and by the first, for tanh's backward): one storage
    assert sorted(ours.saved_storage_bytes + list(ours.saved_outside_regions)) == sorted(compiled.storage_bytes)
    for kept in KEPT_FUNCTIONS:  # a reference taken while torch.fx traced works as the function, after the trace
        with pytest.warns(UserWarning, match="after the capture"):
            kept("after the capture")
    KEPT_FUNCTIONS.clear()


@torch._dynamo.disable
def _run_eagerly(x: torch.Tensor) -> torch.Tensor:
    """Code torch.compile runs eagerly between two graphs (`torch.compiler.disable` is the same)."""
    return torch.sin(x) * 2


class _Scaled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.linear(x)) * 2


class _Squashed(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.linear(x))


class EagerBetweenRegions(torch.nn.Module):
    """Ops Dynamo runs eagerly, outside every compiled region (`EAGER_BETWEEN_REGIONS`): a function under
    `torch._dynamo.disable` between two layers, or a whole frame it skips (a graph break inside a loop), whose own
    ops run eagerly while each layer it calls is compiled on its own (two classes, so no region runs twice); or a
    disabled function saving the first region's output, which the second region saves too at budget 0 (it keeps
    its inputs and recomputes) and not at 0.5 and up (it keeps its frozen matmul's tanh instead); or a region
    whose output is a view of its input (the capture's graph returns a copy: `CaptureSession._copy_outputs`), which
    the next region saves where eager code saved the input."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how, self.first, self.second, self.head = how, _Scaled(), _Squashed(), torch.nn.Linear(16, 4)
        self.frozen = torch.nn.Parameter(torch.randn(16, 16), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.how == "disabled function":
            return self.head(_run_eagerly(self.first(x))).sum()
        if self.how == "saved by a region at some budgets":
            hidden = self.first(x)
            sines = _run_eagerly(hidden)
            return self.head(torch.tanh(hidden @ self.frozen) * sines).sum()
        if self.how == "a region hands on a view of its input":  # the slice is a region of its own
            hidden = self.first(x)
            sines = _run_eagerly(hidden)
            part = hidden[:, :8]
            twice = _run_eagerly(sines)
            return (torch.tanh(part @ self.frozen[:8]) * twice).sum() + self.head(sines).sum()
        if self.how == "a region hands on a view of its second input":  # eager's output comes first
            hidden = self.first(x)
            sines = _run_eagerly(hidden)
            tripled, part = sines * 3, hidden[:, :8]
            return self.head(tripled).sum() + _run_eagerly(part).sum()
        for layer in (self.first, self.second):
            x = torch.cos(layer(x)) * x
            torch._dynamo.graph_break()
        return self.head(x).sum()


EAGER_BETWEEN_REGIONS = (
    "disabled function",
    "frame skipped",
    "saved by a region at some budgets",
    "a region hands on a view of its input",
    "a region hands on a view of its second input",
)


@functools.cache
def _eager_between_regions(how: str, mode: str, captured_at: float) -> bw.BackwardExtraction:
    torch.manual_seed(0)
    model, x = EagerBetweenRegions(how), torch.randn(8, 16)
    return bw.extract(model, x, partitioner="min_cut", memory_budget=captured_at, mode=mode, cache=False)


@pytest.mark.parametrize("budget", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("captured_at", [0.0, 1.0])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("how", EAGER_BETWEEN_REGIONS)
def test_what_eager_autograd_saves_between_regions_is_what_torch_compiles_run_saves_there(
    how: str, mode: str, captured_at: float, budget: float
) -> None:
    """The capture's regions are torch.compile's graphs (the torch.fx route refuses a disabled function, which it
    would trace into), and what eager autograd saves outside them, counted as the capture's forward ran, is what it
    saves there in a torch.compile run at `budget`, by the tests' own pack hook: storage for storage, none a region
    saves too; with the regions' own storages, everything the run saves. Whatever budget the capture ran at: a
    storage eager code and a region both save at one budget and only eager code at another counts once at each."""
    extraction = _eager_between_regions(how, mode, captured_at)
    ours = extraction if budget == captured_at else extraction.rerun("min_cut", budget)
    torch.manual_seed(0)
    model, x = EagerBetweenRegions(how), torch.randn(8, 16)
    graphs: list[torch.fx.GraphModule] = []

    def counting(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(model, backend=counting)(x)
    torch._dynamo.reset()
    assert len(ours.partitions) == len(graphs) >= 2
    outside = CompiledSaves()
    compiled = counted_saves(
        model, (x.requires_grad_(ours.requires_grad["x"]),), {}, budget=budget, outside_regions=outside
    )
    assert sorted(ours.saved_outside_regions) == sorted(outside.storage_bytes)
    # and with what the regions save (the second region's input, made by the first or by the eager code, included)
    assert sorted(ours.saved_storage_bytes + list(ours.saved_outside_regions)) == sorted(compiled.storage_bytes)
    if outside.storage_bytes:
        said = f"eager autograd saved {outside.bytes:,} B for backward in {outside.tensors} tensor"
        assert any(said in note for note in ours.notes), ours.notes
    else:
        assert not any("eager autograd saved" in note for note in ours.notes), ours.notes
    assert how != "disabled function" or budget != 0.0 or outside.bytes, "the disabled sine saves its input"
    if how == "saved by a region at some budgets":  # the case is what it says, by torch's own count
        assert bool(outside.bytes) == (budget > 0), outside.storage_bytes


class _BrokenBlock(torch.nn.Module):
    """A block with a graph break inside: its first region saves its `tanh` output for tanh's backward, and the
    region after the break takes that value in and saves it for its linear layer's weight gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.tanh(self.first(x))
        torch._dynamo.graph_break()
        return self.second(hidden)


class RegionsSharingAValue(torch.nn.Module):
    """`runs` blocks of one class called in a loop: Dynamo skips the loop's frame (its ops run eagerly) and compiles
    each block's two regions once, which every block then runs. One storage kept by both regions' saves, in each
    run."""

    def __init__(self, runs: int) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(_BrokenBlock() for _ in range(runs))
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x).sum()


@pytest.mark.parametrize("budget", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("x_grad", [False, True])
@pytest.mark.parametrize("runs", [1, 3])
def test_saved_bytes_across_regions_count_each_storage_once_and_every_run(
    runs: int, x_grad: bool, mode: str, budget: float
) -> None:
    """What the regions keep, as torch.compile's run keeps it by the tests' pack hook: a storage two regions save
    counts once, an input the forward made counts where a region saves it, and a region run once per block counts
    every run. With the call's `x` needing a gradient, the first block's region runs on it (held by the caller) and
    again on what the block before made."""
    torch.manual_seed(0)
    model, x = RegionsSharingAValue(runs), torch.randn(8, 16)
    ours = bw.extract(
        model, x, partitioner="min_cut", memory_budget=budget, mode=mode, cache=False, requires_grad={"x": x_grad}
    )
    compiled = counted_saves(model, (x.requires_grad_(ours.requires_grad["x"]),), {}, budget=budget)
    assert sorted(ours.saved_storage_bytes + list(ours.saved_outside_regions)) == sorted(compiled.storage_bytes)
    assert ours.saved_activation_bytes == sum(ours.saved_storage_bytes)
    if budget == 1.0:  # the value the break hands on is saved on both sides of it: one storage, counted once
        keys = [
            [p.storages.kept(0, s.storage_ref, 0)[0] for s in p.saved_tensors if s.storage_ref] for p in ours.partitions
        ]
        assert any(set(first) & set(second) for first, second in zip(keys, keys[1:])), keys
