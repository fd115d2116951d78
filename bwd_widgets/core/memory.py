"""Activation memory over time: a liveness walk of a partition's forward and backward graphs.

The walk follows the graphs as AOT Autograd runs them: ops in graph order, each value dropped after
its last use (the generated code's `x = None`), saved values handed from forward to backward and
dropped after their last use there. What it counts is the memory the graphs allocate on top of their
inputs: forward inputs (parameters, buffers, user inputs) and tangents are not counted; views count
the storage they share once; gradients stay alive to the end of backward. Storages are told apart by
the fake tensors' own storages, so `view`, `t` and `_unsafe_view` share memory exactly as at run time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch
import torch.fx

from .analysis import SavedTensor, graph_modules
from .compat import op_schema, storage_id
from .nodes import AnalysedPartition, backward_modules

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence


class ProfiledPartition(AnalysedPartition, Protocol):
    """A partition with its liveness walk done (what `trace.Partition` caches as `memory`)."""

    @property
    def memory(self) -> MemoryProfile: ...


FORWARD = "forward"
BACKWARD = "backward"
SAVED = "saved"
GRADIENT = "gradient"
TEMPORARY = "temporary"
KINDS = (SAVED, GRADIENT, TEMPORARY)
"""What each live storage is: a value saved for backward (from the forward op that computes it to its
last use in backward), a gradient the backward returns, or anything else the graphs allocate
(intermediates, and forward outputs that are not saved)."""


@dataclass(frozen=True)
class MemoryPeak:
    """Where activation memory is highest: after which op, in which phase and module."""

    live_bytes: int
    phase: str
    node: str
    module: str
    graph: int
    step: int
    """Index of this op in `memory_timeline()`."""


@dataclass(frozen=True)
class MemoryProfile:
    """One partition's timeline: `{"phase", "node", "live_bytes"}` after each op, forward then backward."""

    timeline: list[dict]
    forward_steps: int
    saved_bytes: int
    """Bytes alive between forward and backward: the saved activations' storages, each once."""
    modules: dict[str, str]
    """Module path of each op in the timeline (by node name), for the peak."""
    storages: list[Lifetime]
    """Every storage the walk counts, in steps of this partition's own forward and backward."""
    counterparts: dict[str, str]
    """The backward node that stands for each forward op (`counterparts()`), where there is one."""


@dataclass(frozen=True)
class Lifetime:
    """One storage the walk counts: alive from `first` to `last` (phase, step) inclusive; `last` may be
    (BACKWARD, -1) for a saved value backward never reads."""

    nbytes: int
    kind: str
    """SAVED, GRADIENT or TEMPORARY."""
    module: str
    """The module of the op that allocates it ("" for the top level)."""
    first: tuple[str, int]
    last: tuple[str, int]
    of_parameter: bool = False
    """GRADIENT only: the gradient of a parameter (a training step's bill), not of an input."""


CUDA_BLOCK_BYTES = 512
"""The CUDA caching allocator's unit (`kMinBlockSize` in c10/cuda/CUDACachingAllocator.cpp): each request is
booked as a whole number of these, and `torch.cuda.max_memory_allocated` counts the blocks booked."""


def allocator_block(nbytes: int) -> int:
    """The bytes CUDA's caching allocator books for a request of `nbytes` under its default settings (its
    `round_size`: a multiple of 512, at least 512; a request of none books none)."""
    return -(-nbytes // CUDA_BLOCK_BYTES) * CUDA_BLOCK_BYTES


def _storage_ids(value: object) -> list[int | None]:
    """The fake storage behind each tensor of a node's value (None for non-tensors)."""
    values = value if isinstance(value, (tuple, list)) else (value,)
    ids: list[int | None] = []
    for v in values:
        try:
            ids.append(storage_id(v.untyped_storage()) if isinstance(v, torch.Tensor) else None)
        except RuntimeError:  # a tensor without storage (a sparse or nested value): count it as its own
            ids.append(None)
    return ids


def _storage_bytes(value: object) -> list[int]:
    values = value if isinstance(value, (tuple, list)) else (value,)
    sizes = []
    for v in values:
        if not isinstance(v, torch.Tensor):
            sizes.append(0)
            continue
        try:
            sizes.append(int(v.untyped_storage().nbytes()))
        except RuntimeError:  # a tensor without storage (sparse, nested): its elements' bytes
            sizes.append(int(v.numel()) * v.element_size())
    return sizes


def _viewed_key(node: torch.fx.Node, keys: dict) -> object | None:
    """For an op whose schema says its output aliases its first argument without writing it (`view`,
    `unsqueeze`, `t`), that argument's storage key: the fake value a graph pass (min-cut's CSE) left on a
    view may name a duplicate's storage, but at run time a view shares its input's memory."""
    schema = op_schema(node.target)
    returns: list = list(schema.returns) if schema is not None else []
    alias = returns[0].alias_info if len(returns) == 1 else None
    first = node.args[0] if node.args else None
    if alias is None or alias.is_write or not isinstance(first, torch.fx.Node):
        return None
    first_keys = keys.get(first) or [None]
    return first_keys[0] if len(first_keys) == 1 else None


class _Walk:
    """Storages and their lifetimes in one graph, in the order its code runs."""

    def __init__(
        self, graph: torch.fx.Graph, external: dict[str, object | None], blocks: Callable[[int], int] | None = None
    ):
        """`external`: placeholders by name -> the storage key they bring (None: not counted); `blocks`: the
        bytes an allocator books for a storage of so many bytes (None: the storage's own bytes)."""
        self.ops = [n for n in graph.nodes if n.op == "call_function"]
        self.step = {n: i for i, n in enumerate(self.ops)}
        self.size: dict[object, int] = {}
        self.keys: dict[torch.fx.Node, list[object | None]] = {}
        self.birth: dict[object, int] = {}
        fakes_of: dict[torch.fx.Node, list[int | None]] = {}
        for node in graph.nodes:
            if node.op == "output":
                continue
            fakes = fakes_of[node] = _storage_ids(node.meta.get("val"))
            if node.op != "call_function":  # placeholders bring what `external` says; constants count nothing
                key = external.get(node.name) if node.op == "placeholder" else None
                self.keys[node] = [key for _ in fakes]
                continue
            # a value can only share the memory of what it is computed from (a view, a getitem)
            shared = {f: k for arg in node.all_input_nodes for f, k in zip(fakes_of[arg], self.keys[arg]) if f}
            viewed = _viewed_key(node, self.keys)
            keys = []
            sizes = _storage_bytes(node.meta.get("val"))
            for index, (fake, nbytes) in enumerate(zip(fakes, map(blocks, sizes) if blocks else sizes)):
                if fake is not None and fake in shared:
                    keys.append(shared[fake])
                    continue
                if fake is not None and viewed is not None:  # a view by its op's schema: its input's memory
                    keys.append(viewed)
                    continue
                key = (node.name, index) if fake is not None or nbytes else None
                if key is not None:
                    self.size[key] = nbytes
                    self.birth[key] = self.step[node]
                keys.append(key)
            self.keys[node] = keys

    def deaths(self, kept: set[object]) -> dict[object, int]:
        """Step after which each storage is dropped: the last use of any value sharing it.

        Storages in `kept` (outputs) live past the last op."""
        end = len(self.ops)
        death: dict[object, int] = {}
        for node, keys in self.keys.items():
            last = max((self.step[u] for u in node.users if u in self.step), default=self.step.get(node, -1))
            for key in keys:
                if key is not None:
                    death[key] = max(death.get(key, -1), end if key in kept else last)
        return death

    def output_keys(self, graph: torch.fx.Graph) -> dict[str, list[object | None]]:
        values = graph.output_node().args[0]
        values = values if isinstance(values, (tuple, list)) else (values,)
        return {v.name: self.keys.get(v, []) for v in values if isinstance(v, torch.fx.Node)}


def _live(walk: _Walk, start: dict[object, int], death: dict[object, int]) -> list[int]:
    """Live bytes after each op: storages born at or before it and dropped at or after it.

    `start`: storages alive before the first op (saved values brought into backward)."""
    delta = [0] * (len(walk.ops) + 2)
    for key, nbytes in start.items():
        delta[0] += nbytes
        delta[min(death.get(key, -1), len(walk.ops) - 1) + 1] -= nbytes
    for key, born in walk.birth.items():
        delta[born] += walk.size[key]
        delta[max(death.get(key, born), born) + 1] -= walk.size[key]
    live, total = [], 0
    for i in range(len(walk.ops)):
        total += delta[i]
        live.append(total)
    return live


def profile(partition: AnalysedPartition, blocks: Callable[[int], int] | None = None) -> MemoryProfile:
    """The liveness walk of one partition: forward, then backward with the saved values; each storage counted
    as `blocks` books it where given (`allocator_block`), else at its own bytes."""
    sources = partition.inputs
    forward = _Walk(partition.forward.graph, {}, blocks)
    forward_outputs = forward.output_keys(partition.forward.graph)
    backward_graph = partition.backward_with_nones.graph  # the same nodes as `backward`, without its copy
    placeholders = [n.name for n in backward_graph.find_nodes(op="placeholder")]
    saved_keys = {name: (forward_outputs.get(name) or [None])[0] for name in placeholders}
    # everything the forward returns lives to its end; into backward go the saved values only
    forward_death = forward.deaths({k for keys in forward_outputs.values() for k in keys if k is not None})
    forward_live = _live(forward, {}, forward_death)
    backward = _Walk(
        backward_graph, {name: ("saved", key) for name, key in saved_keys.items() if key is not None}, blocks
    )
    carried: dict[object, int] = {
        ("saved", key): forward.size[key] for key in set(saved_keys.values()) if key in forward.size
    }
    returned = backward.output_keys(backward_graph)
    gradient_keys = {k for keys in returned.values() for k in keys if k is not None}
    of_parameters = {k for g in partition.gradients if g.kind == "parameter" for k in returned.get(g.name, [])}
    backward_death = backward.deaths(gradient_keys)
    backward_live = _live(backward, carried, backward_death)
    timeline = [{"phase": FORWARD, "node": n.name, "live_bytes": b} for n, b in zip(forward.ops, forward_live)]
    timeline += [{"phase": BACKWARD, "node": n.name, "live_bytes": b} for n, b in zip(backward.ops, backward_live)]
    modules = graph_modules(list(partition.forward.graph.nodes), sources, {}, {}) | backward_modules(partition)
    last_forward, last_backward = len(forward.ops) - 1, len(backward.ops) - 1

    def lifetime(key: object, nbytes: int, kind: str, phase: str, death: dict, last: int) -> Lifetime:
        born = (forward if phase == FORWARD else backward).birth[key]
        end = (BACKWARD, min(backward_death.get(("saved", key), -1), last_backward)) if kind == SAVED else None
        return Lifetime(
            nbytes,
            kind,
            modules.get(key[0] if isinstance(key, tuple) else "", ""),
            (phase, born),
            end or (phase, min(max(death.get(key, -1), born), last)),
            kind == GRADIENT and key in of_parameters,
        )

    storages = [
        lifetime(key, n, SAVED if ("saved", key) in carried else TEMPORARY, FORWARD, forward_death, last_forward)
        for key, n in forward.size.items()
    ]
    storages += [
        lifetime(key, n, GRADIENT if key in gradient_keys else TEMPORARY, BACKWARD, backward_death, last_backward)
        for key, n in backward.size.items()
    ]
    chosen = _counterparts(forward, saved_keys, backward_graph)
    return MemoryProfile(timeline, len(forward.ops), sum(carried.values()), modules, storages, chosen)


def _counterparts(forward: _Walk, saved: dict[str, object | None], backward_graph: torch.fx.Graph) -> dict[str, str]:
    """For each forward op, the backward node a click on it selects: the saved value it computes (by
    name, else a saved value sharing its storage, such as a saved view of it), else the first backward
    op torch built for it (the same autograd `seq_nr`), else what its first user selects; forward ops
    with none of these are left out."""
    saved_by_key: dict[object, str] = {}
    for name, key in saved.items():
        if key is not None:
            saved_by_key.setdefault(key, name)
    by_seq: dict[int, str] = {}
    for node in backward_graph.nodes:
        seq = node.meta.get("seq_nr")
        if node.op == "call_function" and isinstance(seq, int):
            by_seq.setdefault(seq, node.name)
    found: dict[str, str] = {}
    for op in forward.ops:
        seq = op.meta.get("seq_nr")
        shared = (saved_by_key[k] for k in forward.keys.get(op, []) if k in saved_by_key)
        node = (
            op.name if op.name in saved else next(shared, None) or (by_seq.get(seq) if isinstance(seq, int) else None)
        )
        if node:
            found[op.name] = node
    for op in reversed(forward.ops):  # an op with neither (an `expand` feeding a `clone`): what its first user selects
        user = next((u.name for u in op.users if u.name in found), None)
        if op.name not in found and user:
            found[op.name] = found[user]
    return found


def timeline(partitions: Sequence[ProfiledPartition], blocks: Callable[[int], int] | None = None) -> list[dict]:
    """The whole run as AOT Autograd orders it: each region's forward in turn, then their backwards
    in reverse, each offset by the saved values of the regions whose backward has not run yet. With `blocks`
    (`allocator_block`: what `torch.cuda.max_memory_allocated` counts), each storage as the allocator books it."""
    profiles = [p.memory if blocks is None else profile(p, blocks) for p in partitions]
    steps: list[dict] = []
    held = 0
    for index, memory in enumerate(profiles):
        steps += [
            dict(s, live_bytes=s["live_bytes"] + held, graph=index) for s in memory.timeline[: memory.forward_steps]
        ]
        held += memory.saved_bytes
    for index in range(len(profiles) - 1, -1, -1):
        memory = profiles[index]
        held -= memory.saved_bytes
        steps += [
            dict(s, live_bytes=s["live_bytes"] + held, graph=index) for s in memory.timeline[memory.forward_steps :]
        ]
    return steps


def _offsets(profiles: list[MemoryProfile]) -> tuple[list[int], list[int]]:
    """Where each region's forward and backward start in `timeline()`'s steps."""
    forward, backward, at = [], [0] * len(profiles), 0
    for memory in profiles:
        forward.append(at)
        at += memory.forward_steps
    for index in range(len(profiles) - 1, -1, -1):
        backward[index] = at
        at += len(profiles[index].timeline) - profiles[index].forward_steps
    return forward, backward


def live_by(partitions: Sequence[ProfiledPartition], band: Callable[[Lifetime], str]) -> dict[str, list[int]]:
    """Live bytes after each op of `timeline(partitions)`, split by `band` of each storage (its kind,
    its module): at every step the bands add up to the timeline's live bytes."""
    profiles = [p.memory for p in partitions]
    forward, backward = _offsets(profiles)
    steps = sum(len(m.timeline) for m in profiles)
    deltas: dict[str, list[int]] = {}
    for index, memory in enumerate(profiles):
        start = {FORWARD: forward[index], BACKWARD: backward[index]}
        for s in memory.storages:
            first, last = start[s.first[0]] + s.first[1], start[s.last[0]] + s.last[1]
            if last < first:
                continue
            delta = deltas.setdefault(band(s), [0] * (steps + 1))
            delta[first] += s.nbytes
            delta[last + 1] -= s.nbytes
    bands: dict[str, list[int]] = {}
    for name, delta in deltas.items():
        total, live = 0, []
        for d in delta[:steps]:
            total += d
            live.append(total)
        bands[name] = live
    return bands


def live_by_kind(partitions: Sequence[ProfiledPartition]) -> dict[str, list[int]]:
    """`live_by` each storage's kind, every kind of KINDS present (in that order)."""
    bands = live_by(partitions, lambda s: s.kind)
    steps = len(timeline(partitions))
    return {kind: bands.get(kind, [0] * steps) for kind in KINDS}


def counterpart_steps(partitions: Sequence[ProfiledPartition]) -> list[str]:
    """For each step of `timeline(partitions)`, the backward node it selects in its own region's graph:
    a backward op itself, a forward op its counterpart (`MemoryProfile.counterparts`), else ""."""
    steps = timeline(partitions)
    return [
        s["node"] if s["phase"] == BACKWARD else partitions[s["graph"]].memory.counterparts.get(s["node"], "")
        for s in steps
    ]


def _highest(partitions: Sequence[ProfiledPartition], steps: list[dict], live: list[int]) -> MemoryPeak:
    """The first step of `steps` where `live` is highest."""
    if not steps:
        return MemoryPeak(0, FORWARD, "", "", 0, -1)
    step = max(range(len(steps)), key=lambda i: (live[i], -i))
    top = steps[step]
    module = partitions[top["graph"]].memory.modules.get(top["node"], "")
    return MemoryPeak(live[step], top["phase"], top["node"], module, top["graph"], step)


def peak(partitions: Sequence[ProfiledPartition]) -> MemoryPeak:
    """The highest point of `timeline(partitions)`: the first op where it is reached."""
    steps = timeline(partitions)
    return _highest(partitions, steps, [s["live_bytes"] for s in steps])


def activation_peak(partitions: Sequence[ProfiledPartition]) -> MemoryPeak:
    """The highest point of `timeline(partitions)` without the parameters' gradients (GRADIENT storages
    `of_parameter`): saved values, temporaries and any input's gradient, the memory a batch costs; the
    parameters' gradients are a training step's bill, which no checkpoint or min-cut budget lowers."""
    steps = timeline(partitions)
    gradients = parameter_gradients_live(partitions)
    return _highest(partitions, steps, [s["live_bytes"] - g for s, g in zip(steps, gradients)])


def parameter_gradients_live(partitions: Sequence[ProfiledPartition]) -> list[int]:
    """Live bytes of the parameters' gradients at each step of `timeline(partitions)`."""
    bands = live_by(partitions, lambda s: "parameter gradient" if s.of_parameter else "")
    return bands.get("parameter gradient", [0] * len(timeline(partitions)))


def bytes_by_module(storages: list[tuple[SavedTensor, int]]) -> dict[str, int]:
    """Saved activation bytes per module ("" for the top level), largest first, from `trace.saved_storages`;
    they sum to the total."""
    totals: dict[str, int] = {}
    for s, nbytes in storages:
        totals[s.module or ""] = totals.get(s.module or "", 0) + nbytes
    return dict(sorted(totals.items(), key=lambda item: -item[1]))
