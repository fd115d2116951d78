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
- the modes: `MODES` (real and fake);
- regions loaded from a TORCH_TRACE (`bw.load_trace`) that a real `torch.compile` run wrote: each of `BACKENDS`,
  below budget 1 and at 1, and one whose names are HTML; the partitions made again from an extraction, which a
  loaded region refuses in one sentence, the widget's controls, and the region ending a cell in a kernel.
"""

from __future__ import annotations

import base64
import functools
import html
import inspect
import json
import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from xml.etree import ElementTree

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
from torch_trace_runs import traced_run

import bwd_widgets as bw
from bwd_widgets.core.errors import PartitionerError
from bwd_widgets.core.kinds import BACKENDS, MODES
from bwd_widgets.core.units import format_bytes
from bwd_widgets.examples import MLP, ConvBN
from bwd_widgets.extraction.loaded_trace import TraceRegion
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


def _swept(extraction: BackwardExtraction) -> list[object]:
    sweep = bw.sweep(extraction, budgets=[0.0, 0.5, 1.0], progress=False)
    return [sweep, *(point.extraction for point in sweep.points)]


def _compared(extraction: BackwardExtraction) -> list[object]:
    comparison = bw.compare(extraction, partitioners=tuple(bw.partitioner_names()) + (0.5,))
    return [comparison, *comparison.extractions]


def _partitioned_again() -> dict[str, Callable[[BackwardExtraction], list[object]]]:
    """The partitions made from an extraction alone (its joint graph partitioned again): each registered
    partitioner, min-cut at 1, 0.5 and 0, a sweep and its points, a comparison and its members."""
    kinds: dict[str, Callable[[BackwardExtraction], list[object]]] = {}
    for name in bw.partitioner_names():
        kinds[name] = lambda e, name=name: [e.rerun(name)]
    for budget in (1.0, 0.5, 0.0):
        kinds[f"min_cut_{budget}"] = lambda e, budget=budget: [e.rerun("min_cut", budget)]
    kinds["sweep"] = _swept
    kinds["comparison"] = _compared
    return kinds


PARTITIONED_AGAIN = _partitioned_again()


def _partition_kinds() -> dict[str, Callable[[str, str], list[object]]]:
    """`PARTITIONED_AGAIN` of each family's extraction, and the partitions that need the model: the user's own
    checkpoint, the advisor's plans."""
    kinds: dict[str, Callable[[str, str], list[object]]] = {
        kind: lambda f, m, again=again: again(_extraction(f, m)) for kind, again in PARTITIONED_AGAIN.items()
    }
    kinds["user_checkpoint"] = lambda f, m: [_checkpointed(f, m)]
    kinds["advice"] = lambda f, m: _plans(_advice(f, m))
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
    _one_sentence(refused.value)
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
    if target.mode == "fake":  # a fake-mode extraction, and a region loaded from a trace, hold no values to run
        with pytest.raises(bw.MeasureNeedsRealModeError) as refused:
            target.measure()
        _one_sentence(refused.value)
    else:
        assert target.measure().peak_bytes > 0


def _one_sentence(error: BaseException) -> None:
    """A refusal as the user reads it: one line of words, no traceback, no object's repr."""
    said = str(error)
    assert said and "\n" not in said, said
    assert "Traceback" not in said and " at 0x" not in said, said


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


# -- regions loaded from a TORCH_TRACE ------------------------------------------------------------------------------

LOADED = {f"{backend}_budget_{budget}": (backend, budget) for backend in BACKENDS for budget in (0.5, 1.0)}
"""A region torch.compile compiled in a real run (`torch_trace_runs.traced_run`: the course Transformer, in a fresh
process), read back from the TORCH_TRACE text alone by `bw.load_trace`: each backend, below budget 1 and at 1."""
HOSTILE = "hostile_names"
"""The aot_eager run's trace below budget 1 as someone else's data can write it (`_hostile_trace`): a log named,
parameters named and a budget given in HTML."""
HOSTILE_FROM = "aot_eager_budget_0.5"
MARKUP = {
    "log": "<svg onload=alert('log')>",
    "parameter": "<script>alert('{k}')</script>.<img src=x onerror=alert('{k}')>.weight_{k}",
    "budget": "<b>budget</b>",
}
"""What `_hostile_trace` writes where the trace names things: tags and handlers no output of ours holds."""


def _hostile_trace(log: Path, folder: Path) -> None:
    """`log`'s text with each forward input described as a parameter named in HTML (AOT Autograd's own
    `ParamAOTInput(target=...)` comment), its budget as HTML, in a log whose name is HTML."""
    text = re.sub(
        r"# PlainAOTInput\(idx=(\d+)\)",
        lambda m: f"# ParamAOTInput(target={MARKUP['parameter'].format(k=m.group(1))!r})",
        log.read_text(),
    )
    text = re.sub(r'"activation_memory_budget": [\d.]+', f'"activation_memory_budget": "{MARKUP["budget"]}"', text)
    folder.mkdir()
    (folder / f"dedicated_log_torch_trace_{MARKUP['log']}.log").write_text(text)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], TraceRegion]]:
    """Each source's region, made once for the module. The runs (each a fresh process: 5 to 20 s here, Inductor's
    C++ compiled cold) start together when the first region is asked for, so a machine with cores to spare makes
    them in the time of the slowest."""
    folders = {source: tmp_path_factory.mktemp(source) / "trace" for source in [*LOADED, HOSTILE]}
    with ThreadPoolExecutor(max_workers=len(LOADED)) as pool:
        runs = {
            source: pool.submit(traced_run, folders[source], "transformer", backend, budget, debug=True)
            for source, (backend, budget) in LOADED.items()
        }

        @functools.cache
        def region(source: str) -> TraceRegion:
            if source == HOSTILE:
                _hostile_trace(Path(region(HOSTILE_FROM).trace_file), folders[source])
            else:
                runs[source].result()
            load = bw.load_trace(folders[source])
            assert not load.refused and len(load) == 1, load
            return load[0]

        yield region


def _refused_again(kind: str, target: BackwardExtraction, out: Path) -> None:
    """A loaded region keeps the partition its run made: each way of partitioning it again says so."""
    with pytest.raises(PartitionerError, match="TORCH_TRACE") as refused:
        PARTITIONED_AGAIN[kind](target)
    _one_sentence(refused.value)


def _widget_controls(target: BackwardExtraction, out: Path) -> None:
    """The widget's controls on a loaded region: off (`can_rerun`, `can_advise`), and each one, driven from Python
    all the same, leaves the run's partition shown and says why in one sentence."""
    widget = bw.show(target)
    assert widget.can_rerun is False and widget.can_advise is False
    for move in (
        lambda: setattr(widget, "partitioner", next(n for n in bw.partitioner_names() if n != target.partitioner)),
        lambda: setattr(widget, "memory_budget", 0.25),
        lambda: widget.run_sweep([0.0, 1.0]),
        lambda: widget.start_advise("1MB"),
    ):
        widget.error = ""
        move()
        assert widget.extraction is target and widget.error and "\n" not in widget.error, widget.error
        assert widget.partitioner == target.partitioner, "a refused move leaves the controls on what is shown"
        assert target.memory_budget is None or widget.memory_budget == target.memory_budget
    for refused in (widget.measure, lambda: widget.run_advise("1MB")):
        with pytest.raises(bw.BwdWidgetsError) as error:
            refused()
        _one_sentence(error.value)
    assert widget.extraction is target


def _in_a_kernel(target: BackwardExtraction, out: Path) -> None:
    """The region ending a cell in a Jupyter kernel (jupyter/display.py): a placeholder, the widget in its place,
    then the static picture that follows it, each with the region's own text, and no `Out[n]`."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    sent: list[dict] = []
    publish = shell.display_pub.publish
    shell.display_pub.publish = lambda data, metadata=None, **kw: sent.append(data)
    shell.kernel = object()  # what a Jupyter kernel's shell has
    shell.execution_count += 1  # a cell of its own: a region another view drew is drawn again here
    try:
        data, _ = shell.display_formatter.format(target)
    finally:
        del shell.kernel
        shell.display_pub.publish = publish
    assert data == {}, "the region displays itself: no execute_result"
    assert sent[0]["text/plain"].startswith(f"Building the view of {target.model_name}")
    # the placeholder may say how far it got meanwhile; then it becomes the widget
    (widget,) = [bundle for bundle in sent if "application/vnd.jupyter.widget-view+json" in bundle]
    assert "<svg" in widget["image/svg+xml"] and widget["text/plain"] == repr(target)
    assert "bwd-static" in sent[-1]["text/html"] and sent[-1]["text/plain"] == repr(target)


LOADED_VIEWS: dict[str, Callable[[object, Path], None]] = {
    **{view: show for view, (accepts, show) in VIEWS.items() if issubclass(TraceRegion, accepts)},
    **{f"partitioned again: {kind}": functools.partial(_refused_again, kind) for kind in PARTITIONED_AGAIN},
    "widget controls": _widget_controls,
    "in a kernel": _in_a_kernel,
}
"""Every view that takes an extraction, each way of partitioning one again (refused), the widget's controls, and
the region ending a cell in a kernel."""


def test_the_loaded_cases_are_read_from_the_code():
    assert {"measure", "widget", "bw.to_html", "partitioned again: sweep"} <= set(LOADED_VIEWS)
    assert {backend for backend, _ in LOADED.values()} == set(BACKENDS)
    assert {budget < 1 for _, budget in LOADED.values()} == {True, False}


@pytest.mark.parametrize("view", sorted(LOADED_VIEWS))
@pytest.mark.parametrize("source", [*LOADED, HOSTILE])
def test_every_view_of_a_loaded_region(
    loaded: Callable[[str], TraceRegion], source: str, view: str, tmp_path: Path
) -> None:
    region = loaded(source)
    assert region.partitions_again is False and region.mode == "fake"
    LOADED_VIEWS[view](region, tmp_path)


class _Markup(HTMLParser):
    """The elements, attributes and text of an HTML document, as a browser's parser reads them."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attributes: set[str] = set()
        self.text: list[str] = []
        self.feed(page)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attributes |= {name for name, _ in attrs}

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _svg_markup(svg: str) -> tuple[list[str], set[str], str]:
    """An SVG's elements (local names), attribute names and text, as an XML parser reads them."""
    root = ElementTree.fromstring(svg)  # noqa: S314 - our own output, checked here for what the trace put in it
    elements = list(root.iter())
    tags = [e.tag.rsplit("}", 1)[-1] for e in elements]
    return tags, {a.rsplit("}", 1)[-1] for e in elements for a in e.attrib}, "".join(root.itertext())


def _pictures(page: str) -> list[str]:
    """The SVGs a page holds as `<img>` data URLs."""
    found = re.findall(r"data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)", page)
    return [base64.b64decode(picture).decode() for picture in found]


def test_a_loaded_regions_names_are_text_in_every_html_and_svg(loaded: Callable[[str], TraceRegion], tmp_path: Path):
    """A trace is someone else's data: the names it gives (its log's, its parameters', its budget) come out of
    every HTML and SVG output as text, never as an element or a handler, and they do come out."""
    region = loaded(HOSTILE)
    log, parameter = MARKUP["log"], MARKUP["parameter"].format(k=2)
    assert log in region.model_name and parameter in {s.source for s in region.saved_tensors}
    assert any(MARKUP["budget"] in note for note in region.notes) and region.memory_budget is None
    widget = bw.show(region)
    bundle, _ = widget._repr_mimebundle_()
    picture = widget.picture_bundle()["text/html"]
    page = bw.to_html(region, tmp_path / "region.html").read_text()
    module = parameter.rsplit(".", 1)[0]  # the parameter's module, as the graph's clusters and the peak name it
    svgs: dict[str, tuple[str, tuple[str, ...]]] = {
        "the widget's static SVG": (bundle["image/svg+xml"], (log,)),
        "bw.save_svg": (bw.save_svg(region, tmp_path / "region.svg").read_text(), (module,)),
        "a timeline labelled by the model's name": (plot.timeline({region.model_name: region}).svg, (log,)),
        **{f"the picture's image {i}": (svg, ()) for i, svg in enumerate(_pictures(picture))},
    }
    pages = {"the static picture": (picture, 0, (log, "<script>alert(")), "bw.to_html": (page, 3, ())}
    for what, (svg, shown) in svgs.items():
        tags, attributes, text = _svg_markup(svg)
        assert not {"script", "img", "b", "foreignObject"} & set(tags), what
        assert not {a for a in attributes if a.startswith("on")}, what
        assert all(name in text for name in shown), what
    for what, (html_text, scripts, shown) in pages.items():
        markup = _Markup(html_text)
        assert markup.tags.count("script") == scripts and "b" not in markup.tags and "svg" not in markup.tags, what
        assert not {a for a in markup.attributes if a.startswith("on")}, what
        assert all(name in "".join(markup.text) for name in shown), what
    # the page's data is JSON inside <script>: read back, the names are the trace's, whole
    state = json.loads(re.search(r'id="bwd-data">(.*?)</script>', page, re.S).group(1))
    assert state["data"]["model"] == region.model_name
