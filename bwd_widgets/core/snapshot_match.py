"""A memory snapshot's allocations matched to a region's predicted ones: the measured curve of a run that was not run
here (a TORCH_TRACE region, `bw.load_trace`), from the snapshot recorded during it.

The rule. The prediction (`core/memory.py`) lists every storage the region's forward and backward graphs allocate,
with its bytes and the step (op) that allocates it; in step order that is a sequence of sizes. The snapshot's
device trace is a sequence of `alloc` events with sizes. The two are aligned as sequences (semi-global alignment, a
longest common subsequence with costs): each predicted allocation is either paired with a later `alloc` than the
one before it, of the same size (where every size in the trace is a whole 512-byte block, as the CUDA caching
allocator's snapshots record them: its size rounded up to the blocks), scoring MATCH (SAVED_BONUS more for a saved
storage), or left unpaired, costing GAP; the snapshot's allocations between the first and the last paired one that
pair with nothing cost SKIP each, those before and after nothing. For an Inductor region only the saved storages
and gradients take part (HANDED): its kernels fuse the graph's other values away and allocate buffers of their own.
A saved storage lives from the forward into the backward: in a second pass it pairs only with an allocation made
before, and freed after, the first backward allocation the first pass paired (the trace's own alloc and
free_completed of one address, `DeviceTimeline.freed_at`), so that no forward temporary of its size is taken for
it. The best-scoring alignment gives the window of events that is one run of the region's forward and backward, and
which event allocated which predicted storage; where an alignment as good ends before it starts (the snapshot holds
several steps), the earlier is taken. Where under LEAST_HANDED_SHARE of the region's saved storages and gradients
pair, SnapshotError says so.

The curve at each step is the bytes of the window's own allocations not yet freed (alloc to its free_completed)
just before the next paired allocation of a later step: what was allocated before the window and freed in it does
not count, as the prediction does not count it. Peak allocated is the highest such count at any event of the window
(temporaries inside an op included), peak reserved the most the segments held in it (absent where the trace records
no segment event up to the window's end, as in the profiler's CPU snapshots). The window ends with the frees after
its last paired allocation, before the next allocation or segment reserved.

A snapshot file is read streamed (`match_snapshot_file`), and the rule is tried on what has been read, every
READ_EVERY_S seconds. A pairing after whose window at least as many allocations have been read as the region
makes (so that the run has ended) is taken without reading on where every saved storage and gradient pairs in it,
or where the try before found the same pairing (the storages that do not pair, such as an Inductor region's C++
buffers the profiler's CPU snapshot does not list, did not pair in more of the file either); a snapshot of many
steps, gigabytes of them, is paired from its first step in seconds. Where none is found so, or where a `window` is
given, the file is read whole and paired by the rule above.

What it cannot tell apart. Sizes and order only: two values of one size allocated one after the other can be paired
the other way round (the curve is the same; which value is which is not known). The frames the snapshot reader
keeps (the innermost frame of the user's own code) name the model's `forward` or the line that called
`.backward()`, not the graph's op, so they are carried into the matched events for reading but do not decide the
pairing. Allocations inside an op (a reduction's scratch) and outside the region (the loss, its gradient) are
counted by the curve where they fall in the window, as the allocator counted them; a buffer the compiled code
reuses for a later value (Inductor's `# reuse`) is one allocation for two predicted storages, so the later stays
unpaired; the prediction's own extra storages (a `t` of a weight, an `_unsafe_view` it counts apart from its input)
pair with nothing. The profiler's CPU snapshot (`torch.cuda._memory_viz._profile_to_snapshot`) lists only storages
an op was seen to use: buffers only Inductor's C++ kernels write are not in it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from . import memory
from .errors import SnapshotError
from .measure import MeasuredMemory
from .memory_snapshot import ACTIONS, DeviceTimeline, MemorySnapshot, iter_memory_snapshot
from .units import format_bytes

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from .memory import ProfiledPartition

_ALLOC = ACTIONS.index("alloc")
_RESERVES = (_ALLOC, ACTIONS.index("segment_alloc"), ACTIONS.index("segment_map"))
"""What ends a window's tail of frees: an allocation, or a segment reserved for the next one."""
MATCH = 4
"""Score of a predicted allocation paired with a snapshot allocation of its size."""
SAVED_BONUS = 1
"""Added for a saved storage paired: where sizes and order leave the pairing open (an op's output and the
`_unsafe_view` of it that is saved, one allocation the prediction counts as two), the saved one is paired."""
GAP = 1
"""Cost of a predicted allocation left unpaired."""
SKIP = 3
"""Cost of a snapshot allocation inside the window left unpaired: above GAP, so that a window reaching into
the step before (whose allocations of the same sizes would pair predicted ones left over) costs more than the
pairs it gains (on two copies of one step, SKIP 1 straddled them; 3 takes the first whole)."""
HANDED = (memory.SAVED, memory.GRADIENT)
"""The storages a graph hands over (to its backward, or as the gradients it returns): every backend allocates
them, where a compiled kernel may fuse the others away."""
BLOCK = memory.CUDA_BLOCK_BYTES
"""The CUDA caching allocator's smallest block and rounding (`kMinBlockSize`): a CUDA snapshot's sizes."""
MAX_CELLS = 20_000_000
"""Most (predicted allocations x snapshot allocations) the alignment takes (5 bytes a cell): beyond, give a
`window` of events."""
READ_EVERY_S = 0.25
"""How often a snapshot being read is tried for a whole run of the region (`match_snapshot_file`)."""
LEAST_HANDED_SHARE = 1 / 3
"""Below this share of the region's saved storages and gradients paired, the snapshot is not taken for a run of
the region. Those are what any backend must allocate (a compiled kernel fuses intermediates away, never the
values its graph hands over); a third, not all, because the profiler's CPU snapshot does not list the buffers
that only Inductor's C++ kernels write (at budget 0.5 on the course Transformer: 7 of 23 saved storages
paired, 21 of 24 gradients)."""


@dataclass(frozen=True)
class PredictedAllocation:
    """One storage the prediction counts, where the run allocates it."""

    step: int
    """Its step in `memory.timeline(partitions)`."""
    nbytes: int
    kind: str
    module: str


@dataclass(frozen=True)
class SnapshotMeasured(MeasuredMemory):
    """`MeasuredMemory` read from a memory snapshot rather than a run made here: `events` are the predicted
    allocations, each `{"action": "alloc", "step", "size", "kind", "module", "event", "measured_size",
    "frame"}` (`event` None where unpaired); peak reserved apart from peak allocated."""

    window: tuple[int, int] = (0, -1)
    """First and last event of the device trace taken as the region's run."""
    snapshot_device: int = 0
    paired: int = 0
    """Predicted allocations paired with a snapshot allocation."""
    saved_paired: int = 0
    saved_storages: int = 0
    notes: list[str] = field(default_factory=list)
    source: str = ""
    """The snapshot file."""

    def snapshot(self) -> dict:
        raise SnapshotError(
            f"this measurement was read from the snapshot {self.source or 'file'}: open that file on "
            "pytorch.org/memory_viz."
        )


def predicted_allocations(partitions: Sequence[ProfiledPartition]) -> list[PredictedAllocation]:
    """Every storage the prediction counts, in the order the run allocates them (by step; within a step, in
    the order the op returns them)."""
    starts: dict[tuple[int, str], int] = {}
    for at, point in enumerate(memory.timeline(partitions)):
        starts.setdefault((point["graph"], point["phase"]), at)  # where each region's forward and backward begin
    found = []
    for index, partition in enumerate(partitions):
        for lifetime in partition.memory.storages:
            phase, step = lifetime.first
            if lifetime.nbytes > 0:
                found.append(
                    PredictedAllocation(starts[index, phase] + step, lifetime.nbytes, lifetime.kind, lifetime.module)
                )
    return sorted(found, key=lambda a: a.step)  # stable: an op's outputs keep their order


def _fits(predicted: int, sizes: torch.Tensor, blocks: bool) -> torch.Tensor:
    """Which snapshot sizes a predicted size pairs with: its own, or where the snapshot's sizes are all whole
    BLOCKs (the CUDA caching allocator's, which its snapshots record), it rounded up to them."""
    if not blocks:
        return sizes == predicted
    return sizes == memory.allocator_block(predicted)


def _align(
    predicted: list[tuple[int, int, bool]], sizes: torch.Tensor, alive: torch.Tensor | None = None
) -> tuple[int, list[tuple[int, int]]]:
    """Semi-global alignment of `predicted` (size, score when paired, whether it is saved; all of it) against
    `sizes` (any stretch): the best score and its pairs (predicted index, index into sizes), the earliest stretch
    among equals. `alive`: the allocations a saved storage may pair with (None: any).

    Row by row in torch: D[j] is the best ending with predicted i paired with j or left out; the gaps along
    the snapshot are one running maximum, H[j] = max over k <= j of D[k] - SKIP * (j - k)."""
    count = len(sizes)
    positions = torch.arange(count + 1, dtype=torch.int64)
    low = torch.iinfo(torch.int64).min // 4
    blocks = bool(count) and bool((sizes % BLOCK == 0).all())
    row = torch.zeros(count + 1, dtype=torch.int64)  # any start in the snapshot costs nothing
    rows_d, codes = [], []
    for nbytes, score, saved in predicted:
        fits = _fits(nbytes, sizes, blocks)
        if saved and alive is not None:
            fits &= alive
        diagonal = torch.full((count + 1,), low, dtype=torch.int64)
        diagonal[1:] = torch.where(fits, row[:-1] + score, low)
        left_out = row - GAP
        d = torch.maximum(diagonal, left_out)
        rows_d.append(d.to(torch.int32))
        codes.append(diagonal >= left_out)
        row = torch.cummax(d + SKIP * positions, dim=0).values - SKIP * positions
    best = int(row.max())
    j = int(torch.nonzero(row == best)[0])  # the earliest end among equals
    pairs = []
    for i in range(len(predicted), 0, -1):
        d = rows_d[i - 1].to(torch.int64)
        shifted = d[: j + 1] + SKIP * positions[: j + 1]
        j = int(torch.nonzero(shifted == shifted.max())[-1])  # back over the snapshot allocations left out
        if bool(codes[i - 1][j]):
            pairs.append((i - 1, j - 1))
            j -= 1
    pairs.reverse()
    return best, pairs


def _score(allocation: PredictedAllocation) -> int:
    return MATCH + (SAVED_BONUS if allocation.kind == memory.SAVED else 0)


def _allocations(device: DeviceTimeline, window: tuple[int, int] | None) -> tuple[list[int], list[int]]:
    first, last = window if window is not None else (0, len(device) - 1)
    if not 0 <= first <= last < len(device):
        raise SnapshotError(
            f"window {window} is not within the device's {len(device)} events: give (first, last) event indexes."
        )
    events = [i for i in range(first, last + 1) if device.actions[i] == _ALLOC]
    return events, [device.sizes[i] for i in events]


def match_snapshot(
    partitions: Sequence[ProfiledPartition],
    snapshot: MemorySnapshot | DeviceTimeline,
    *,
    name: str = "the region",
    window: tuple[int, int] | None = None,
) -> SnapshotMeasured:
    """The measured curve of one run of `partitions`' forwards and backwards, read from `snapshot` by the rule
    above (on a snapshot of several devices, the device whose allocations pair best). `window`: the first and
    last event to search (by default all of them). Raises SnapshotError, in one sentence, where no stretch of
    the snapshot pairs with LEAST_HANDED_SHARE of the region's saved storages and gradients."""
    devices = snapshot.devices if isinstance(snapshot, MemorySnapshot) else [snapshot]
    source = snapshot.path if isinstance(snapshot, MemorySnapshot) else ""
    wanted = predicted_allocations(partitions)
    fused = any(getattr(getattr(p, "trace", None), "backend", None) == "inductor" for p in partitions)
    if fused:  # Inductor's kernels allocate buffers of their own for the rest: only these are sure to be there
        wanted = [a for a in wanted if a.kind in HANDED]
    saved = [i for i, a in enumerate(wanted) if a.kind == memory.SAVED]
    if not wanted:
        raise SnapshotError(f"{name} allocates nothing in its graphs: there is nothing of it to find in a snapshot.")
    rows = [(a.nbytes, _score(a), a.kind == memory.SAVED) for a in wanted]
    best: tuple[int, DeviceTimeline, list[int], list[tuple[int, int]]] | None = None
    for device in devices:
        searched = window or (0, len(device) - 1)
        found = _pairing(device, searched, rows, wanted, partitions, name)
        # the alignment may straddle two steps: a run as good that ends before it starts is the earlier step
        while found is not None and found[2] and (start := found[1][found[2][0][1]]) > searched[0]:
            earlier = _pairing(device, (searched[0], start - 1), rows, wanted, partitions, name)
            if earlier is None or earlier[0] < found[0]:
                break
            found = earlier
        if found is not None and (best is None or found[0] > best[0]):
            best = (found[0], device, found[1], found[2])
    if best is None:
        raise SnapshotError(f"the snapshot records no allocation{' in that window' if window else ''}.")
    _, device, events, pairs = best
    paired = {i: events[j] for i, j in pairs}
    saved_paired = sum(1 for i in saved if i in paired)
    handed = [i for i, a in enumerate(wanted) if a.kind in HANDED]
    handed_paired = sum(1 for i in handed if i in paired)
    if not pairs or handed_paired < LEAST_HANDED_SHARE * len(handed):
        raise SnapshotError(
            f"no stretch of the snapshot's allocations lines up with {name}'s: {handed_paired} of its "
            f"{len(handed)} saved storages and gradients pair with an allocation of their size in order (was the "
            "snapshot recorded during this region's forward and backward?)."
        )
    measured = _measured(partitions, device, wanted, paired, saved_paired, len(saved), source)
    if fused:
        measured.notes.append(
            "an Inductor region: only its saved storages and gradients are paired (its kernels allocate buffers of "
            "their own for the rest), so the curve steps between their allocations."
        )
    return measured


def match_snapshot_file(
    partitions: Sequence[ProfiledPartition],
    path: str | Path,
    *,
    name: str = "the region",
    window: tuple[int, int] | None = None,
    every_s: float | None = None,
) -> SnapshotMeasured:
    """`match_snapshot` of the snapshot at `path`, read streamed: paired as soon as what has been read holds a
    whole run of the region (the module's docstring says when); else, and with a `window`, the whole file."""
    wanted = predicted_allocations(partitions)
    beyond_one_go: set[int] = set()  # devices whose allocations read so far are too many to pair in one go
    tried: dict[int, tuple[tuple[int, int], list[dict]]] = {}  # each device's last pairing: its window and events
    for read in iter_memory_snapshot(path, every_s=READ_EVERY_S if every_s is None else every_s):
        if read.complete:
            return match_snapshot(partitions, read, name=name, window=window)
        if window is not None:  # the window is of the whole file: a later device may pair better in it
            continue
        for index, device in enumerate(read.devices):
            if index in beyond_one_go:
                continue
            if sum(1 for i in range(len(device)) if device.actions[i] == _ALLOC) * len(wanted) > MAX_CELLS:
                beyond_one_go.add(index)  # the whole file is read, and `match_snapshot` says what to give
                continue
            try:
                found = match_snapshot(partitions, device, name=name)
            except SnapshotError:
                continue
            after = sum(1 for i in range(found.window[1] + 1, len(device)) if device.actions[i] == _ALLOC)
            handed = [e for e in found.events if e["kind"] in HANDED]
            same = tried.get(index) == (found.window, found.events)
            tried[index] = (found.window, found.events)
            if after >= len(wanted) and (same or all(e["event"] is not None for e in handed)):
                return _read_so_far(dataclasses.replace(found, source=read.path), read)
    raise AssertionError("iter_memory_snapshot ends with the whole file")  # pragma: no cover


def _read_so_far(measured: SnapshotMeasured, read: MemorySnapshot) -> SnapshotMeasured:
    """`measured`, noting that the pairing was made before the file was read whole."""
    measured.notes.append(
        f"paired from the first {format_bytes(read.read_bytes)} of the snapshot, which hold a whole run of the "
        "region; the rest of the file was not read."
    )
    return measured


def _pairing(
    device: DeviceTimeline,
    window: tuple[int, int],
    rows: list[tuple[int, int, bool]],
    wanted: list[PredictedAllocation],
    partitions: Sequence[ProfiledPartition],
    name: str,
) -> tuple[int, list[int], list[tuple[int, int]]] | None:
    """The two passes of the rule on one device's events in `window`: the score, the allocation events, and
    the pairs (predicted index, index into those events); None where the window holds no allocation."""
    events, sizes = _allocations(device, window)
    if not events:
        return None
    if len(events) * len(rows) > MAX_CELLS:
        raise SnapshotError(
            f"device {device.device} of the snapshot holds {len(events)} allocations, too many to pair with "
            f"{name}'s {len(rows)} in one go: give window=(first, last) events around one step."
        )
    sizes_tensor = torch.tensor(sizes, dtype=torch.int64)
    score, pairs = _align(rows, sizes_tensor)
    alive = _alive_into_backward(device, events, pairs, wanted, partitions)
    if alive is not None:
        score, pairs = _align(rows, sizes_tensor, alive)
    return score, events, pairs


def _alive_into_backward(
    device: DeviceTimeline,
    events: list[int],
    pairs: list[tuple[int, int]],
    wanted: list[PredictedAllocation],
    partitions: Sequence[ProfiledPartition],
) -> torch.Tensor | None:
    """The allocations made before the first backward allocation the first pairing found and still alive at
    it: the ones a saved storage can be (None where the trace says no frees, or nothing paired in backward)."""
    forward_steps = sum(1 for s in memory.timeline(partitions) if s["phase"] == memory.FORWARD)
    backward = [j for i, j in pairs if wanted[i].step >= forward_steps]
    if len(device.freed_at) < len(device) or not backward:
        return None
    border = events[min(backward)]
    freed = torch.tensor([device.freed_at[e] for e in events], dtype=torch.int64)
    made = torch.tensor(events, dtype=torch.int64)
    return (made < border) & ((freed < 0) | (freed > border))


def _own_live(device: DeviceTimeline, first: int, last: int) -> list[int]:
    """After each event from `first` to `last`, the bytes of the allocations made in that window and not yet
    freed (what was allocated before it, and freed in it, does not count: the prediction counts neither)."""
    if len(device.freed_at) < len(device):  # a timeline made without its frees paired: the allocator's count
        allocated = device.allocated()
        base = allocated[first - 1] if first > 0 else 0
        return [allocated[i] - base for i in range(first, last + 1)]
    delta = [0] * (last - first + 2)
    for i in range(first, last + 1):
        if device.actions[i] == _ALLOC:
            delta[i - first] += device.sizes[i]
            freed = device.freed_at[i]
            if 0 <= freed <= last:
                delta[freed - first] -= device.sizes[i]
    live, now = [], 0
    for change in delta[:-1]:
        now += change
        live.append(now)
    return live


def _measured(
    partitions: Sequence[ProfiledPartition],
    device: DeviceTimeline,
    wanted: list[PredictedAllocation],
    paired: dict[int, int],
    saved_paired: int,
    saved_count: int,
    source: str,
) -> SnapshotMeasured:
    """The curve and peaks over the window the pairs span (to the last free before the next allocation or segment
    reserved)."""
    steps = memory.timeline(partitions)
    first, last = min(paired.values()), max(paired.values())
    while last + 1 < len(device) and device.actions[last + 1] not in _RESERVES:
        last += 1
    live = _own_live(device, first, last)
    segments = any(device.action(i).startswith("segment_") for i in range(last + 1))  # recorded by the window's end
    reserved_peak = max(device.reserved()[first : last + 1]) if segments else None
    notes = [
        f"events {first} to {last} of device {device.device}: {len(paired)} of the region's {len(wanted)} "
        f"allocations paired by size and order, {saved_paired} of its {saved_count} saved storages."
    ]
    if saved_paired < saved_count:
        notes.append(
            f"{saved_count - saved_paired} saved storages pair with no allocation of their size: the compiled code "
            "reused a buffer for them, or the snapshot does not list the allocation (the profiler's CPU snapshot "
            "lists only storages an op used)."
        )
    if reserved_peak is None:
        notes.append("the snapshot records no segment events: peak reserved is not known.")
    return SnapshotMeasured(
        curve=_curve(steps, wanted, paired, live, (first, last)),
        predicted=[s["live_bytes"] for s in steps],
        device=f"snapshot device {device.device}",
        events=_paired_events(device, wanted, paired),
        allocator_peak_bytes=max(live),
        reserved_peak_bytes=reserved_peak,
        window=(first, last),
        snapshot_device=device.device,
        paired=len(paired),
        saved_paired=saved_paired,
        saved_storages=saved_count,
        notes=notes,
        source=source,
    )


def _curve(
    steps: list[dict],
    wanted: list[PredictedAllocation],
    paired: dict[int, int],
    live: list[int],
    window: tuple[int, int],
) -> list[dict]:
    """The window's own live bytes after each step: each step ends before the next paired allocation of a later
    step (pairs keep the run's order); the steps after the last pair end with the window."""
    first, last = window
    starts = sorted((a.step, event) for i, a in enumerate(wanted) if (event := paired.get(i)) is not None)
    curve, k = [], 0
    for step, point in enumerate(steps):
        while k < len(starts) and starts[k][0] <= step:
            k += 1
        end = starts[k][1] - 1 if k < len(starts) else last
        curve.append(
            {
                "phase": point["phase"],
                "node": point["node"],
                "graph": point["graph"],
                "live_bytes": live[max(end, first) - first],
            }
        )
    return curve


def _paired_events(device: DeviceTimeline, wanted: list[PredictedAllocation], paired: dict[int, int]) -> list[dict]:
    """Each predicted allocation with the snapshot event paired with it (None where none), its size and frame."""
    return [
        {
            "action": "alloc",
            "step": a.step,
            "size": a.nbytes,
            "kind": a.kind,
            "module": a.module,
            "event": paired.get(i),
            "measured_size": device.sizes[paired[i]] if i in paired else None,
            "frame": device.frame(paired[i]) if i in paired else "",
        }
        for i, a in enumerate(wanted)
    ]
