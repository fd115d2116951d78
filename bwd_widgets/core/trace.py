"""A trace owns one compiled region's joint graph; a partition is one split of it into forward and backward.

`Trace.split(p)` is the only place a joint graph is split (the capture's first split and every rerun,
comparison or sweep after it: no tracing again, and the working copy never leaks between partitions),
and `build_partition` the only place a `Partition` is made; partitions do not change once built.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
import torch.fx

from . import analysis
from .codegen import copy_graph_module, graphnet_code, without_none_outputs
from .compat import (
    TracingContext,
    _use_lazy_graph_module,
    detect_fake_mode,
    inductor_lays_out_channels_last,
    min_cut_rematerialization_partition,
    tensor_version,
    tracing,
)
from .decisions import Decisions, recording
from .errors import PartitionerError, describe_failure
from .interrupts import interrupts_held
from .kinds import DEFAULT_BACKEND, Backend, EagerStorage, InputSource, RegionStorages
from .memory import MemoryProfile, profile
from .nodes import BackwardNode, backward_nodes
from .partitioners import Partitioner, check_allowed_on, resolve_for_backend
from .reuse import GraphPair, MinCuts, Splits, counted_flops, cse_once
from .units import format_bytes

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence


class _TorchWork:
    """A reentrant lock that pauses Python's cyclic garbage collector while held.

    A partition builds some 100,000 fx objects (nodes, their metadata, generated code) in a heap that
    already holds the joint graph's: the collector's passes over that heap took 36% of a sweep's time
    (`bench/sweep_speed.py`). Paused, the work allocates the same; what it leaves unreachable is freed by
    the collector's next pass once the lock is let go. A collector the user turned off stays off.
    """

    pause_collector = True  # bench/sweep_speed.py --collector-on turns it off to race the two

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._depth = 0
        self._paused = False

    def __enter__(self) -> None:
        self._lock.acquire()
        self._depth += 1
        if self._depth == 1 and self.pause_collector and gc.isenabled():
            gc.disable()
            self._paused = True

    def __exit__(self, *exc_info: object) -> None:
        self._depth -= 1
        if self._depth == 0 and self._paused:
            self._paused = False
            gc.enable()
        self._lock.release()


TORCH_WORK = _TorchWork()
"""Held for each split, each partition made again (`BackwardExtraction.rerun`), each sweep point and each
capture: torch's budget is a process-wide setting, and so are the functions the recording and the shared
cuts put in torch's path, and a capture's tracers patch process-wide state (fx patches
`nn.Module.__call__`) that a real-mode replay in another thread (the widget's sweep, its slider's
neighbours) would run into."""


class Split(NamedTuple):
    """One run of a partitioner: its two graphs, and what torch decided on the way (read from torch)."""

    forward: torch.fx.GraphModule
    backward_with_nones: torch.fx.GraphModule
    decisions: Decisions


def _fingerprint(gm: torch.fx.GraphModule) -> tuple:
    return tuple((n.name, n.op, n.target, len(n.users)) for n in gm.graph.nodes)


@dataclass(frozen=True)
class RealValues:
    """What the real run handed torch's compiled graphs (real mode), recorded once when the run ends."""

    forward_inputs: list
    """Real values of the forward primals: parameters by reference, the rest copied."""
    forward_versions: list[int | None]
    """Version counters of the forward inputs when captured: a later in-place change shows."""
    rng_state: torch.Tensor | None
    """The CPU generator's state before the real forward: a replay draws the same dropout masks."""
    tangent_values: dict[str, Any] | None
    """Real tangents autograd used, by placeholder name; None when the real backward did not run."""


@dataclass(eq=False)
class Trace:
    """One compiled region as AOT Autograd saw it: the joint graph and what splitting it again needs."""

    index: int
    joint: torch.fx.GraphModule
    """The joint forward-backward graph, never modified."""
    joint_inputs: list
    partition_kwargs: dict
    """`num_fwd_outputs` and whatever else torch passed the partitioner."""
    inputs: list[InputSource]
    """One per forward primal."""
    backend: Backend = DEFAULT_BACKEND
    """Whose joint graph this is: AOT Autograd's as traced, or Inductor's after its passes (`core/kinds.py`); it
    decides which partitioners may split it (`partitioners.allowed_on`)."""
    real: RealValues | None = None
    """Real mode: what the real run used (set once, by `record`, when the capture ends)."""
    notes: tuple[str, ...] = ()
    """What the capture has to say about this region (set once, by `record`)."""
    storages: RegionStorages = field(default_factory=RegionStorages)
    """What the capture's run of this region took in from the forward and handed on, and how often it ran (set
    once, by `record`): the same at every budget."""
    _work: torch.fx.GraphModule | None = None
    _recorded: bool = False
    _cuts: MinCuts = field(default_factory=MinCuts, repr=False)
    """Flow-graph cuts torch's min-cut makes again at every budget below 1 (`core/reuse.py`)."""
    op_flops: dict = field(default_factory=dict, repr=False)
    """FLOP counts by op and arguments, shared by every partition of this joint graph."""
    _splits: Splits = field(default_factory=Splits, repr=False)
    """min-cut's graphs by the saved set it chose: budgets that choose alike build them once (`core/reuse.py`)."""

    def record(self, real: RealValues | None, notes: list[str], storages: RegionStorages | None = None) -> None:
        """Keep the real run's values, the capture's notes and the run's storages; a trace is recorded once."""
        if self._recorded:
            raise RuntimeError(f"trace {self.index} was already recorded")
        self.real, self.notes, self._recorded = real, tuple(notes), True
        if storages is not None:
            self.storages = storages

    @property
    def forward_inputs(self) -> list | None:
        return self.real.forward_inputs if self.real is not None else None

    @property
    def forward_versions(self) -> list[int | None] | None:
        return self.real.forward_versions if self.real is not None else None

    @property
    def tangent_values(self) -> dict[str, Any] | None:
        return self.real.tangent_values if self.real is not None else None

    @property
    def rng_state(self) -> torch.Tensor | None:
        return self.real.rng_state if self.real is not None else None

    def partition(self, partitioner: Partitioner | str | float | None = None) -> Partition:
        """Split the joint graph with `partitioner` (None: the backend's own default). Real mode: the backward's
        real inputs are replayed when first read (`Partition.backward_inputs`), not here."""
        resolved = resolve_for_backend(partitioner, None, self.backend)
        with interrupts_held():
            split = self.split(resolved)
        if self.real is not None and self.real.tangent_values is not None and self.inputs_changed():
            note = "a weight or input changed in place since the extraction: real backward values not replayed."
            return build_partition(self, resolved, split, notes=[note], replayable=False)
        return build_partition(self, resolved, split)

    def inputs_changed(self) -> bool:
        """Whether a forward input kept by reference was changed in place after the capture."""
        return any(
            version is not None and tensor_version(value) != version
            for value, version in zip(self.forward_inputs or [], self.forward_versions or [])
        )

    def split(self, resolved: Partitioner) -> Split:
        """Run the partitioner on this trace's own working copy, recording torch's decisions, then put back
        what it changed.

        Partitioners (min-cut) rewrite node metadata and add attributes such as `dist_from_bw`,
        but not the graph: restoring the metadata is far cheaper than copying the graph for every
        partition. If the structure changed, the working copy is dropped and the next split copies
        the untouched joint again. The cuts of flow graphs an earlier split built alike are shared.
        """
        check_allowed_on(self.backend, resolved)
        with TORCH_WORK:
            return self._split(resolved)

    def _split(self, resolved: Partitioner) -> Split:
        work = self._work if self._work is not None else copy_graph_module(self.joint)
        self._work = None
        nodes = list(work.graph.nodes)
        metas = [dict(n.meta) for n in nodes]
        attributes = [set(vars(n)) for n in nodes]
        fingerprint = _fingerprint(work)

        def run() -> GraphPair:
            forward, backward = resolved.partition_fn(work, self.joint_inputs, **self.partition_kwargs)
            return forward, backward

        shared = resolved.partition_fn is min_cut_rematerialization_partition  # torch's own: its graphs are shared
        try:
            with (
                resolved.config(),
                self._cuts.sharing(),
                cse_once(),
                recording() as record,
                _use_lazy_graph_module(True),
                _tracing_as_compiled(work),
            ):
                forward, backward = self._splits.made(run) if shared else run()
            return Split(forward, backward, record.decisions)
        except Exception as error:  # noqa: BLE001 - torch's partitioner failing on this graph: say which, in one line
            raise PartitionerError(
                f"the {resolved.label} partitioner failed on this graph ({describe_failure(error)}): "
                "try another partitioner or memory budget."
            ) from None
        finally:
            if _fingerprint(work) == fingerprint:  # the same nodes, though min-cut's CSE pass put in a new graph
                for node, meta, names in zip(work.graph.nodes, metas, attributes):
                    node.meta = meta
                    for added in set(vars(node)) - names:
                        delattr(node, added)
                self._work = work


@contextlib.contextmanager
def _tracing_as_compiled(joint: torch.fx.GraphModule) -> Iterator[None]:
    """torch.compile partitions inside AOT Autograd's tracing context, and min-cut reads its fake mode from there
    (`functionalize_rng_ops` makes the rng states of recomputed random ops in it): a split made again later, outside
    any compile, gets the same context around the joint graph's own fake mode."""
    if TracingContext.try_get() is not None:
        yield
        return
    values = [n.meta.get("val") for n in joint.graph.find_nodes(op="placeholder")]
    fake_mode = detect_fake_mode([v for v in values if isinstance(v, torch.Tensor)])
    with tracing(TracingContext(fake_mode)) if fake_mode is not None else contextlib.nullcontext():
        yield


def build_partition(
    trace: Trace,
    partitioner: Partitioner,
    split: Split,
    backward_inputs: list | None = None,
    notes: list[str] | None = None,
    replayable: bool = True,
) -> Partition:
    """The one way a Partition is made, for the capture's first split and every split after it."""
    return Partition(
        trace,
        partitioner,
        split.forward,
        split.backward_with_nones,
        backward_inputs,
        tuple(notes or ()),
        decisions=split.decisions,
        replayable=replayable,
    )


def replay_backward_inputs(
    real: RealValues, forward: torch.fx.GraphModule, backward_with_nones: torch.fx.GraphModule
) -> list:
    """Run a forward graph on the real forward inputs: its saved outputs, plus the tangents autograd
    used, are the real inputs of its backward graph."""
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        if real.rng_state is not None:
            torch.set_rng_state(real.rng_state)
        outputs = forward(*real.forward_inputs)
    return analysis.backward_inputs(forward, backward_with_nones, outputs, real.tangent_values or {})


@dataclass(frozen=True, eq=False, init=False)
class Partition:
    """One trace split into a forward and a backward graph by one partitioner (made by `build_partition`).

    Frozen: its analyses are cached on first use, and nothing may change what they were computed from.
    """

    trace: Trace
    partitioner: Partitioner
    forward: torch.fx.GraphModule
    backward_with_nones: torch.fx.GraphModule
    """The backward graph as torch returns it: `None` for inputs that need no gradient."""
    given_backward_inputs: list | None
    """The real run's own values of the backward placeholders (the capture's partition); `backward_inputs`."""
    replayable: bool
    """Whether `backward_inputs` may replay the forward graph (False once the trace's inputs changed)."""
    given_notes: tuple[str, ...]
    """Notes from whoever partitioned (the run's own); `notes` adds what the split itself shows."""
    decisions: Decisions
    """What torch's partitioner decided and why, read from torch (empty for partitioners without min-cut)."""

    def __init__(
        self,
        trace: Trace,
        partitioner: Partitioner,
        forward: torch.fx.GraphModule,
        backward_with_nones: torch.fx.GraphModule,
        backward_inputs: list | None = None,
        given_notes: tuple[str, ...] = (),
        *,
        notes: tuple[str, ...] | list[str] | None = None,
        decisions: Decisions | None = None,
        replayable: bool = True,
    ) -> None:
        """`notes=` is the keyword this argument had before it was named `given_notes`: both work."""
        given = tuple(notes) if notes is not None else tuple(given_notes)
        values = {
            "trace": trace,
            "partitioner": partitioner,
            "forward": forward,
            "backward_with_nones": backward_with_nones,
            "given_backward_inputs": backward_inputs,
            "replayable": replayable,
            "given_notes": given,
            "decisions": decisions or Decisions(),
        }
        for name, value in values.items():
            object.__setattr__(self, name, value)

    @cached_property
    def backward_inputs(self) -> list | None:
        """Real values of the backward placeholders (real mode; None in fake mode): the real run's own for the
        capture's partition, else the forward graph replayed on the trace's real inputs under the run's random
        state, on first read (None if that fails, or the inputs changed in place since the capture).

        Replayed when read, not when partitioned: a partition made in a background thread (the widget's sweep,
        the slider's neighbours) then never touches the global random generator the kernel's own thread draws
        from, and partitions nobody writes (`save_graphnet`) hold no real values."""
        real = self.trace.real
        if self.given_backward_inputs is not None or not self.replayable or real is None:
            return self.given_backward_inputs
        if real.tangent_values is None or self.trace.inputs_changed():
            return None
        try:
            return replay_backward_inputs(real, self.forward, self.backward_with_nones)
        except Exception:  # noqa: BLE001 - the graphs stand, only the real values are missing
            return None

    @cached_property
    def notes(self) -> tuple[str, ...]:
        """The given notes; a note where torch ignored the budget (in torch's terms); and a warning when the
        partitioner recomputes a random op: such an extraction must not look exact."""
        notes = list(self.given_notes)
        if self.decisions.budget_ignored:
            d = self.decisions
            notes.append(
                f"torch ignored the memory budget {d.budget:g}: plain min-cut's plan weighs "
                f"{format_bytes(d.min_cut_bytes)} by torch's count (parameters included), no more than the "
                f"forward's inputs ({format_bytes(d.input_bytes)}), so torch keeps that plan "
                "(choose_saved_values_set: max_act_size <= min_act_size) and every budget above 0 saves what "
                "budget 1 saves."
            )
        copies = self.layout_copies
        if copies:
            names = ", ".join(s.source or s.name for s in copies[:4]) + (", ..." if len(copies) > 4 else "")
            notes.append(
                "Inductor's code generation lays this graph's convolutions out channels_last (torch decides by "
                "torch._inductor.config.layout_optimization) and may keep a channels_last copy of a forward input a "
                f"convolution reads where this partition keeps the tensor itself: up to {len(copies)} ({names}; "
                f"{format_bytes(sum(s.bytes for s in copies))}), which a pack hook around the compiled call counts "
                "too; with layout_optimization=False torch.compile(model) saves exactly this partition."
            )
        random = self.recomputed_random_ops
        if random:
            notes.append(
                f"{self.partitioner.name} recomputes random op(s) {', '.join(random)} in backward: the backward "
                "draws new random numbers, so its gradients differ from eager autograd's."
            )
        return tuple(notes)

    @cached_property
    def layout_copies(self) -> list[analysis.SavedTensor]:
        """Saved forward inputs a convolution reads, of which Inductor's code generation may keep channels_last copies
        where it lays the graph out so (its decision read from torch; which ones its lowering copies is not known
        before it runs): what `torch.compile(model)` may keep beyond this partition, Inductor's split before its
        code generation. Empty on aot_eager."""
        if self.trace.backend != "inductor" or not inductor_lays_out_channels_last(self.forward):
            return []
        convolution = torch.ops.aten.convolution.default
        read = {
            arg.name
            for node in self.forward.graph.find_nodes(op="call_function", target=convolution)
            for arg in node.args[:2]
            if isinstance(arg, torch.fx.Node) and arg.op == "placeholder"
        }
        return [s for s in self.saved_tensors if not s.is_activation and s.name in read]

    @property
    def index(self) -> int:
        return self.trace.index

    @property
    def inputs(self) -> list[InputSource]:
        return self.trace.inputs

    @property
    def storages(self) -> RegionStorages:
        return self.trace.storages

    @property
    def joint(self) -> torch.fx.GraphModule:
        return self.trace.joint

    @property
    def forward_inputs(self) -> list | None:
        return self.trace.forward_inputs

    @cached_property
    def backward(self) -> torch.fx.GraphModule:
        """The backward graph with `None` gradients dropped from its returned tuple."""
        return without_none_outputs(self.backward_with_nones)

    @cached_property
    def backward_code(self) -> str:
        return graphnet_code(self.backward)

    @cached_property
    def forward_code(self) -> str:
        return graphnet_code(self.forward)

    @cached_property
    def saved_tensors(self) -> list[analysis.SavedTensor]:
        return analysis.saved_tensors(self)

    @cached_property
    def nodes(self) -> list[BackwardNode]:
        """The table of backward nodes the views show (kind, module, lines, bytes, why saved)."""
        return backward_nodes(self)

    @cached_property
    def tangents(self) -> list[analysis.TensorInfo]:
        return analysis.tangents(self.backward_with_nones)

    @cached_property
    def gradients(self) -> list[analysis.GradientOutput]:
        return analysis.gradients(self.backward_with_nones, self.inputs)

    @cached_property
    def recomputed(self) -> list[tuple[str, str]]:
        """Forward ops the partitioner chose to recompute in backward: (node name, op)."""
        return analysis.recomputed(self.backward_with_nones)

    @cached_property
    def recomputed_random_ops(self) -> list[str]:
        """Random ops (dropout...) recomputed in backward: their numbers are drawn again there."""
        return analysis.random_ops(self.backward_with_nones, {name for name, _ in self.recomputed})

    @cached_property
    def node_flops(self) -> dict[str, int]:
        """FLOPs of each backward node, by torch's FLOP counter on fake tensors (the same nodes as `backward`)."""
        from .flops import node_flops

        shared = counted_flops(self.backward_with_nones, self.trace.op_flops)
        return shared if shared is not None else node_flops(self.backward_with_nones)

    @cached_property
    def memory(self) -> MemoryProfile:
        """Activation memory after each forward and backward op (a liveness walk of both graphs)."""
        return profile(self)

    @property
    def backward_flops(self) -> int:
        return sum(self.node_flops.values())

    @property
    def recompute_flops(self) -> int:
        """FLOPs spent in backward recomputing forward ops."""
        flops = self.node_flops
        return sum(flops.get(name, 0) for name, _ in self.recomputed)

    @property
    def saved_activation_bytes(self) -> int:
        """Memory one run of the region saves on top of the model's tensors and the call's (views of those cost
        nothing; an input the forward made, kept alive by the saving, counts)."""
        return sum(s.activation_bytes for s in self.saved_tensors)

    @property
    def torch_budget_ratio(self) -> float | None:
        """The budget as torch measures this plan: (saved - forward inputs) / (plain min-cut's saved - forward
        inputs), by torch's own sizes (views at full size); None where min-cut did not run."""
        return self.decisions.budget_ratio

    @property
    def saved_input_bytes(self) -> int:
        """Forward inputs (parameters, buffers, user inputs) kept alive for backward, each tensor once."""
        kept = {
            s.source or s.name: s.bytes for s in self.saved_tensors if not s.is_activation and not s.activation_bytes
        }
        return sum(kept.values())


def saved_storages(partitions: Sequence[Partition]) -> list[tuple[analysis.SavedTensor, int]]:
    """Each storage the partitions' saved values keep alive beyond the model's tensors and the call's, with the
    saved value that counts it and its bytes: each run of a region its own (`RegionStorages.runs`), a storage two
    regions save once (a value one region hands on and another takes in, both saving it). What `torch.compile`'s run
    of the forward keeps for backward in its compiled regions."""
    return [(saved, nbytes) for saved, nbytes, _ in _region_storages(partitions)]


def outside_regions(partitions: Sequence[Partition], eager: Sequence[EagerStorage]) -> list[int]:
    """The bytes of each storage eager autograd saved outside every compiled region (`core/eager_saves.py`) that
    none of `partitions` saves too: a region's output that eager code saves counts with the region at a budget
    where the region saves it as well, and with eager autograd where not. With `saved_storages`, everything a
    `torch.compile` run of the forward keeps for backward, each storage once."""
    if not eager:
        return []
    in_regions = {key for _, _, key in _region_storages(partitions) if key is not None}
    return [nbytes for key, nbytes in eager if key is None or key not in in_regions]


def _region_storages(partitions: Sequence[Partition]) -> list[tuple[analysis.SavedTensor, int, int | None]]:
    """`saved_storages` with each storage's key across regions (None where no other region can hold it)."""
    counted: set[int] = set()
    storages = []
    for partition in partitions:
        regions = partition.storages
        for run in range(regions.runs):
            for saved in partition.saved_tensors:
                key, nbytes = regions.kept(run, saved.storage_ref, saved.activation_bytes)
                if not nbytes or key in counted:
                    continue
                if key is not None:
                    counted.add(key)
                storages.append((saved, nbytes, key))
    return storages
