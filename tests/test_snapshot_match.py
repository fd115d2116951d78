"""A memory snapshot matched to a loaded TORCH_TRACE region (`TraceRegion.attach_snapshot`,
`core/snapshot_match.py`).

Both come from one real run made here, in a fresh process: the course Transformer under `torch.compile` with
`TORCH_TRACE=<dir>` (aot_eager, and Inductor compiling its C++ on this CPU; budgets 1 and 0.5), called once to
compile, then one training step under `torch.profiler.profile(profile_memory=True, record_shapes=True,
with_stack=True)`, written as the snapshot torch makes of a CPU run (`torch.cuda._memory_viz._profile_to_snapshot`,
pickled as `_dump_snapshot` writes it). The matched curve is held against the snapshot as `pickle.load` reads it
(alloc adds, free_completed takes away, as torch's `_memory_viz.trace` counts), and the saved storages against
the sizes of the allocations paired with them.
"""

from __future__ import annotations

import itertools
import pickle
from typing import TYPE_CHECKING

import pytest
import torch
from torch.cuda import _memory_viz
from torch_trace_runs import STEP_WITH_SNAPSHOT, run_traced

import bwd_widgets as bw
from bwd_widgets.core import memory, snapshot_match
from bwd_widgets.core.errors import SnapshotError
from bwd_widgets.core.kinds import BACKENDS
from bwd_widgets.core.snapshot_match import SnapshotMeasured, predicted_allocations
from bwd_widgets.examples import MLP
from bwd_widgets.views.memory_payload import memory_payload

if TYPE_CHECKING:
    from pathlib import Path

    from bwd_widgets.extraction.loaded_trace import TraceRegion


def _slow_for_inductor(*cases: tuple) -> list:
    """Inductor compiles C++ in the run (tens of seconds on a loaded machine): those cases go to the slow tier."""
    return [
        pytest.param(case, marks=[pytest.mark.slow] if "inductor" in case else [], id=f"{case[0]}-{case[1]}")
        for case in cases
    ]


CASES = _slow_for_inductor(*itertools.product(BACKENDS, [1.0, 0.5]))


@pytest.fixture(scope="module", params=CASES)
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """The trace folder and the snapshot file of one run (made once for every test of the module)."""
    backend, budget = request.param
    folder = tmp_path_factory.mktemp(f"{backend}_{budget}")
    snapshot = folder / "snapshot.pickle"
    caches_off = {"TORCHINDUCTOR_FX_GRAPH_CACHE": "0", "TORCHINDUCTOR_AUTOGRAD_CACHE": "0"}  # each run compiles
    run_traced(folder / "trace", STEP_WITH_SNAPSHOT, backend, str(budget), str(snapshot), env=caches_off)
    return folder / "trace", snapshot, backend


def _own_live(snapshot: Path, device: int, first: int, last: int) -> list[int]:
    """After each event from `first` to `last`, the bytes of the allocations made there and not yet freed (an
    address's alloc to its next free_completed), from the dict `pickle.load` makes."""
    with snapshot.open("rb") as f:
        events = pickle.load(f)["device_traces"][device]
    live: dict[int, int] = {}
    after = []
    for event in events[first : last + 1]:
        if event["action"] == "alloc":
            live[event["addr"]] = event["size"]
        elif event["action"] == "free_completed":
            live.pop(event["addr"], None)
        after.append(sum(live.values()))
    return after


def test_the_matched_curve_and_its_peaks_are_the_snapshots(run: tuple[Path, Path, str]) -> None:
    trace, snapshot, backend = run
    (region,) = bw.load_trace(trace)
    measured = region.attach_snapshot(snapshot)
    assert isinstance(measured, SnapshotMeasured) and region.measured is measured and region.measure() is measured
    steps = region.memory_timeline()
    assert [(p["phase"], p["node"]) for p in measured.curve] == [(s["phase"], s["node"]) for s in steps]
    assert measured.predicted == [s["live_bytes"] for s in steps]
    first, last = measured.window
    own = _own_live(snapshot, measured.snapshot_device, first, last)
    assert measured.peak_bytes == measured.allocator_peak_bytes == max(own)  # peak allocated, over the window
    if backend == "aot_eager":  # every op's allocation is listed: the window is the whole profiled step
        assert measured.window == (0, len(bw.load_memory_snapshot(snapshot).devices[0]) - 1)
    # the curve samples the same count between ops: never above it, and each point a count it reached
    curve = [p["live_bytes"] for p in measured.curve]
    assert max(curve) <= max(own) and set(curve) <= set(own)
    # at the end of the forward every saved storage is alive, each allocated in the window
    forward_end = sum(1 for s in steps if s["phase"] == memory.FORWARD) - 1
    saved = [a for a in predicted_allocations(region.partitions) if a.kind == memory.SAVED]
    paired_saved = [e for e in measured.events if e["kind"] == memory.SAVED and e["event"] is not None]
    assert curve[forward_end] >= sum(e["measured_size"] for e in paired_saved)
    assert measured.reserved_peak_bytes is None  # a CPU profile records no segments
    assert any("peak reserved is not known" in note for note in measured.notes)
    assert region.notes[-len(measured.notes) :] == measured.notes  # the widget's notes show what pairing said
    # the widget's memory tab draws it over the prediction, peak allocated and reserved apart
    drawn = memory_payload(region)["measured"]
    assert drawn is not None and drawn["peak"]["live_bytes"] == max(own) and drawn["reserved_peak_bytes"] is None
    assert drawn["predicted_peak_bytes"] == max(measured.predicted) and drawn["device"] == "snapshot device 0"
    assert len(saved) == measured.saved_storages


def _lifetimes(snapshot: Path, device: int) -> dict[int, int]:
    """Each alloc event's free_completed (the next of its address; -1 for none), from the dict `pickle.load` makes."""
    with snapshot.open("rb") as f:
        events = pickle.load(f)["device_traces"][device]
    live: dict[int, int] = {}
    freed: dict[int, int] = {}
    for i, event in enumerate(events):
        if event["action"] == "alloc":
            live[event["addr"]] = i
            freed[i] = -1
        elif event["action"] == "free_completed" and event["addr"] in live:
            freed[live.pop(event["addr"])] = i
    return freed


def test_every_saved_value_pairs_with_an_allocation_of_its_size(run: tuple[Path, Path, str]) -> None:
    """aot_eager runs each op through the dispatcher: the profiler sees every storage, and every saved one pairs
    with an allocation of its size that lives from the forward into the backward. Inductor's C++ kernels write
    buffers the profiler never sees an op use (`_profile_to_snapshot` lists only those): a saved storage may
    then go unpaired, but never while an allocation of its size living into the backward is left over."""
    trace, snapshot, backend = run
    (region,) = bw.load_trace(trace)
    measured = region.attach_snapshot(snapshot)
    loaded = bw.load_memory_snapshot(snapshot)
    device = loaded.devices[measured.snapshot_device]
    freed = _lifetimes(snapshot, measured.snapshot_device)
    assert {i: device.freed_at[i] for i in freed} == freed  # the reader pairs frees as torch's dict does
    steps = region.memory_timeline()
    forward_steps = sum(1 for s in steps if s["phase"] == memory.FORWARD)
    paired = [e for e in measured.events if e["event"] is not None]
    border = min(e["event"] for e in paired if e["step"] >= forward_steps)  # the backward's first pair

    def into_backward(event: int) -> bool:
        """Made before the backward's first pair, and not freed before it."""
        return event < border and not 0 <= freed[event] < border

    for event in paired:
        assert device.action(event["event"]) == "alloc" and event["measured_size"] == event["size"], event
        assert event["kind"] != memory.SAVED or into_backward(event["event"]), event
    assert len({e["event"] for e in paired}) == len(paired) == measured.paired  # each allocation paired once
    assert [e["event"] for e in paired] == sorted(e["event"] for e in paired)  # in the run's order
    saved = [e for e in measured.events if e["kind"] == memory.SAVED]
    unpaired = [e for e in saved if e["event"] is None]
    if backend == "aot_eager":
        assert not unpaired and measured.saved_paired == len(saved) > 0
    else:  # what the snapshot never lists stays unpaired; a third of what the graphs hand over is there
        listed = {device.sizes[i] for i in freed}
        assert unpaired and all(e["event"] is None for e in saved if e["size"] not in listed)
        handed = [e for e in measured.events if e["kind"] in (memory.SAVED, memory.GRADIENT)]
        assert len(handed) == len(measured.events) and 3 * len(paired) >= len(handed)


def test_a_snapshot_of_another_model_says_so_in_one_sentence(run: tuple[Path, Path, str], tmp_path: Path) -> None:
    trace, _, _ = run
    (region,) = bw.load_trace(trace)
    torch.manual_seed(0)
    model, inputs = MLP(width=24, depth=2, out=3), torch.randn(5, 24)
    with torch.profiler.profile(profile_memory=True, record_shapes=True, with_stack=True) as profile:
        model(inputs).sum().backward()
    other = tmp_path / "other.pickle"
    other.write_bytes(pickle.dumps(_memory_viz._profile_to_snapshot(profile)))
    with pytest.raises(SnapshotError) as error:
        region.attach_snapshot(other)
    assert "\n" not in str(error.value) and "lines up with region" in str(error.value)
    assert region.measured is None  # left as it was
    with pytest.raises(SnapshotError, match="window"):
        region.attach_snapshot(other, window=(5, 10**9))


def _region_and_its_step(run: tuple[Path, Path, str]) -> tuple[TraceRegion, SnapshotMeasured, dict, list[dict]]:
    """The run's region with its snapshot attached, the snapshot as `pickle.load` reads it, and its paired
    device's events (what a test rewrites into a snapshot of another shape)."""
    trace, snapshot, _ = run
    (region,) = bw.load_trace(trace)
    one = region.attach_snapshot(snapshot)
    with snapshot.open("rb") as f:
        recorded = pickle.load(f)
    return region, one, recorded, recorded["device_traces"][one.snapshot_device]


def test_a_cuda_shaped_snapshot_of_two_steps_pairs_the_first_and_says_its_reserved_peak(
    run: tuple[Path, Path, str], tmp_path: Path
) -> None:
    """The run's snapshot as a CUDA one records it (no GPU here): each size rounded up to the caching allocator's
    512-byte blocks, a segment reserved before the step and released after, the step twice back to back. The
    first step is the one paired, the second is found within a window, and peak reserved is the segment's."""
    region, one, recorded, events = _region_and_its_step(run)
    blocks = [dict(e, size=max(512, -(-e["size"] // 512) * 512)) for e in events]
    segment = 2 * sum(e["size"] for e in blocks if e["action"] == "alloc")
    reserve = [{"action": "segment_alloc", "addr": 0, "size": segment, "stream": 0, "frames": []}]
    release = [dict(reserve[0], action="segment_free")]
    recorded["device_traces"][one.snapshot_device] = reserve + blocks + release + blocks
    shaped = tmp_path / "cuda_shaped.pickle"
    shaped.write_bytes(pickle.dumps(recorded))
    first = region.attach_snapshot(shaped)
    assert 1 <= first.window[0] and first.window[1] <= len(events) + 1  # within the first step
    assert first.reserved_peak_bytes == segment and memory_payload(region)["measured"]["reserved_peak_bytes"] == segment
    assert all(e["event"] is None or e["event"] <= len(events) for e in first.events)
    assert first.saved_paired >= one.saved_paired - 1  # rounded, sizes below a block pair alike
    second = region.attach_snapshot(shaped, window=(len(events) + 2, 2 * len(events) + 1))
    shift = len(events) + 1
    assert second.window[0] == first.window[0] + shift and second.window[1] <= 2 * len(events) + 1
    assert second.reserved_peak_bytes == 0
    assert [p["live_bytes"] for p in second.curve] == [p["live_bytes"] for p in first.curve]


def test_a_snapshot_file_of_many_steps_is_paired_from_its_first_without_reading_on(
    run: tuple[Path, Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's step forty times or more in one file (each copy at addresses of its own), read streamed and tried after
    every part read: the first step is paired as the step alone is, as the whole-file rule pairs it too, and the
    rest of the file is not read; taken at once where it pairs every saved storage and gradient (aot_eager), else
    once a second try found the same pairing (Inductor's C++ buffers are not in the profiler's snapshot)."""
    backend = run[2]
    region, one, recorded, events = _region_and_its_step(run)
    copies = max(40, -(-40_000 // len(events)))  # some 40,000 events: more than the reader reads in one go
    recorded["device_traces"][one.snapshot_device] = [
        dict(e, addr=e["addr"] + (copy << 40)) for copy in range(copies) for e in events
    ]
    steps = tmp_path / "many_steps.pickle"
    steps.write_bytes(pickle.dumps(recorded))
    monkeypatch.setattr(snapshot_match, "READ_EVERY_S", 0.0)  # try after every part read
    streamed = region.attach_snapshot(steps)
    whole = snapshot_match.match_snapshot(region.partitions, bw.load_memory_snapshot(steps), name="whole")
    handed = [e for e in one.events if e["kind"] in snapshot_match.HANDED]
    assert all(e["event"] is not None for e in handed) == (backend == "aot_eager")
    assert "the rest of the file was not read" in streamed.notes[-1] and region.notes[-1] == streamed.notes[-1]
    assert streamed.window == one.window and streamed.curve == one.curve and streamed.events == one.events
    assert streamed.peak_bytes == one.peak_bytes and streamed.source == str(steps)
    # the whole-file rule takes the first of equal steps too
    assert (streamed.window, streamed.curve, streamed.events) == (whole.window, whole.curve, whole.events)


def test_a_segment_reserved_after_the_run_is_not_the_runs(run: tuple[Path, Path, str], tmp_path: Path) -> None:
    """A segment reserved after the region's run, for the next allocation (the next step's), is outside the window:
    the run's peak reserved is not that segment's (before, the window's tail of frees ran on over it: 69 MB of a
    2 KB run's peak reserved, on bench/trace_widget_lab.py's file)."""
    region, one, recorded, events = _region_and_its_step(run)
    segment = {"action": "segment_alloc", "addr": 1 << 45, "size": 64 << 20, "stream": 0, "frames": []}
    after = dict(segment, action="alloc", size=4096)
    recorded["device_traces"][one.snapshot_device] = [*events, segment, after]
    followed = tmp_path / "followed.pickle"
    followed.write_bytes(pickle.dumps(recorded))
    measured = region.attach_snapshot(followed)
    assert measured.window == one.window and measured.window[1] < len(events)
    assert measured.reserved_peak_bytes is None  # nothing reserved up to the window's end was recorded
    assert (measured.curve, measured.events) == (one.curve, one.events)
