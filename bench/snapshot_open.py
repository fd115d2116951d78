"""Open a large CUDA memory snapshot (issue 47): time and peak memory of `bw.load_memory_snapshot`.

`write_snapshot(path, size)` writes a snapshot in torch's format (`torch.cuda.memory._snapshot()`'s dict as
`torch.cuda.memory._dump_snapshot` pickles it) of about `size` bytes, from a simulated training loop on one
device: a caching allocator that asks for 20 MiB segments (or one of the request's size, rounded to 2 MiB),
forward activations freed in reverse in backward, weights and optimizer state kept; each event with torch's
keys (action, addr, size, stream, time_us, frames) and a deep stack (the allocator's C++ frames, the op's,
torch's Python frames, the user's, CPython's), innermost first, whose frame dicts are shared between events as
torch shares them, so pickle memoizes them (its memo references are most of a real snapshot's bytes).
The file is written as `pickle.dump` writes protocol 4 (less its optional FRAME opcodes) while the events are
made, so a 2 GB snapshot never exists in memory here either; `pickle.load` and torch's `_memory_viz` read it
(tests/test_memory_snapshot.py checks both).

Then, in a fresh process, it opens the file: the seconds to the first partial result (`iter_memory_snapshot`)
and to the whole, and the process's peak RSS (`resource.getrusage`). Goal: the first result within 10 s and
the peak RSS under 1 GB for a 2 GB snapshot.

    .venv/bin/python bench/snapshot_open.py --size 2e9 [--path /tmp/snapshot_2g.pickle] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import random
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MiB = 1 << 20
SEGMENT = 20 * MiB

_CPP_ALLOCATOR = [
    (
        "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)",
        "/pytorch/c10/cuda/CUDACachingAllocator.cpp",
    ),
    (
        "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::malloc(void**, signed char, unsigned long, CUstream_st*)",
        "/pytorch/c10/cuda/CUDACachingAllocator.cpp",
    ),
    (
        "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)",
        "/pytorch/c10/cuda/CUDACachingAllocator.cpp",
    ),
    (
        "c10::StorageImpl::StorageImpl(c10::StorageImpl::use_byte_size_t, c10::SymInt const&, c10::Allocator*, bool)",
        "/pytorch/c10/core/StorageImpl.h",
    ),
    (
        "at::TensorBase at::detail::_empty_generic<long>(c10::ArrayRef<long>, c10::Allocator*, c10::DispatchKeySet, c10::ScalarType, std::optional<c10::MemoryFormat>)",
        "/pytorch/aten/src/ATen/EmptyTensor.cpp",
    ),
    (
        "at::detail::empty_cuda(c10::ArrayRef<long>, c10::ScalarType, std::optional<c10::Device>, std::optional<c10::MemoryFormat>)",
        "/pytorch/aten/src/ATen/cuda/EmptyTensor.cpp",
    ),
]
_OPS = [
    "mm",
    "addmm",
    "bmm",
    "gelu",
    "layer_norm",
    "softmax",
    "_scaled_dot_product_flash_attention",
    "add",
    "mul",
    "native_dropout",
    "embedding",
    "cat",
    "transpose",
    "view",
    "_log_softmax",
]
_TORCH_PY = [
    ("forward", "/usr/local/lib/python3.11/site-packages/torch/nn/modules/linear.py", 125),
    ("_call_impl", "/usr/local/lib/python3.11/site-packages/torch/nn/modules/module.py", 1762),
    ("_wrapped_call_impl", "/usr/local/lib/python3.11/site-packages/torch/nn/modules/module.py", 1751),
    ("backward", "/usr/local/lib/python3.11/site-packages/torch/autograd/__init__.py", 353),
    ("_engine_run_backward", "/usr/local/lib/python3.11/site-packages/torch/autograd/graph.py", 824),
    ("step", "/usr/local/lib/python3.11/site-packages/torch/optim/adamw.py", 243),
]
_CPYTHON = [
    ("_PyEval_EvalFrameDefault", "/usr/local/src/conda/python-3.11.9/Python/ceval.c"),
    ("_PyObject_MakeTpCall", "/usr/local/src/conda/python-3.11.9/Objects/call.c"),
    ("PyObject_Call", "/usr/local/src/conda/python-3.11.9/Objects/call.c"),
    ("pymain_run_python", "/usr/local/src/conda/python-3.11.9/Modules/main.c"),
]


class _Frames:
    """A pool of frame dicts, each made once and shared (as torch's symbolizer shares them)."""

    def __init__(self) -> None:
        self.pool: dict[tuple[str, str, int], dict[str, Any]] = {}

    def __call__(self, name: str, filename: str, line: int) -> dict[str, Any]:
        key = (name, filename, line)
        frame = self.pool.get(key)
        if frame is None:
            frame = self.pool[key] = {"filename": filename, "line": line, "name": name}
        return frame


def _call_sites(rng: random.Random, count: int) -> list[list[dict[str, Any]]]:
    """`count` distinct stacks, innermost first, 40 to 90 frames deep."""
    frame = _Frames()
    stacks = []
    for site in range(count):
        op = _OPS[site % len(_OPS)]
        stack = [frame(name, filename, 100 + i) for i, (name, filename) in enumerate(_CPP_ALLOCATOR)]
        stack += [
            frame(f"at::native::{op}_out_cuda(...)", f"/pytorch/aten/src/ATen/native/cuda/{op}.cu", 40 + site % 7)
        ]
        stack += [frame(f"at::_ops::{op}::call(...)", "/pytorch/build/aten/src/ATen/Operators_2.cpp", 3000 + site % 13)]
        stack += [
            frame(
                "torch::autograd::THPVariable_" + op,
                "/pytorch/torch/csrc/autograd/generated/python_torch_functions_0.cpp",
                900,
            )
        ]
        for depth in range(rng.randint(2, 6)):
            name, filename, line = _TORCH_PY[(site + depth) % len(_TORCH_PY)]
            stack.append(frame(name, filename, line))
            stack += [frame(name, filename, 5000 + depth) for name, filename in _CPYTHON[:2]]
        layer = site % 24
        stack.append(frame("forward", "/home/user/project/model.py", 60 + 7 * (site % 11)))
        stack.append(frame(f"block_{layer}", "/home/user/project/model.py", 200 + layer))
        stack += [frame(name, filename, 5000) for name, filename in _CPYTHON[:3]] * rng.randint(4, 12)
        stack.append(frame("train_step", "/home/user/project/train.py", 88))
        stack.append(frame("main", "/home/user/project/train.py", 140))
        stack.append(frame(*_CPYTHON[3], 700))
        stacks.append(stack)
    return stacks


class _Simulation:
    """A caching allocator in miniature: segments of 20 MiB (larger requests get their own, rounded to 2 MiB),
    each filled and emptied as a stack, which is how a training step's activations come and go."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.stacks = _call_sites(self.rng, 600)
        self.segments: list[dict[str, Any]] = []
        self.next_address = 0x7F0000000000
        self.time_us = 1_733_400_000_000_000
        self.live: list[tuple[int, int, int, list[dict[str, Any]], int]] = []

    def _event(self, action: str, addr: int, size: int, frames: list[dict[str, Any]], site: int = -1) -> dict[str, Any]:
        self.time_us += self.rng.randint(1, 40)
        # torch's keys, in the order torch's _snapshot() writes them
        return {
            "action": action,
            "addr": addr,
            "size": size,
            "stream": 0,
            "time_us": self.time_us,
            "frames": frames,
            "site": site,
        }

    def alloc(self, requested: int, site: int) -> list[dict[str, Any]]:
        size = max(512, (requested + 511) // 512 * 512)
        # one list per allocation, shared by its alloc and free events (torch symbolizes a traceback once)
        frames = list(self.stacks[site % len(self.stacks)])
        events = []
        segment = next((s for s in self.segments if s["total_size"] - s["top"] >= size), None)
        if segment is None:
            total = SEGMENT if size <= SEGMENT else (size + 2 * MiB - 1) // (2 * MiB) * (2 * MiB)
            segment = {"address": self.next_address, "total_size": total, "top": 0, "blocks": [], "frames": frames}
            self.next_address += total + 64 * MiB
            self.segments.append(segment)
            events.append(self._event("segment_alloc", segment["address"], total, list(frames)))
        addr = segment["address"] + segment["top"]
        segment["top"] += size
        segment["blocks"].append((addr, size, requested, frames))
        self.live.append((addr, size, requested, frames, len(self.segments)))
        events.append(self._event("alloc", addr, size, frames, site % len(self.stacks)))
        return events

    def free_last(self) -> list[dict[str, Any]]:
        addr, size, _, frames, _ = self.live.pop()
        for segment in self.segments:
            if segment["address"] <= addr < segment["address"] + segment["total_size"]:
                segment["blocks"] = [block for block in segment["blocks"] if block[0] != addr]
                last = segment["blocks"][-1] if segment["blocks"] else None
                segment["top"] = last[0] + last[1] - segment["address"] if last else 0
                break
        return [self._event("free_requested", addr, size, frames), self._event("free_completed", addr, size, frames)]

    def empty_cache(self) -> list[dict[str, Any]]:
        events = []
        for segment in [s for s in self.segments if not s["blocks"]]:
            self.segments.remove(segment)
            events.append(
                self._event("segment_free", segment["address"], segment["total_size"], list(segment["frames"]))
            )
        return events

    def events(self) -> Any:
        """The trace, one allocator call's events at a time (a segment_alloc with its alloc, a free_requested with
        its free_completed), step after step, until the caller stops reading."""
        site = 0
        for _ in range(40):  # weights and optimizer state: kept
            yield self.alloc(self.rng.choice([4, 16, 64]) * MiB + self.rng.randint(0, 4096), site)
            site += 1
        kept = len(self.live)
        step = 0
        while True:
            for _ in range(self.rng.randint(150, 250)):  # forward: activations saved for backward
                yield self.alloc(self.rng.choice([1, 2, 3, 8, 24]) * MiB // self.rng.choice([1, 4, 16]) + 3, site)
                site += 1
            while len(self.live) > kept:  # backward frees them, newest first
                yield self.free_last()
            step += 1
            if step % 5 == 0:
                yield self.empty_cache()

    def segments_now(self) -> list[dict[str, Any]]:
        """The allocator's state as `_snapshot()` reports it: each segment's blocks tile it, active then free."""
        result = []
        for segment in self.segments:
            blocks, allocated, requested_total, offset = [], 0, 0, segment["address"]
            for addr, size, requested, frames in sorted(segment["blocks"], key=lambda block: block[0]):
                if addr > offset:  # a hole a free left below the top
                    blocks.append(
                        {
                            "address": offset,
                            "size": addr - offset,
                            "requested_size": 0,
                            "state": "inactive",
                            "frames": [],
                        }
                    )
                blocks.append(
                    {
                        "address": addr,
                        "size": size,
                        "requested_size": requested,
                        "state": "active_allocated",
                        "frames": frames,
                    }
                )
                allocated += size
                requested_total += requested
                offset = addr + size
            end = segment["address"] + segment["total_size"]
            if end > offset:
                blocks.append(
                    {"address": offset, "size": end - offset, "requested_size": 0, "state": "inactive", "frames": []}
                )
            result.append(
                {
                    "device": 0,
                    "address": segment["address"],
                    "total_size": segment["total_size"],
                    "allocated_size": allocated,
                    "active_size": allocated,
                    "requested_size": requested_total,
                    "stream": 0,
                    "segment_type": "large" if segment["total_size"] > MiB else "small",
                    "segment_pool_id": (0, 0),
                    "is_expandable": False,
                    "frames": segment["frames"],
                    "blocks": blocks,
                }
            )
        return result


class _Writer:
    """pickle's protocol 4 opcodes, written as `pickle.dump` writes them (each dict, list, tuple and string
    memoized as it is made, later uses as memo references, MARK ... APPENDS/SETITEMS per 1000 items), but for
    the optional FRAME opcodes, so that a trace is written while it is made and no 2 GB object exists."""

    def __init__(self, output: Any) -> None:
        self.output = output
        self.count = 0
        self.memo: dict[int, int] = {}
        self.strings: dict[str, int] = {}
        self.bodies: dict[int, bytes] = {}

    def _memoize(self, obj: Any, remember: bool = True) -> bytes:
        if remember:
            self.memo[id(obj)] = self.count
        self.count += 1
        return b"\x94"

    @staticmethod
    def _get(index: int) -> bytes:
        return b"h" + bytes([index]) if index < 256 else b"j" + index.to_bytes(4, "little")

    def encode(self, obj: Any, remember: bool = True) -> bytes:  # noqa: PLR0911 (one case a type)
        if obj is None:
            return b"N"
        if obj is True or obj is False:
            return b"\x88" if obj else b"\x89"
        kind = type(obj)
        if kind is int:
            if 0 <= obj <= 0xFF:
                return b"K" + bytes([obj])
            if 0 <= obj <= 0xFFFF:
                return b"M" + obj.to_bytes(2, "little")
            if -0x80000000 <= obj <= 0x7FFFFFFF:
                return b"J" + obj.to_bytes(4, "little", signed=True)
            encoded = pickle.encode_long(obj)  # type: ignore[attr-defined]
            return b"\x8a" + bytes([len(encoded)]) + encoded
        if kind is str:
            known = self.strings.get(obj)
            if known is not None:
                return self._get(known)
            data = obj.encode("utf-8", "surrogatepass")
            head = b"\x8c" + bytes([len(data)]) if len(data) < 256 else b"X" + len(data).to_bytes(4, "little")
            self.strings[obj] = self.count
            self.count += 1
            return head + data + b"\x94"
        known = self.memo.get(id(obj))
        if known is not None:
            return self._get(known)
        if kind is tuple:
            if not obj:
                return b")"
            body = b"".join(self.encode(item) for item in obj)
            closed = body + {1: b"\x85", 2: b"\x86", 3: b"\x87"}[len(obj)] if len(obj) <= 3 else b"(" + body + b"t"
            return closed + self._memoize(obj)
        if kind is list:
            head = b"]" + self._memoize(obj, remember)
            return head + self._batched([self.encode(item) for item in obj], b"a", b"e")
        if kind is dict:
            head = b"}" + self._memoize(obj, remember)
            return head + self._batched([self.encode(k) + self.encode(v) for k, v in obj.items()], b"s", b"u")
        raise TypeError(f"a snapshot holds no {kind.__name__}")

    def frames(self, frames: list[dict[str, Any]], site: int) -> bytes:
        """A new frames list of a known stack: its items are memo references, the same bytes every time."""
        body = self.bodies.get(site)
        if body is not None:
            return b"]" + self._memoize(frames) + body
        known_before = all(id(frame) in self.memo for frame in frames)
        encoded = self.encode(frames)
        if known_before:
            self.bodies[site] = encoded[2:]
        return encoded

    @staticmethod
    def _batched(items: list[bytes], one: bytes, many: bytes) -> bytes:
        out = []
        for start in range(0, len(items), 1000):
            chunk = items[start : start + 1000]
            out.append(chunk[0] + one if len(chunk) == 1 else b"(" + b"".join(chunk) + many)
        return b"".join(out)


def write_snapshot(
    path: Path, size: float, seed: int = 0, first_events: list[dict[str, Any]] | None = None
) -> dict[str, int]:
    """Write a snapshot of about `size` bytes; return its counts (events written, file bytes). `first_events`
    (each with a "site" of its own, negative) come before the simulation's, as a real step recorded first."""
    simulation = _Simulation(seed)
    events = 0
    with open(path, "wb") as output:
        writer = _Writer(output)
        # {"device_traces": [[events...]], "segments": [...]}: the allocator's state at the end is known once
        # the trace is written, so here "segments" comes second (torch's own dict has it first; either reads)
        head = b"\x80\x04" + b"}" + writer._memoize(None, remember=False) + b"(" + writer.encode("device_traces")
        head += b"]" + writer._memoize(None, remember=False) + b"]" + writer._memoize(None, remember=False)
        output.write(head)
        calls, written = simulation.events(), output.tell()
        pending: list[dict[str, Any]] = [dict(event) for event in first_events or []]
        while written < size or pending:
            batch: list[bytes] = []
            while len(batch) < 1000 and (pending or written < size):
                if not pending:  # the next allocator call's events, written whole (the file ends between calls)
                    pending = list(next(calls))
                    continue
                event = pending.pop(0)
                head = b"}" + writer._memoize(event, remember=False) + b"("  # pickle memoizes a dict before its items
                frames, site = event["frames"], event.pop("site")
                fields = []
                for key, value in event.items():  # in the stream's order, as memo numbers are given
                    if key == "frames" and event["action"] == "alloc" and id(frames) not in writer.memo:
                        fields.append(writer.encode(key) + writer.frames(frames, site))
                    else:
                        fields.append(writer.encode(key) + writer.encode(value))
                if event["action"] not in ("alloc", "free_requested"):  # its frames list is not written again
                    writer.memo.pop(id(frames), None)
                batch.append(head + b"".join(fields) + b"u")
                written += len(batch[-1])
            if not batch:
                break
            events += len(batch)
            output.write(b"(" + b"".join(batch) + b"e" if len(batch) > 1 else batch[0] + b"a")
        output.write(b"a" + writer.encode("segments") + writer.encode(simulation.segments_now()) + b"u.")
    return {"events": events, "bytes": path.stat().st_size}


def _open(path: Path) -> None:
    """In this (fresh) process: open the snapshot, print seconds and peak RSS as JSON."""
    sys.path.insert(0, str(ROOT))
    from bwd_widgets.core.memory_snapshot import iter_memory_snapshot

    started = time.perf_counter()
    first = None
    result = None
    for result in iter_memory_snapshot(path, every_s=1.0):
        if first is None:
            first = time.perf_counter() - started
            first_repr = repr(result)
    assert result is not None
    total = time.perf_counter() - started
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(
        json.dumps(
            {
                "first_s": round(first or total, 2),
                "first": first_repr,
                "total_s": round(total, 2),
                "peak_rss": peak_rss,
                "result": repr(result),
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=float, default=2e9, help="snapshot bytes (default 2e9)")
    parser.add_argument("--path", type=Path, default=Path("/tmp/bwd_snapshot_bench.pickle"))
    parser.add_argument("--keep", action="store_true", help="keep the file (and reuse it if it is there)")
    parser.add_argument("--open-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.open_only:
        _open(args.path)
        return
    if not (args.keep and args.path.exists()):
        started = time.perf_counter()
        counts = write_snapshot(args.path, args.size)
        print(
            f"wrote {counts['bytes'] / 1e9:.2f} GB, {counts['events']} events in {time.perf_counter() - started:.0f} s"
        )
    try:
        run = subprocess.run(
            [sys.executable, __file__, "--path", str(args.path), "--open-only"],
            capture_output=True,
            text=True,
            check=True,
        )
        opened = json.loads(run.stdout.strip().splitlines()[-1])
        print(f"file: {args.path.stat().st_size / 1e9:.2f} GB")
        print(f"first partial result: {opened['first_s']} s  ({opened['first']})")
        print(f"whole file: {opened['total_s']} s  ({opened['result']})")
        print(f"peak RSS of the opening process: {opened['peak_rss'] / 2**20:.0f} MiB (goal < 1024)")
    finally:
        if not args.keep:
            os.unlink(args.path)


if __name__ == "__main__":
    main()
