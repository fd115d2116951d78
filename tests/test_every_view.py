"""Every public way to see or write a result, on every kind of partition there is, in both modes, on a handful of
model families.

Each feature had its tests on its own path, and the README's own min-cut example crashed in a view (the static
SVG's edge colours) that no test took on a min-cut partition. So the cases here are generated from lists the code
already has, and a new one joins by itself:

- the views: the façade's exports whose first parameter is an extraction (`bw.__all__`, by signature), the
  extraction's public properties and methods, the widget (payload, first view, mimebundle, static picture), the
  charts, `repr`;
- the partitions: each registered partitioner (`bw.partitioner_names()`), min-cut at 1, 0.5 and 0, a user's own
  `torch.utils.checkpoint`, each plan of an advice (the offload plan through the advice's own views), a sweep and
  its point, a comparison and its members;
- the modes: `MODES` (real and fake).
"""

from __future__ import annotations

import functools
import html
import inspect
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import bwd_widgets as bw
from bwd_widgets.core.kinds import MODES
from bwd_widgets.core.units import format_bytes
from bwd_widgets.examples import MLP, ConvBN
from bwd_widgets.extraction.result import BackwardExtraction
from bwd_widgets.studio.advisor.plans import Advice
from bwd_widgets.studio.compare import Comparison, Sweep
from bwd_widgets.views import plot
from bwd_widgets.views.html import saved_table

from models import GraphBreak


@dataclass(frozen=True)
class Family:
    """A model family as its users call it: positional inputs, or keywords as transformers' docs call them."""

    build: Callable[[], nn.Module]
    args: Callable[[], tuple]
    kwargs: Callable[[], dict] = dict


def _encoder() -> nn.Module:
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.1, batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).train()


def _gpt2() -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=2, n_head=2, bos_token_id=1, eos_token_id=2)
    return GPT2LMHeadModel(config).train()  # dropout on, as in training


def _gpt2_inputs() -> dict:
    ids = torch.randint(3, 64, (2, 8))
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}


FAMILIES = {
    "mlp": Family(lambda: MLP(width=16, depth=3), lambda: (torch.randn(4, 16),)),
    "conv_bn": Family(ConvBN, lambda: (torch.randn(2, 3, 8, 8),)),
    "transformer_dropout": Family(_encoder, lambda: (torch.randn(2, 6, 16),)),
    "gpt2_keywords": Family(_gpt2, tuple, _gpt2_inputs),
    "graph_break": Family(GraphBreak, lambda: (torch.randn(3, 4),)),
}


class Checkpointed(nn.Module):
    """The user's own activation checkpointing around the whole model, as torch's docs write it."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, *args: object, **kwargs: object) -> object:
        return checkpoint(self.inner, *args, use_reentrant=False, **kwargs)


@functools.cache
def _made(family: str) -> tuple[nn.Module, tuple, dict]:
    torch.manual_seed(0)
    made = FAMILIES[family]
    return made.build(), made.args(), made.kwargs()


@functools.cache
def _extraction(family: str, mode: str) -> BackwardExtraction:
    model, args, kwargs = _made(family)
    return bw.extract(model, *args, mode=mode, **kwargs)


def _advice(family: str, mode: str) -> Advice:
    model, args, kwargs = _made(family)
    target = int(_extraction(family, mode).peak_activation_only_bytes * 0.7)
    return bw.advise(model, *args, target=target, mode=mode, progress=False, **kwargs)


def _checkpointed(family: str, mode: str) -> BackwardExtraction:
    model, args, kwargs = _made(family)
    return bw.extract(Checkpointed(model), *args, mode=mode, **kwargs)


def _plans(advice: Advice) -> list[object]:
    """The advice itself (its offload plans have no partition: the advice's views show them), and the partition of
    each plan it tried."""
    plans = [p for p in advice.tried + advice.plans if p.extraction is not None]
    assert plans, f"the advisor tried no plan with a partition: {advice!r}"
    return [advice, *(p.extraction for p in plans)]


def _swept(family: str, mode: str) -> list[object]:
    sweep = bw.sweep(_extraction(family, mode), budgets=[0.0, 0.5, 1.0], progress=False)
    return [sweep, *(point.extraction for point in sweep.points)]


def _compared(family: str, mode: str) -> list[object]:
    comparison = bw.compare(_extraction(family, mode), partitioners=tuple(bw.partitioner_names()) + (0.5,))
    return [comparison, *comparison.extractions]


def _partition_kinds() -> dict[str, Callable[[str, str], list[object]]]:
    kinds: dict[str, Callable[[str, str], list[object]]] = {}
    for name in bw.partitioner_names():
        kinds[name] = lambda f, m, name=name: [_extraction(f, m).rerun(name)]
    for budget in (1.0, 0.5, 0.0):
        kinds[f"min_cut_{budget}"] = lambda f, m, budget=budget: [_extraction(f, m).rerun("min_cut", budget)]
    kinds["user_checkpoint"] = lambda f, m: [_checkpointed(f, m)]
    kinds["advice"] = lambda f, m: _plans(_advice(f, m))
    kinds["sweep"] = _swept
    kinds["comparison"] = _compared
    return kinds


PARTITION_KINDS = _partition_kinds()


REFUSED = {
    # Dynamo runs a checkpoint that graph-breaks inside eagerly: no compiled region holds the backward.
    (
        "graph_break",
        "user_checkpoint",
    ): "outside every compiled region, Dynamo compiled no part of it: Dynamo says Call to `torch._dynamo.graph_break()`",
}
"""The combinations that have no partition to show: each must fail in one sentence saying why, never a traceback."""


@functools.cache
def _targets(family: str, mode: str, kind: str) -> list[object]:
    refusal = REFUSED.get((family, kind))
    if refusal is None:
        return PARTITION_KINDS[kind](family, mode)
    with pytest.raises(bw.BwdWidgetsError, match=re.escape(refusal)) as refused:
        PARTITION_KINDS[kind](family, mode)
    assert "\n" not in str(refused.value)
    return []


# -- the views ------------------------------------------------------------------------------------------------------


def _takes_an_extraction(name: str) -> bool:
    function = getattr(bw, name)
    if not inspect.isfunction(function):
        return False
    first = next(iter(inspect.signature(function).parameters.values()), None)
    return first is not None and "BackwardExtraction" in str(first.annotation)


EXPORTS = sorted(name for name in bw.__all__ if _takes_an_extraction(name))


def _call_export(name: str, target: BackwardExtraction, out: Path) -> None:
    function = getattr(bw, name)
    parameters = inspect.signature(function).parameters
    arguments: list[object] = [target]
    if "path" in parameters:
        arguments.append(out / f"{name}.out")
    if "b" in parameters:  # diff(a, b): the partition against itself
        arguments.append(target)
    result = function(*arguments)
    if isinstance(result, Path):
        assert result.exists() and result.stat().st_size > 0, f"bw.{name} wrote nothing"


def _public_attributes(cls: type) -> list[str]:
    return sorted(
        name
        for name, value in inspect.getmembers(cls)
        if not name.startswith("_") and isinstance(value, (property, functools.cached_property))
    )


def _properties(target: BackwardExtraction, out: Path) -> None:
    for name in _public_attributes(type(target)):
        getattr(target, name)


def _summary(target: BackwardExtraction, out: Path) -> None:
    json.dumps(target.summary())


def _save_graphnet(target: BackwardExtraction, out: Path) -> None:
    folders = target.save_graphnet(out / "graphnet")
    for folder in map(Path, folders.values()):
        graphs = [folder] if len(target.partitions) == 1 else sorted(folder.glob("subgraph_*"))
        assert len(graphs) == len(target.partitions), folder
        assert all((graph / "model.py").exists() for graph in graphs), folder


def _measure(target: BackwardExtraction, out: Path) -> None:
    if target.mode == "fake":
        with pytest.raises(bw.MeasureNeedsRealModeError):
            target.measure()
    else:
        assert target.measure().peak_bytes > 0


def _timeline_chart(target: BackwardExtraction, out: Path) -> None:
    assert "<svg" in plot.timeline(target).svg


def _widget(target: object, out: Path) -> None:
    """The widget as a notebook draws it: its payload (what the browser gets: JSON), its first view, the
    mimebundle with the static SVG a saved notebook keeps, and the static picture shown after a restart."""
    widget = bw.show(target)
    json.dumps(widget.payload)
    data, _ = widget._repr_mimebundle_()
    assert "<svg" in data["image/svg+xml"]
    picture = widget.picture_bundle()
    assert picture["text/html"] and picture["text/plain"]
    _static_table_speaks_as_the_widget(widget.payload)


def _static_table_speaks_as_the_widget(data: dict) -> None:
    """One classification per value (issue 43, item 7): the saved notebook's table says each value's kind, what
    it adds and what torch says of it exactly as the widget's table does (both from the payload's `kind_label`); a
    view of a parameter, buffer or input is a "... view" that adds 0 B."""
    rows = [r.split("</td>") for r in html.unescape(saved_table(data, top=len(data["saved"]))).split("<tr>")[2:]]
    cells = {row[0].split(">", 1)[1].split(" (")[0]: [c.split(">", 1)[1] for c in row[:-1]] for row in rows}
    for saved in data["saved"]:
        _, kind, _, _, adds, _, _, torch_says = cells[saved["name"]]
        assert kind == saved["kind_label"] and adds == format_bytes(saved["activation_bytes"]), saved["name"]
        assert torch_says == (saved["torch_reason"] or "\u2014"), saved["name"]
        if saved["alias_kind"] in ("parameter", "buffer", "input"):
            assert kind == f"{saved['alias_kind']} view" and saved["activation_bytes"] == 0, saved["name"]


def _repr(target: object, out: Path) -> None:
    assert repr(target)


def _pareto_chart(target: Sweep, out: Path) -> None:
    assert "<svg" in plot.pareto(target).svg


VIEWS: dict[str, tuple[type | tuple[type, ...], Callable[[object, Path], None]]] = {
    **{f"bw.{name}": (BackwardExtraction, functools.partial(_call_export, name)) for name in EXPORTS},
    "properties": (BackwardExtraction, _properties),
    "summary": (BackwardExtraction, _summary),
    "save_graphnet": (BackwardExtraction, _save_graphnet),
    "measure": (BackwardExtraction, _measure),
    "plot.timeline": (BackwardExtraction, _timeline_chart),
    "plot.pareto": (Sweep, _pareto_chart),
    "widget": ((BackwardExtraction, Sweep, Comparison, Advice), _widget),
    "repr": ((BackwardExtraction, Sweep, Comparison, Advice), _repr),
}


def test_the_lists_are_read_from_the_code():
    """The generated cases see what the code has: a view, a partitioner and a mode that exist are here."""
    assert {"bw.to_dot", "bw.save_svg", "bw.to_html"} <= set(VIEWS)
    assert set(bw.partitioner_names()) <= set(PARTITION_KINDS)
    assert set(MODES) == {"real", "fake"}
    assert {"saved_tensors", "peak", "notes"} <= set(_public_attributes(BackwardExtraction))


@pytest.mark.parametrize("view", sorted(VIEWS))
@pytest.mark.parametrize("kind", sorted(PARTITION_KINDS))
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_view_of_every_partition(family: str, mode: str, kind: str, view: str, tmp_path: Path) -> None:
    accepts, show = VIEWS[view]
    targets = [t for t in _targets(family, mode, kind) if isinstance(t, accepts)]
    for target in targets:
        show(target, tmp_path)
