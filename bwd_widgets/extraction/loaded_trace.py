"""A TORCH_TRACE's compiled regions as extractions: `load_trace(path)`.

Each region the run compiled (per rank and compile id) becomes a `TraceRegion`, a `BackwardExtraction` whose
one partition is the one the run used: the forward and backward graphs torch logged, rebuilt from their text
(`core/torch_trace.py`, which runs nothing of it), with fake tensors of the recorded dtype, shape, stride and
device. Saved values are the backward's placeholders between the primals and the tangents, as torch's
partition hands them over, so the saved table, the memory timeline and `bw.show` work with nothing of the
model present, and `save_graphnet` writes the run's graphs as GraphNet samples. What needs the model or the
run's values (partitioning again, measuring) says so in one sentence; a memory snapshot recorded during the
run gives the measured curve (`TraceRegion.attach_snapshot`).
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NoReturn

import torch
import torch.fx

from ..core.compat import FakeTensorMode
from ..core.decisions import Decisions, logged_decisions
from ..core.errors import MeasureNeedsRealModeError, PartitionerError, TraceError
from ..core.kinds import Backend, InputKind, InputSource, is_tangent
from ..core.memory_snapshot import MemorySnapshot
from ..core.naming import parse_flat_name
from ..core.partitioners import Partitioner
from ..core.snapshot_match import SnapshotMeasured, match_snapshot, match_snapshot_file
from ..core.text import visible
from ..core.torch_trace import (
    GraphBuilder,
    Refused,
    RegionIndex,
    RegionText,
    graph_input_names,
    index_regions,
    trace_files,
)
from ..core.trace import Split, Trace, build_partition
from ..core.units import format_bytes
from .result import BackwardExtraction

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from ..core.measure import MeasuredMemory
    from ..graphnet.writer import Layout

_NOT_AGAIN = (
    "a region loaded from a TORCH_TRACE keeps the partition the run made; partitioning it again needs the "
    "joint graph's metadata (checkpoint tags, the partitioner's inputs) that the trace's text does not hold."
)


def _recorded_partition(*_: object, **__: object) -> NoReturn:
    raise PartitionerError(_NOT_AGAIN)


@dataclass(eq=False, repr=False)
class LoadedTrace(Trace):
    """A region's joint graph as the trace printed it: shown, never split again (`split` says why)."""

    def split(self, resolved: Partitioner) -> Split:
        raise PartitionerError(_NOT_AGAIN)


@dataclass(eq=False, repr=False)
class TraceRegion(BackwardExtraction):
    """One compiled region of a TORCH_TRACE run, as an extraction (fake mode: shapes and bytes, no values)."""

    rank: int | None = None
    """The process's rank in a distributed run (None where the trace names none)."""
    compile_id: str = ""
    """Dynamo's `frame/compile` id (`_attempt` after a restart), as tlparse names it."""
    trace_file: str = ""
    load_notes: list[str] = field(default_factory=list)

    @property
    def notes(self) -> list[str]:
        """What loading said, then the graphs' notes, then what pairing an attached snapshot said (its window,
        how many allocations paired, what it cannot know): the widget's notes show all three."""
        measured = self.measured.notes if isinstance(self.measured, SnapshotMeasured) else []
        return self.load_notes + super().notes + measured

    @property
    def partitions_again(self) -> bool:
        return False

    def rerun(self, partitioner: object = "default", memory_budget: float | None = None) -> BackwardExtraction:
        raise PartitionerError(_NOT_AGAIN)

    def measure(self) -> MeasuredMemory:
        """The measurement `attach_snapshot` read; nothing here can run to be measured."""
        if isinstance(self.measured, SnapshotMeasured):
            return self.measured
        raise MeasureNeedsRealModeError(
            "a region loaded from a TORCH_TRACE holds the run's shapes, not its values: nothing here can run to be "
            "measured (record a memory snapshot during the run, and give it to region.attach_snapshot(path))."
        )

    def attach_snapshot(
        self, snapshot: MemorySnapshot | str | Path, *, window: tuple[int, int] | None = None
    ) -> SnapshotMeasured:
        """The run's measured memory, from a memory snapshot recorded during it (`torch.cuda.memory._dump_snapshot`
        or the path it wrote): its allocations paired with this region's predicted ones by size and order
        (`core/snapshot_match.py` says the rule and what it cannot tell apart), kept as `measured`, so `bw.show`
        draws the measured curve over the prediction with peak allocated and peak reserved apart. `window`: the
        first and last event to search, for a snapshot of many steps. A path is read streamed, and paired as
        soon as what has been read holds a whole run of the region, so a snapshot of gigabytes is paired from its
        first step in seconds. A snapshot that does not line up with the region raises SnapshotError, and
        `measured` stays as it was."""
        name = f"region {self.compile_id}"
        if isinstance(snapshot, MemorySnapshot):
            self.measured = match_snapshot(self.partitions, snapshot, name=name, window=window)
        else:  # streamed: a snapshot of many steps is paired from its first, without reading on
            self.measured = match_snapshot_file(self.partitions, snapshot, name=name, window=window)
        return self.measured

    @property
    def sample_name(self) -> str:
        """The GraphNet sample name `save_graphnet` writes by default: `region_0_1`, `rank_1/region_0_1`."""
        region = "region_" + self.compile_id.replace("/", "_")
        return f"rank_{self.rank}/{region}" if self.rank is not None else region

    def save_graphnet(
        self, out_dir: str | Path, name: str | None = None, *, layout: Layout = "graphnet", validate: bool = False
    ) -> dict[str, Path]:
        """The run's forward and backward graphs as GraphNet samples, as a fake-mode extraction writes them: a
        trace holds no values, so each weight's and input's meta gives its shape, dtype and device only (GraphNet
        draws values to run them). Written for the CPU, as every sample bwd_widgets writes, whatever device the
        run used; GraphNet's device pass moves a sample to a GPU."""
        return super().save_graphnet(out_dir, name or self.sample_name, layout=layout, validate=validate)


class TraceLoad:
    """What `load_trace` found: the run's compiled regions, in the order it compiled them, each built into a
    `TraceRegion` when first asked for (`load[i]`, iterating), so a trace of any size opens in one pass over its
    bytes and holds only the regions in use (the last `KEPT` built). A region whose text was refused, or that
    holds no AOT graphs, is one sentence in `refused`; iterating skips it, and `load[i]` raises TraceError."""

    KEPT = 8
    """Built regions kept for the next access (each holds its graphs and their fake values: megabytes)."""
    NAMED = 10
    """Regions the repr names."""

    def __init__(self, indexes: list[RegionIndex], refused: list[str], seconds: float) -> None:
        self.indexes = indexes
        """Where each complete region's entries lie in its log (`core/torch_trace.py`)."""
        self._refused = refused
        self._refused_at: dict[int, str] = {}
        self._built: OrderedDict[int, TraceRegion] = OrderedDict()
        self.seconds = seconds
        """How long indexing the trace took (reading every byte once)."""

    @property
    def refused(self) -> list[str]:
        """One sentence per region not read: those with no AOT graphs (known once indexed), and those whose text
        was refused (known once built: `regions` builds every one)."""
        return self._refused + [self._refused_at[i] for i in sorted(self._refused_at)]

    @property
    def regions(self) -> list[TraceRegion]:
        """Every region that can be built, built (on a large trace: seconds per region, and their memory)."""
        return list(self)

    def __len__(self) -> int:
        return len(self.indexes)

    def __getitem__(self, index: int) -> TraceRegion:
        index = range(len(self.indexes))[index]
        if index in self._refused_at:
            raise TraceError(self._refused_at[index])
        if index not in self._built:
            spans = self.indexes[index]
            try:
                region = region_extraction(spans.read())
            except Refused as why:
                where = visible(f"{spans.file.name} region {spans.compile_id}")
                self._refused_at[index] = f"{where}: refused, nothing of it run: {visible(why)}."
                raise TraceError(self._refused_at[index]) from None
            self._built[index] = region
            while len(self._built) > self.KEPT:
                self._built.popitem(last=False)
        self._built.move_to_end(index)
        return self._built[index]

    def __iter__(self) -> Iterator[TraceRegion]:
        for index in range(len(self.indexes)):
            try:
                yield self[index]
            except TraceError:
                continue

    def __repr__(self) -> str:
        """One line, naming the first `NAMED` regions (a long run compiles hundreds)."""
        shown = self.indexes[: self.NAMED]
        names = ", ".join(index.label for index in shown)
        more = f" and {len(self) - len(shown)} more" if len(self) > len(shown) else ""
        return f"TraceLoad({len(self)} regions: {names}{more}; {len(self.refused)} refused)"


def load_trace(path: str | Path) -> TraceLoad:
    """The compiled regions of a TORCH_TRACE folder (or one of its logs), in the order the run compiled them:
    indexed in one pass (a 2 GB trace in seconds), each region built when first used."""
    started = time.perf_counter()
    try:
        files = trace_files(path)
    except FileNotFoundError as error:
        raise TraceError(visible(f"{error}: give the folder TORCH_TRACE named, or one log in it.")) from None
    if not files:
        raise TraceError(visible(f"{path} holds no TORCH_TRACE log (*.log): give the folder TORCH_TRACE named."))
    indexes, refused = [], []
    try:
        for index in index_regions(path):
            if index.complete:
                indexes.append(index)
            else:
                where = visible(f"{index.file.name} region {index.compile_id}")
                refused.append(f"{where}: the trace holds no AOT forward and backward graphs for it, skipped.")
    except OSError as error:
        raise TraceError(visible(f"cannot read {path}: {error.strerror or error}.")) from None
    if not indexes and not refused:
        raise TraceError(
            visible(f"{path} records no compiled region: give the folder TORCH_TRACE named, or one log in it.")
        )
    return TraceLoad(indexes, refused, time.perf_counter() - started)


def region_extraction(text: RegionText) -> TraceRegion:
    """One region's graphs, rebuilt from the trace's text, as the partition the run used."""
    device_map, device_note = _devices(text)
    fake_mode = FakeTensorMode()
    forward = GraphBuilder(fake_mode, device_map).build(text.graphs["aot_forward_graph"])
    backward = GraphBuilder(fake_mode, device_map).build(text.graphs["aot_backward_graph"])
    joint_text = text.graphs.get("aot_joint_graph")
    joint = GraphBuilder(fake_mode, device_map).build(joint_text) if joint_text else _no_joint()
    dynamo_inputs = graph_input_names(text.graphs.get("dynamo_output_graph", ""))
    inputs = [_input_source(node, dynamo_inputs) for node in forward.graph.find_nodes(op="placeholder")]
    if joint_text:
        _tag_recomputed(joint, backward, len(inputs))
    budget = (text.functorch_config or {}).get("activation_memory_budget")
    partitioner = Partitioner(
        "torch.compile", _recorded_partition, float(budget) if isinstance(budget, (int, float)) else None
    )
    backend: Backend = "inductor" if text.inductor else "aot_eager"
    trace = LoadedTrace(index=0, joint=joint, joint_inputs=[], partition_kwargs={}, inputs=inputs, backend=backend)
    trace.record(None, [])
    decisions, reasons_note = _decisions(text)
    notes = [reasons_note] + ([device_note] if device_note else [])
    if not joint_text:
        notes.append("the trace holds no joint graph for this region: the joint view is empty.")
    partition = build_partition(trace, partitioner, Split(forward, backward, decisions))
    return TraceRegion(
        partitions=[partition],
        mode="fake",
        model_name=f"{text.file.stem} {text.compile_id}",
        rank=text.rank,
        compile_id=text.compile_id,
        trace_file=str(text.file),
        load_notes=notes,
    )


NOT_IN_TRACE = "reason not in the trace"
"""What a saved value's reason reads where the trace does not hold it (never guessed from our own rules)."""


def _decisions(text: RegionText) -> tuple[Decisions, str]:
    """What torch decided for the region, as far as the trace records it, and one note saying how far: torch
    writes `min_cut_information` (its knapsack's choice and the cut it fed) only with `AOT_PARTITIONER_DEBUG=1`
    and only where the knapsack ran (a budget below 1 that the cheaper plans did not meet); the reasons on
    min-cut's flow graph (why a value could not be recomputed) are never in a trace."""
    budget = (text.functorch_config or {}).get("activation_memory_budget")
    recorded = budget if isinstance(budget, (int, float)) else visible(repr(budget)[:60])  # someone else's text
    said = f"the run's activation_memory_budget was {recorded}" if budget is not None else "the trace records no budget"
    unknown = Decisions(reachable=False, unknown=NOT_IN_TRACE)
    if text.min_cut_information is None:
        return unknown, (
            f"{said}; the trace holds no min_cut_information for this region (torch writes it with "
            "AOT_PARTITIONER_DEBUG=1, where its knapsack ran below budget 1), so why each value was saved is not "
            "in it."
        )
    try:
        information = json.loads(text.min_cut_information)
    except ValueError:
        information = None
    decisions = logged_decisions(information) if isinstance(information, dict) else None
    if decisions is None:
        return unknown, f"{said}; its min_cut_information is not in a form this version reads: no reasons read."
    decisions = dataclasses.replace(decisions, unknown=NOT_IN_TRACE)
    return decisions, (
        f"{said}; reasons read from its min_cut_information (torch's knapsack at budget {decisions.budget:g}: "
        f"{len(decisions.knapsack.saved) if decisions.knapsack else 0} banned values kept, "
        f"{len(decisions.knapsack.recomputed) if decisions.knapsack else 0} let be recomputed); why min-cut "
        "could not recompute a value is not in a trace."
    )


def _devices(text: RegionText) -> tuple[dict[str, str], str | None]:
    """A CPU build of torch cannot make tensors on `cuda`, fake ones included (it aborts the process): the
    run's CUDA values are then held on the CPU, with a note; a CUDA build makes them where the run had them."""
    if torch.backends.cuda.is_built():
        return {}, None
    devices = {d for t in text.graphs.values() for d in _cuda_devices(t)}
    if not devices:
        return {}, None
    note = (
        f"the run's values on {', '.join(sorted(devices))} are held here on the CPU (this torch has no CUDA "
        "build, and cannot make even fake CUDA tensors): shapes, dtypes and bytes are the run's."
    )
    return dict.fromkeys(devices, "cpu"), note


def _cuda_devices(graph_text: str) -> set[str]:
    return set(re.findall(r'\]\[[^\]]*\](cuda(?::\d+)?)"', graph_text))


def _no_joint() -> torch.fx.GraphModule:
    graph = torch.fx.Graph()
    graph.output(())
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def _input_source(node: torch.fx.Node, dynamo_inputs: list[str]) -> InputSource:
    """What the trace says a forward primal is: AOT Autograd's description of it (`ParamAOTInput(target='fc.weight')`
    where AOT Autograd knew the name), or through Dynamo `PlainAOTInput(idx=i)`: Dynamo's graph input i, whose
    name Dynamo made from its source (`L_self_modules_fc_parameters_weight_`: the parameter `fc.weight`)."""
    desc = str(node.meta.get("desc_text", ""))
    for prefix, kind in (("ParamAOTInput(target=", "parameter"), ("BufferAOTInput(target=", "buffer")):
        if desc.startswith(prefix):
            name = desc[len(prefix) :].rstrip(")").strip("'\"")
            found: InputKind = "parameter" if kind == "parameter" else "buffer"
            return InputSource(found, name, name)
    plain = re.fullmatch(r"PlainAOTInput\(idx=(\d+)\)", desc)
    if plain is not None and int(plain.group(1)) < len(dynamo_inputs):
        flat_kind, name = parse_flat_name(dynamo_inputs[int(plain.group(1))])
        return InputSource(flat_kind, name, name)
    return InputSource("input", node.name, node.name)


def _tag_recomputed(joint: torch.fx.GraphModule, backward: torch.fx.GraphModule, primals: int) -> None:
    """Mark the backward's recomputed forward ops as torch's partitioner does (`partitioner_tag`): a forward
    node of the joint graph is one its forward outputs need (torch's `classify_nodes`); the joint returns its
    forward outputs, then one gradient per primal."""
    outputs = joint.graph.output_node().args[0]
    assert isinstance(outputs, (tuple, list))
    pending = [n for n in outputs[: len(outputs) - primals] if isinstance(n, torch.fx.Node)]
    forward_nodes: set[str] = set()
    while pending:
        node = pending.pop()
        if node.name not in forward_nodes and not is_tangent(node.name):
            forward_nodes.add(node.name)
            pending.extend(node.all_input_nodes)
    for node in backward.graph.nodes:
        if node.op == "call_function" and node.name in forward_nodes:
            node.meta["partitioner_tag"] = "is_forward"


def region_line(region: TraceRegion) -> str:
    """One compiled region in a line (what `bwd-extract --trace` prints, and the magic above each widget): where the run compiled it, whose partition it is, and what it saves."""
    where = f"rank {region.rank} " if region.rank is not None else ""
    budget = "no budget recorded" if region.memory_budget is None else f"budget {region.memory_budget:g}"
    saved = region.saved_tensors
    activations = sum(1 for s in saved if s.is_activation)
    return (
        f"{where}region {region.compile_id}: {region.backend}, {budget}; saved {len(saved)} values, "
        f"{format_bytes(region.saved_activation_bytes + region.saved_input_bytes)} "
        f"({activations} activations, {format_bytes(region.saved_activation_bytes)}; "
        f"inputs kept {format_bytes(region.saved_input_bytes)})"
    )


def regions_by_rank(load: TraceLoad) -> dict[int | None, list[TraceRegion]]:
    """The regions of each rank, in compile order."""
    ranks: dict[int | None, list[TraceRegion]] = {}
    for region in load:
        ranks.setdefault(region.rank, []).append(region)
    return ranks
