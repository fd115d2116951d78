"""`load_memory_snapshot`: a CUDA memory snapshot read without unpickling it, streamed.

This machine has no GPU, so `torch.cuda.memory._snapshot()` cannot run here. The snapshots read are made by
torch's own code where it runs on the CPU (`torch.cuda._memory_viz._profile_to_snapshot` of a real profiler run,
the snapshot torch's `profile_plot` draws) and by bench/snapshot_open.py's generator (a training loop's trace in
torch's keys, as `pickle.dump` writes it). Torch is the independent reader: `pickle.load` plus `_memory_viz`'s
`segsum` and `trace` take every generated file, and the profiler's own memory timeline gives the peak of the
profiled run. A pickle that would run code if unpickled is refused, and the file its payload would create is
never made.
"""

from __future__ import annotations

import itertools
import pickle
import re
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.cuda import _memory_viz

from bwd_widgets.core.errors import SnapshotError
from bwd_widgets.core.memory_snapshot import ACTIONS, iter_memory_snapshot, load_memory_snapshot, top_user_frame

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import snapshot_open  # noqa: E402 (the generator lives with its benchmark)

PROTOCOLS = sorted({2, 3, 4, pickle.DEFAULT_PROTOCOL, pickle.HIGHEST_PROTOCOL})


def _reference(snapshot: dict[str, Any]) -> list[dict[str, Any]]:
    """What each device's trace adds up to, from the dict `pickle.load` made, counted as torch's
    `_memory_viz.trace` counts (alloc adds, free_completed takes away)."""
    result = []
    for events in snapshot["device_traces"]:
        now = peak = 0
        peak_at = -1
        live: dict[int, int] = {}
        at_peak: dict[int, int] = {}
        for i, event in enumerate(events):
            if event["action"] == "alloc":
                now += event["size"]
                live[event["addr"]] = i
                if now > peak:
                    peak, peak_at, at_peak = now, i, dict(live)
            elif event["action"] == "free_completed":
                now -= event["size"]
                live.pop(event["addr"], None)
        sizes = sorted((events[i]["size"] for i in at_peak.values()), reverse=True)
        result.append({"peak": peak, "peak_at": peak_at, "end": now, "sizes_at_peak": sizes})
    return result


def _freed_at(events: list[dict[str, Any]]) -> list[int]:
    """Each alloc's free_completed (the next one of its address; -1 for none), -1 for other events."""
    freed, live = [-1] * len(events), {}
    for i, event in enumerate(events):
        if event["action"] == "alloc":
            live[event["addr"]] = i
        elif event["action"] == "free_completed" and event["addr"] in live:
            freed[live.pop(event["addr"])] = i
    return freed


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("snapshots") / "generated.pickle"
    snapshot_open.write_snapshot(path, 3e6, seed=1)
    return path


def test_torch_reads_the_generated_snapshot_and_agrees_with_the_reader(generated: Path) -> None:
    with generated.open("rb") as stream:
        snapshot = pickle.load(stream)
    summary = _memory_viz.segsum(snapshot)  # asserts that every segment's blocks add up to it
    assert f"segments: {len(snapshot['segments'])}" in summary
    assert "entries" in _memory_viz.trace(snapshot)
    loaded = load_memory_snapshot(generated)
    reference = _reference(snapshot)[0]
    device = loaded.devices[0]
    events = snapshot["device_traces"][0]
    assert len(device) == len(events) > 10_000
    assert [device.action(i) for i in range(len(events))] == [e["action"] for e in events]
    assert list(device.sizes) == [e["size"] for e in events]
    assert [device.time_us(i) for i in range(len(events))] == [e["time_us"] for e in events]
    assert [device.frame(i) for i in range(len(events))] == [top_user_frame(e["frames"]) for e in events]
    assert list(device.freed_at) == _freed_at(events)
    assert (loaded.peak_allocated, device.peak_allocated_event) == (reference["peak"], reference["peak_at"])
    assert [a.size for a in loaded.top_at_peak] == reference["sizes_at_peak"][:10]
    assert all(a.frame.startswith("model.py:") for a in loaded.top_at_peak)
    # the trace covers the whole run, so what it leaves allocated is what the segments hold, as segsum reads them
    assert device.allocated()[-1] == reference["end"] == loaded.segments_allocated
    total_allocated = re.search(r"total_allocated: (.+)", summary)
    assert total_allocated and total_allocated.group(1) == repr(_memory_viz.Bytes(loaded.segments_allocated))
    total_reserved = re.search(r"total_reserved: (.+)", summary)
    assert total_reserved and total_reserved.group(1) == repr(_memory_viz.Bytes(loaded.segments_reserved))
    assert device.reserved()[-1] == loaded.segments_reserved
    assert loaded.peak_reserved == max(device.reserved()) >= loaded.peak_allocated


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_every_protocol_pickle_writes_reads_the_same(generated: Path, tmp_path: Path, protocol: int) -> None:
    """torch's `_dump_snapshot` is `pickle.dump` at the running Python's default protocol: each is read alike."""
    with generated.open("rb") as stream:
        snapshot = pickle.load(stream)
    path = tmp_path / f"protocol{protocol}.pickle"
    path.write_bytes(pickle.dumps(snapshot, protocol=protocol))
    first, again = load_memory_snapshot(generated), load_memory_snapshot(path)
    assert (again.peak_allocated, again.peak_reserved, again.segments_allocated, again.events) == (
        first.peak_allocated,
        first.peak_reserved,
        first.segments_allocated,
        first.events,
    )
    assert again.top_at_peak == first.top_at_peak
    assert [again.devices[0].frame(i) for i in range(first.events)] == [
        first.devices[0].frame(i) for i in range(first.events)
    ]


def _profiled_snapshot(model: torch.nn.Module, inputs: torch.Tensor) -> dict[str, Any]:
    """torch's own snapshot of a real forward and backward on this CPU (what `profile_plot` draws)."""
    with torch.profiler.profile(profile_memory=True, record_shapes=True, with_stack=True) as profile:
        model(inputs).sum().backward()
    return _memory_viz._profile_to_snapshot(profile)


MODELS = {
    "mlp": lambda: (torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)), (32, 64)),
    "conv": lambda: (
        torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.GELU(), torch.nn.Flatten()),
        (4, 3, 16, 16),
    ),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_snapshot_torch_made_here_is_read_whole(name: str, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model, shape = MODELS[name]()
    snapshot = _profiled_snapshot(model, torch.randn(*shape))
    path = tmp_path / "profiled.pickle"
    with path.open("wb") as stream:
        pickle.dump(snapshot, stream)
    loaded = load_memory_snapshot(path)
    events = [event for device in snapshot["device_traces"] for event in device]
    assert loaded.events == len(events) > 0
    device = next(d for d in loaded.devices if len(d))
    assert [device.action(i) for i in range(len(device))] == [e["action"] for e in events]
    reference = next(r for r in _reference(snapshot) if r["peak"])
    assert loaded.peak_allocated == reference["peak"] > 0
    assert [a.size for a in loaded.top_at_peak] == reference["sizes_at_peak"][:10]
    assert loaded.peak_reserved == 0  # the profiler's snapshot records no segment events
    # its frames name this file where the forward was called from it (the profiler's "path.py(line): name")
    assert any(device.frame(i).startswith("test_memory_snapshot.py:") for i in range(len(device)))
    assert "\n" not in repr(loaded) and "peak allocated" in repr(loaded)


def test_devices_keep_their_numbers(tmp_path: Path) -> None:
    frame = {"filename": "/home/user/train.py", "line": 3, "name": "step"}

    def events() -> list[dict[str, Any]]:
        return [
            {"action": "segment_alloc", "addr": 0, "size": 2 << 20, "stream": 0, "time_us": 1, "frames": [frame]},
            {"action": "alloc", "addr": 0, "size": 512, "stream": 0, "time_us": 2, "frames": [frame]},
        ]

    snapshot = {"segments": [], "device_traces": [[], events(), events()[:1]]}
    path = tmp_path / "devices.pickle"
    path.write_bytes(pickle.dumps(snapshot))
    loaded = load_memory_snapshot(path)
    assert [len(device) for device in loaded.devices] == [0, 2, 1]
    assert [(d.peak_allocated, d.peak_reserved) for d in loaded.devices] == [(0, 0), (512, 2 << 20), (0, 2 << 20)]
    assert loaded.devices[1].top_at_peak[0].frame == "train.py:3:step"
    # one event dict used twice is not what torch writes: refused in one sentence, not miscounted
    shared = events()
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [shared, [shared[0]]]}))
    with pytest.raises(SnapshotError, match="uses one trace event twice"):
        load_memory_snapshot(path)


def test_partial_results_come_before_the_whole(generated: Path) -> None:
    results = list(iter_memory_snapshot(generated, every_s=0.0))
    assert len(results) >= 2
    assert [r.complete for r in results] == [False] * (len(results) - 1) + [True]
    counts = [r.events for r in results]
    assert counts == sorted(counts) and counts[0] < counts[-1]
    assert results[-1].read_bytes == generated.stat().st_size


def test_reading_holds_a_fraction_of_what_unpickling_holds(generated: Path) -> None:
    tracemalloc.start()
    try:
        load_memory_snapshot(generated)
        _, streamed = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        with generated.open("rb") as stream:
            whole = pickle.load(stream)
        _, unpickled = tracemalloc.get_traced_memory()
        del whole
    finally:
        tracemalloc.stop()
    assert streamed * 3 < unpickled, (streamed, unpickled)


class _RunsCode:
    """What a hostile snapshot carries: unpickled carelessly, it runs a shell command."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        import os

        return (os.system, (f"touch {self.marker}",))


PLACES = ("top", "in_an_event", "in_a_frame")


def _hostile(marker: Path, place: str) -> dict[str, Any] | _RunsCode:
    payload = _RunsCode(marker)
    if place == "top":
        return payload
    frame: dict[str, Any] = {"filename": "/home/user/train.py", "line": 3, "name": "step"}
    event: dict[str, Any] = {"action": "alloc", "addr": 1, "size": 512, "stream": 0, "time_us": 1, "frames": [frame]}
    if place == "in_an_event":
        event["size"] = payload
    else:
        frame["name"] = payload
    return {"segments": [], "device_traces": [[event, dict(event, addr=2)]]}


@pytest.mark.parametrize(("protocol", "place"), list(itertools.product((0, 1, *PROTOCOLS), PLACES)))
def test_a_pickle_that_would_run_code_is_refused_and_nothing_runs(tmp_path: Path, protocol: int, place: str) -> None:
    marker = tmp_path / "ran"
    path = tmp_path / "hostile.pickle"
    path.write_bytes(pickle.dumps(_hostile(marker, place), protocol=protocol))
    with pytest.raises(SnapshotError, match=r"could run code when unpickled; nothing in it was run\.$"):
        load_memory_snapshot(path)
    assert not marker.exists()
    # the payload is live: unpickled carelessly (in a child process), it makes the file
    subprocess.run([sys.executable, "-c", f"import pickle; pickle.load(open({str(path)!r}, 'rb'))"], check=False)
    assert marker.exists()


def test_bad_files_get_one_sentence(tmp_path: Path, generated: Path) -> None:
    cut = tmp_path / "cut.pickle"
    cut.write_bytes(generated.read_bytes()[: generated.stat().st_size // 2])
    not_snapshot = tmp_path / "list.pickle"
    not_snapshot.write_bytes(pickle.dumps([1, 2, 3]))
    text = tmp_path / "notes.txt"
    text.write_text("not a pickle at all\n")
    huge_string = tmp_path / "huge_string.pickle"  # a length of 2**60 bytes: refused, not allocated
    huge_string.write_bytes(b"\x80\x04\x8d" + (1 << 60).to_bytes(8, "little") + b"abc.")
    far_memo = tmp_path / "far_memo.pickle"  # a memo number of 2**31: refused, not a 16 GB memo
    far_memo.write_bytes(b"\x80\x02N" + b"r" + (1 << 31).to_bytes(4, "little") + b".")
    cases = {
        cut: "cut short",
        not_snapshot: "not a memory snapshot",
        text: "not a plain memory snapshot",
        huge_string: "cut short",
        far_memo: "not a pickle torch wrote",
        tmp_path / "missing.pickle": "is not a file",
    }
    for path, words in cases.items():
        with pytest.raises(SnapshotError) as raised:
            load_memory_snapshot(path)
        message = str(raised.value)
        assert words in message and "\n" not in message, message
        assert isinstance(raised.value, ValueError)


def test_every_action_torch_names_is_counted(tmp_path: Path) -> None:
    """Each action of torch's `TraceEntry` (torch/cuda/memory.py), and one a newer torch might add, is kept."""
    names = (*ACTIONS, "some_new_action")
    events = [
        {"action": name, "addr": i, "size": 1 << (4 * i), "stream": 0, "time_us": i, "frames": []}
        for i, name in enumerate(names)
    ]
    path = tmp_path / "actions.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [events]}))
    device = load_memory_snapshot(path).devices[0]
    assert [device.action(i) for i in range(len(names))] == [*ACTIONS, "other"]
    assert list(device.sizes) == [event["size"] for event in events]  # widened past 4 bytes on the way
    assert device.peak_allocated == 1 << (4 * names.index("alloc"))
    up, down, mapped = (1 << (4 * names.index(name)) for name in ("segment_alloc", "segment_free", "segment_map"))
    assert device.peak_reserved == up - down + mapped  # segment_unmap, after it, takes away
