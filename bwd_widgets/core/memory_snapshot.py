"""Read a CUDA memory snapshot (what `torch.cuda.memory._dump_snapshot(path)` writes) without running any of it,
and without holding it whole.

A snapshot is `pickle.dump` of the dict `torch.cuda.memory._snapshot()` returns: "segments" (the allocator's
state when the snapshot was taken, each segment with its blocks) and "device_traces" (per device, every event
the allocator recorded: `alloc`, `free_requested`, `free_completed`, `segment_alloc`, `segment_free`, `oom`,
`snapshot`..., each with addr, size, stream, time_us and the stack it came from, innermost frame first). torch
documents the format in `torch/cuda/memory.py` (`_snapshot`'s docstring) and reads it in
`torch/cuda/_memory_viz.py`; this module reads the same keys.

A snapshot comes from someone else's machine, so it is never given to `pickle`: a small interpreter walks the
pickle's opcodes and builds only the plain types a snapshot holds (dict, list, tuple, str, int, float, bool,
None). Any opcode that names a global, builds an object or calls anything is refused with one sentence before
anything runs. Snapshots of gigabytes (torch's docs: "several KB per entry") stream: each trace event is
reduced, as soon as it is read, to its action, address, size, time and one summary of its stack, and its
frames list is dropped; frame dicts and strings, which pickle shares between events, are kept once.
"""

from __future__ import annotations

import heapq
import os
import re
import struct
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from .errors import SnapshotError
from .units import format_bytes

if TYPE_CHECKING:
    from collections.abc import Iterator

ACTIONS = (
    "alloc",
    "free_requested",
    "free_completed",
    "segment_alloc",
    "segment_free",
    "segment_map",
    "segment_unmap",
    "oom",
    "snapshot",
    "annotate",
)
"""The trace actions torch's allocator records (`TraceEntry.action`, torch/cuda/memory.py); any other action a
newer torch writes is kept as "other"."""
_OTHER = len(ACTIONS)
_ACTION_CODE = {name: code for code, name in enumerate(ACTIONS)}
_ALLOC, _FREE_COMPLETED = _ACTION_CODE["alloc"], _ACTION_CODE["free_completed"]
_SEGMENT_ALLOC, _SEGMENT_FREE = _ACTION_CODE["segment_alloc"], _ACTION_CODE["segment_free"]
_SEGMENT_MAP, _SEGMENT_UNMAP = _ACTION_CODE["segment_map"], _ACTION_CODE["segment_unmap"]

_CHUNK = 1 << 20
_CUT_SHORT = "The snapshot ends in the middle: the file is cut short (copy it again, whole)."
_DROPPED = object()
"""What the memo holds in place of a trace event and its frames list once they are summarised."""


_BATCHES = frozenset((0x75, 0x73, 0x65, 0x61))
_LENGTHS = frozenset((0x8C, 0x58, 0x8D, 0x8B, 0x95))
_CONSTANTS = {0x4E: None, 0x88: True, 0x89: False, 0x29: ()}
_TUPLES = {0x85: 1, 0x86: 2, 0x87: 3}
"""Opcode groups `_rare` dispatches on (pickletools names them: SETITEMS..., strings, constants, TUPLE1-3)."""


class _Refused(Exception):
    """Internal: the opcode at hand is not one a snapshot needs."""


class _SharedEvent(Exception):
    """Internal: a reference to a trace event already summarised (torch writes each event once)."""


@dataclass(frozen=True)
class Allocation:
    """One allocation alive at the peak: its bytes, where in the trace it was made, and the innermost frame of
    the user's own code (not torch's) on its stack."""

    size: int
    event: int
    address: int
    frame: str

    def __repr__(self) -> str:
        return f"Allocation({format_bytes(self.size)} at event {self.event}, {self.frame or 'no user frame'})"


@dataclass
class DeviceTimeline:
    """One device's trace, event by event (action, bytes, time, top user frame), and what it adds up to: the
    bytes allocated (alloc minus free_completed, as torch's memory_viz counts them) and reserved
    (segment_alloc and segment_map minus segment_free and segment_unmap) after each event, with their peaks."""

    device: int
    actions: array[int] = field(repr=False)
    sizes: array[int] = field(repr=False)
    times_us: array[int] = field(repr=False)
    """Each event's time_us less `time_base` (the first event's), so that most traces fit 4 bytes an event."""
    frame_ids: array[int] = field(repr=False)
    frame_names: list[str] = field(repr=False)
    freed_at: array[int] = field(repr=False, default_factory=lambda: array("q"))
    """For each `alloc`, the event that completed its free (the next free_completed of its address; -1 where the
    trace holds none); -1 for other events."""
    time_base: int = 0
    count: int = 0
    """The events read when this was made: a partial result shares its arrays with the reading, which goes on."""
    peak_allocated: int = 0
    peak_allocated_event: int = -1
    peak_reserved: int = 0
    top_at_peak: list[Allocation] = field(default_factory=list)

    def __len__(self) -> int:
        return self.count

    def action(self, event: int) -> str:
        code = self.actions[event]
        return ACTIONS[code] if code < _OTHER else "other"

    def time_us(self, event: int) -> int:
        """The event's time as torch recorded it (microseconds since the epoch)."""
        return self.time_base + self.times_us[event]

    def frame(self, event: int) -> str:
        """`file.py:line:function` of the event's innermost user frame ("" where its stack has none)."""
        return self.frame_names[self.frame_ids[event]]

    def allocated(self) -> array[int]:
        """Bytes allocated after each event (made on demand: 8 bytes an event)."""
        return self._running({_ALLOC: 1, _FREE_COMPLETED: -1})

    def reserved(self) -> array[int]:
        """Bytes reserved (held in segments) after each event."""
        return self._running({_SEGMENT_ALLOC: 1, _SEGMENT_MAP: 1, _SEGMENT_FREE: -1, _SEGMENT_UNMAP: -1})

    def _running(self, signs: dict[int, int]) -> array[int]:
        result, now, sizes = array("q"), 0, self.sizes
        for i in range(self.count):
            sign = signs.get(self.actions[i])
            if sign is not None:
                now += sign * sizes[i]
            result.append(now)
        return result


@dataclass
class MemorySnapshot:
    """What `bw.load_memory_snapshot` read: per device the allocated and reserved bytes over the trace, the
    peaks apart, the allocations alive at the allocated peak (largest first) with their user frame, and the
    allocator's state at the end (the segments' reserved and allocated totals)."""

    path: str
    devices: list[DeviceTimeline]
    segments_reserved: int
    segments_allocated: int
    segment_count: int
    complete: bool = True
    read_bytes: int = 0
    seconds: float = 0.0

    @property
    def peak_allocated(self) -> int:
        return max((d.peak_allocated for d in self.devices), default=0)

    @property
    def peak_reserved(self) -> int:
        return max((d.peak_reserved for d in self.devices), default=0)

    @property
    def top_at_peak(self) -> list[Allocation]:
        best = max(self.devices, key=lambda d: d.peak_allocated, default=None)
        return best.top_at_peak if best else []

    @property
    def events(self) -> int:
        return sum(len(d) for d in self.devices)

    def __repr__(self) -> str:
        state = "" if self.complete else f", partial: {format_bytes(self.read_bytes)} read"
        return (
            f"MemorySnapshot({Path(self.path).name}: {self.events} events on {len(self.devices)} device(s), "
            f"peak allocated {format_bytes(self.peak_allocated)}, peak reserved {format_bytes(self.peak_reserved)}, "
            f"{self.segment_count} segments holding {format_bytes(self.segments_reserved)} at the end{state})"
        )


def load_memory_snapshot(path: str | Path, top: int = 10) -> MemorySnapshot:
    """Read a snapshot file whole (streamed: memory stays near what the result holds) and summarise it."""
    (whole,) = iter_memory_snapshot(path, top=top, every_s=None)  # no partial results: only the whole
    return whole


def iter_memory_snapshot(path: str | Path, top: int = 10, every_s: float | None = 2.0) -> Iterator[MemorySnapshot]:
    """Partial summaries while reading (one every `every_s` seconds, marked `complete=False`), then the whole;
    so a view can draw the first part of a large snapshot before the rest is read."""
    path = Path(path)
    if not path.is_file():
        raise SnapshotError(f"{path} is not a file: give the path `torch.cuda.memory._dump_snapshot` wrote.")
    started = time.perf_counter()
    with path.open("rb") as stream:
        reader = _SnapshotReader(stream, top)
        last = started
        while not reader.step():
            now = time.perf_counter()
            if every_s is not None and now - last >= every_s:
                last = now
                yield reader.summary(str(path), top, complete=False, seconds=now - started)
        yield reader.summary(str(path), top, complete=True, seconds=time.perf_counter() - started)


def top_user_frame(frames: list[Any]) -> str:
    """`file.py:line:function` of the innermost frame outside torch (frames come innermost first, as torch
    records them), or "" where the stack has none (C++ only, or torch's own Python). A frame the profiler's
    snapshot wrote (`_memory_viz._profile_to_snapshot`: filename "none", name "path.py(line): function") is
    read the same way."""
    for frame in frames:
        if type(frame) is not dict:
            continue
        filename, line, name = frame.get("filename"), frame.get("line"), frame.get("name")
        if filename == "none" and type(name) is str:
            found = _PROFILER_FRAME.match(name)
            if found is None:
                continue
            filename, line, name = found.groups()
        if type(filename) is str and filename.endswith(".py") and "torch/" not in filename:
            return f"{filename.rsplit('/', 1)[-1]}:{line}:{name}"
    return ""


_PROFILER_FRAME = re.compile(r"(.+\.py)\((\d+)\): (.+)")


class _FrameRef:
    """A frames list once read: the index of its top user frame in the reader's strings. One per distinct
    frame, shared by every event whose stack has it (so a million events cost no more than their memo slots)."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


class _Trace:
    """One device's events as compact arrays (19 bytes an event, while sizes stay under 4 GiB, the trace under
    71 minutes and distinct user frames under 65536), and the running sums over them,
    advanced as events arrive: addresses are kept only until the running sums have seen them."""

    def __init__(self) -> None:
        self.actions = array("b")
        self.sizes = array("I")  # each column widens to 8 bytes the first time a value needs it
        self.times = array("I")
        self.time_base: int | None = None
        self.frames = array("H")
        self.addresses = array("Q")
        self.freed_at = array("q")
        self.seen = 0
        self.allocated = self.reserved = 0
        self.peak_allocated = self.peak_reserved = 0
        self.peak_event = -1
        self.live: dict[int, tuple[int, int, int, int]] = {}
        self.at_peak: list[tuple[int, int, int, int]] = []
        self.capture = False

    def advance(self, top: int) -> None:
        """Add the events not yet seen to the running sums; the largest allocations alive at the allocated
        peak are taken when the peak is left (at the first free after it), or at the end."""
        actions, sizes, addresses, live, freed_at = self.actions, self.sizes, self.addresses, self.live, self.freed_at
        for i in range(self.seen, len(actions)):
            code = actions[i]
            freed_at.append(-1)
            if code == _ALLOC:
                size = sizes[i]
                address = addresses[i - self.seen]
                live[address] = (size, -i, self.frames[i], address)
                self.allocated += size
                if self.allocated > self.peak_allocated:
                    self.peak_allocated, self.peak_event, self.capture = self.allocated, i, True
            elif code == _FREE_COMPLETED:
                if self.capture:
                    self.take_peak(top)
                self.allocated -= sizes[i]
                freed = live.pop(addresses[i - self.seen], None)
                if freed is not None:
                    freed_at[-freed[1]] = i
            elif code == _SEGMENT_ALLOC or code == _SEGMENT_MAP:
                self.reserved += sizes[i]
                self.peak_reserved = max(self.peak_reserved, self.reserved)
            elif code == _SEGMENT_FREE or code == _SEGMENT_UNMAP:
                self.reserved -= sizes[i]
        self.seen = len(actions)
        del addresses[:]

    def take_peak(self, top: int) -> None:
        self.at_peak = heapq.nlargest(top, self.live.values())
        self.capture = False

    def timeline(self, device: int, top: int, names: list[str]) -> DeviceTimeline:
        at_peak = heapq.nlargest(top, self.live.values()) if self.capture else self.at_peak
        return DeviceTimeline(
            device=device,
            actions=self.actions,
            sizes=self.sizes,
            times_us=self.times,
            time_base=self.time_base or 0,
            frame_ids=self.frames,
            frame_names=names,
            freed_at=self.freed_at,
            count=self.seen,
            peak_allocated=self.peak_allocated,
            peak_allocated_event=self.peak_event,
            peak_reserved=self.peak_reserved,
            top_at_peak=[Allocation(size, -event, address, names[frame]) for size, event, frame, address in at_peak],
        )


_U32 = struct.Struct("<I").unpack_from
_I32 = struct.Struct("<i").unpack_from
_U16 = struct.Struct("<H").unpack_from
_F64 = struct.Struct(">d").unpack_from
_CONTAINERS = (list, dict)
_ARGUMENT = {0x68: 1, 0x6A: 4, 0x71: 1, 0x72: 4, 0x4B: 1, 0x4D: 2, 0x4A: 4, 0x8A: 1, 0x47: 8, 0x80: 1}
"""The fixed-size argument after each opcode that has one and is read in place (the rest read through `_take`,
which checks the file's length)."""
_GET_RUN = re.compile(rb"(?:h.|j....)+", re.S)


class _SnapshotReader:
    """A pickle interpreter for plain data, with two snapshot-specific turns: an event dict appended to a
    device trace becomes one row of `_Trace` (and leaves the memo), and a frames list made of memo references
    is read in one regex match and stands as the `_FrameRef` of its top user frame."""

    def __init__(self, stream: BinaryIO, top: int) -> None:
        self.stream = stream
        self.size = os.fstat(stream.fileno()).st_size
        self.top_count = top
        self.buffer = b""
        self.pos = 0
        self.consumed = 0
        self.at_end = False
        self.done = False
        self.stack: list[Any] = []
        self.marks: list[int] = []
        self.memo: list[Any] = []
        self.slots: dict[int, int] = {}
        self.traces: list[_Trace] = []
        self.provisional: list[_Trace] = []
        self.trace_lists: dict[int, _Trace] = {}
        self.in_traces = False
        self.frame_strings: list[str] = []
        self.frame_index: dict[str, int] = {}
        self.run_cache: dict[bytes, _FrameRef] = {}
        self.refs: list[_FrameRef] = []
        self.top: dict[str, Any] | None = None
        self.segments: list[dict[str, Any]] = []

    # -- reading bytes ---------------------------------------------------------------------------------------

    def _fill(self, need: int) -> None:
        if self.consumed + self.pos + need > self.size:  # a length past the file's end: never read it
            raise SnapshotError(_CUT_SHORT)
        while len(self.buffer) - self.pos < need:
            more = self.stream.read(max(_CHUNK, need))
            if not more:
                raise SnapshotError(_CUT_SHORT)
            self.consumed += self.pos
            self.buffer = self.buffer[self.pos :] + more
            self.pos = 0

    def _take(self, n: int) -> bytes:
        if len(self.buffer) - self.pos < n:
            self._fill(n)
        start = self.pos
        self.pos = start + n
        return self.buffer[start : self.pos]

    # -- the interpreter -------------------------------------------------------------------------------------

    def step(self, budget: int = 200_000) -> bool:
        """Run up to `budget` opcodes; True once the pickle's STOP was read."""
        try:
            self._run(budget)
            for trace in self.provisional:
                trace.advance(self.top_count)
        except _Refused as refused:
            raise SnapshotError(
                f"This file is not a plain memory snapshot: it holds {refused} at byte {self.consumed + self.pos},"
                " which could run code when unpickled; nothing in it was run."
            ) from None
        except _SharedEvent:
            raise SnapshotError(
                f"This snapshot uses one trace event twice (at byte {self.consumed + self.pos}), which torch's "
                "snapshots never do, so it is not read: give the file `torch.cuda.memory._dump_snapshot` wrote."
            ) from None
        except (IndexError, KeyError, TypeError, struct.error, UnicodeDecodeError, AttributeError) as broken:
            raise SnapshotError(
                f"This file is not a pickle torch wrote ({type(broken).__name__} at byte "
                f"{self.consumed + self.pos}): give the path `torch.cuda.memory._dump_snapshot` wrote."
            ) from None
        return self.done

    def _refill(self) -> None:
        """Read on so that the next opcode and its fixed-size argument are in the buffer (short only at the end)."""
        more = self.stream.read(_CHUNK)
        if more:
            self.consumed += self.pos
            self.buffer = self.buffer[self.pos :] + more
            self.pos = 0
        elif self.pos >= len(self.buffer):
            raise SnapshotError(_CUT_SHORT)
        else:
            self.at_end = True

    def _run(self, budget: int) -> None:
        """The loop over opcodes: the ones a snapshot is made of (memo references, small ints, strings, dicts
        and lists filled in batches) inline, the rest in `_rare`; any other opcode refuses the file."""
        stack, memo = self.stack, self.memo
        buf, pos = self.buffer, self.pos
        end = len(buf) - 16
        for _ in range(budget):
            if pos >= end:
                self._at_buffer_end(pos)
                buf, pos = self.buffer, self.pos
                end = len(buf) - 16
            op = buf[pos]
            pos += 1
            if op == 0x68:  # h BINGET
                value = memo[buf[pos]]
                if value is _DROPPED:
                    raise _SharedEvent
                stack.append(value)
                pos += 1
            elif op == 0x6A:  # j LONG_BINGET
                value = memo[_U32(buf, pos)[0]]
                if value is _DROPPED:
                    raise _SharedEvent
                stack.append(value)
                pos += 4
            elif op == 0x94:  # MEMOIZE
                index = len(memo)
                memo.append(stack[-1])
                if type(stack[-1]) in _CONTAINERS:
                    self.slots[id(stack[-1])] = index
            elif op == 0x71:  # q BINPUT
                self._put(buf[pos])
                pos += 1
            elif op == 0x4B:  # K BININT1
                stack.append(buf[pos])
                pos += 1
            elif op == 0x4A:  # J BININT
                stack.append(_I32(buf, pos)[0])
                pos += 4
            elif op == 0x7D:  # } EMPTY_DICT
                stack.append({})
            elif op == 0x5D:  # ] EMPTY_LIST
                stack.append([])
            else:
                self.pos = pos
                if self._rare(op):
                    return
                buf, pos = self.buffer, self.pos
                end = len(buf) - 16
        self.pos = pos

    def _at_buffer_end(self, pos: int) -> None:
        """Near the buffer's end: read on, and refuse a last opcode whose argument runs past the file's end."""
        self.pos = pos
        if not self.at_end:
            self._refill()
        buf, pos = self.buffer, self.pos
        if self.at_end and (pos >= len(buf) or pos + 1 + _ARGUMENT.get(buf[pos], 0) > len(buf)):
            raise SnapshotError(_CUT_SHORT)

    def _rare(self, op: int) -> bool:  # noqa: C901, PLR0912 (one dispatch over the opcodes left)
        """Every other opcode a plain pickle holds, its argument read from `self.pos` on; True at STOP."""
        stack, marks, buf, pos = self.stack, self.marks, self.buffer, self.pos
        if op in _BATCHES:
            self._batch(op)
        elif op == 0x28:  # ( MARK
            marks.append(len(stack))
            if len(stack) >= 2 and stack[-2] == "frames" and type(stack[-2]) is str:
                self._frames_run()
        elif op in _LENGTHS:
            self._with_length(op)
        elif op == 0x72:  # r LONG_BINPUT
            self._put(_U32(buf, pos)[0])
            self.pos = pos + 4
        elif op == 0x4D:  # M BININT2
            stack.append(_U16(buf, pos)[0])
            self.pos = pos + 2
        elif op == 0x8A:  # LONG1
            self.pos = pos + 1
            stack.append(int.from_bytes(self._take(buf[pos]), "little", signed=True))
        elif op == 0x47:  # G BINFLOAT
            stack.append(_F64(buf, pos)[0])
            self.pos = pos + 8
        elif op in _CONSTANTS:
            stack.append(_CONSTANTS[op])
        elif op in _TUPLES:
            count = _TUPLES[op]
            stack[-count:] = [tuple(stack[-count:])]
        elif op in (0x74, 0x6C, 0x64):  # t TUPLE, l LIST, d DICT
            start = marks.pop()
            items = stack[start:]
            del stack[start:]
            made = {items[i]: items[i + 1] for i in range(0, len(items), 2)} if op == 0x64 else items
            stack.append(tuple(made) if op == 0x74 else made)
        elif op in (0x30, 0x31, 0x32):  # 0 POP, 1 POP_MARK, 2 DUP
            self._stack_op(op)
        elif op == 0x80:  # PROTO
            if buf[pos] > 5:
                raise _Refused("a pickle protocol newer than 5")
            self.pos = pos + 1
        elif op == 0x2E:  # . STOP
            self._finish(stack.pop())
            return True
        else:
            self.pos = pos - 1
            raise _Refused(_describe(op))
        return False

    def _batch(self, op: int) -> None:
        """SETITEMS, SETITEM, APPENDS, APPEND: into the dict or list below."""
        stack = self.stack
        if op in (0x75, 0x65):  # u SETITEMS, e APPENDS
            start = self.marks.pop()
            items = stack[start:]
            del stack[start:]
        else:  # s SETITEM, a APPEND
            items = stack[-2:] if op == 0x73 else stack[-1:]
            del stack[-len(items) :]
        target = stack[-1]
        if op in (0x65, 0x61):
            self._append(target, items)
            return
        for i in range(0, len(items), 2):
            target[items[i]] = items[i + 1]
        if "device_traces" in target or "segments" in target:
            self.top = target

    def _with_length(self, op: int) -> None:
        """Strings (SHORT_BINUNICODE, BINUNICODE, BINUNICODE8), LONG4 and FRAME: a length, then its bytes."""
        width = 1 if op == 0x8C else 8 if op in (0x8D, 0x95) else 4
        n = int.from_bytes(self._take(width), "little", signed=op == 0x8B)
        if op == 0x8B:
            self.stack.append(int.from_bytes(self._take(n), "little", signed=True))
        elif op != 0x95:  # FRAME's length is only a hint
            self.stack.append(str(self._take(n), "utf-8", "surrogatepass"))

    def _stack_op(self, op: int) -> None:
        stack, marks = self.stack, self.marks
        if op == 0x32:  # DUP
            stack.append(stack[-1])
        elif op == 0x31:  # POP_MARK
            del stack[marks.pop() :]
        elif marks and marks[-1] == len(stack):  # POP of a mark
            marks.pop()
        else:
            stack.pop()

    def _put(self, index: int) -> None:
        memo = self.memo
        if index > len(memo) + 4096:  # pickle numbers its memo in order; a far index would only cost memory
            raise KeyError(index)
        if index >= len(memo):
            memo.extend([None] * (index + 1 - len(memo)))
        value = self.stack[-1]
        memo[index] = value
        if type(value) in _CONTAINERS:
            self.slots[id(value)] = index

    def _frames_run(self) -> bool:
        """At a MARK under the key "frames": a list whose items are all memo references (the frame dicts pickle
        already wrote) is read in one regex match, and it stands, on the stack and in the memo, as the one
        `_FrameRef` of its top user frame (a stack seen before costs one dict lookup)."""
        stack, buffer = self.stack, self.buffer
        listed = stack[-1]
        if type(listed) is list:
            if listed:
                return False
        elif type(listed) is not _FrameRef:
            return False
        if len(buffer) - self.pos < 65536 and not self.at_end:
            self._refill()
            buffer = self.buffer
        found = _GET_RUN.match(buffer, self.pos)
        if found is None or buffer[found.end() : found.end() + 1] != b"e":
            return False
        ref = self._ref(found.group())
        if type(listed) is list:
            self._replace(listed, ref)
            stack[-1] = ref
        elif not self.frame_strings[listed.index]:  # a stack of more than 1000 frames, read on
            stack[-1] = ref
        self.pos = found.end() + 1
        self.marks.pop()
        return True

    def _ref(self, run: bytes) -> _FrameRef:
        known = self.run_cache.get(run)
        if known is None:
            known = self.refs[self._intern(top_user_frame(self._resolve(run)))]
            if len(self.run_cache) < 1_000_000:
                self.run_cache[run] = known
        return known

    def _replace(self, value: object, by: object) -> None:
        """The memo slot that held `value` holds `by` from now on (a later reference to it gets `by`)."""
        index = self.slots.pop(id(value), None)
        if index is not None:
            self.memo[index] = by

    def _append(self, target: Any, items: list[Any]) -> None:
        trace = self.trace_lists.get(id(target))
        if trace is None and items and isinstance(items[0], dict) and "action" in items[0]:
            trace = self.trace_lists[id(target)] = _Trace()
            self.provisional.append(trace)
        if trace is not None:
            for item in items:
                self._event(trace, item)
            return
        if not isinstance(target, list):
            raise _Refused("an append to something that is not a list")
        if items and isinstance(items[0], list) and self._key_of(target) == "device_traces":
            for events in items:
                known = self.trace_lists.get(id(events))
                self.traces.append(known if known is not None else _Trace())
            return
        if items and isinstance(items[0], dict) and "blocks" in items[0]:
            for segment in items:
                self._segment(segment)
        target.extend(items)

    def _key_of(self, target: list[Any]) -> object:
        """The dict key a value under construction will be stored at: the item below it on the stack."""
        stack = self.stack
        for i in range(len(stack) - 1, 0, -1):
            if stack[i] is target:
                return stack[i - 1]
        return None

    def _event(self, trace: _Trace, event: Any) -> None:
        """One row of the device's trace; the event dict leaves the memo, its frames list stays as a ref."""
        if type(event) is not dict:
            return
        get = event.get
        action = get("action")
        trace.actions.append(_ACTION_CODE.get(action, _OTHER) if type(action) is str else _OTHER)
        size, time_us, address, frames = get("size"), get("time_us"), get("addr"), get("frames")
        size = size if type(size) is int else 0
        try:
            trace.sizes.append(size)
        except OverflowError:
            trace.sizes = _widened(trace.sizes, size)
        if type(time_us) is int:
            if trace.time_base is None:
                trace.time_base = time_us
            time_us -= trace.time_base
        else:
            time_us = 0
        try:
            trace.times.append(time_us)
        except OverflowError:
            trace.times = _widened(trace.times, time_us)
        trace.addresses.append(address if type(address) is int and 0 <= address < (1 << 64) else 0)
        frame = frames.index if type(frames) is _FrameRef else self._frames_ref(frames).index
        try:
            trace.frames.append(frame)
        except OverflowError:
            trace.frames = _widened(trace.frames, frame)
        index = self.slots.pop(id(event), None)
        if index is not None:
            self.memo[index] = _DROPPED

    def _frames_ref(self, frames: Any) -> _FrameRef:
        """The ref of a frames list read item by item (its frames written inline, for the first time)."""
        if type(frames) is _FrameRef:
            return frames
        ref = self.refs[self._intern(top_user_frame(frames) if type(frames) is list else "")]
        if type(frames) is list:
            self._replace(frames, ref)
        return ref

    def _resolve(self, run: bytes) -> list[Any]:
        items, i, memo = [], 0, self.memo
        while i < len(run):
            if run[i] == 0x68:
                items.append(memo[run[i + 1]])
                i += 2
            else:
                items.append(memo[int.from_bytes(run[i + 1 : i + 5], "little")])
                i += 5
        return items

    def _intern(self, text: str) -> int:
        index = self.frame_index.get(text)
        if index is None:
            index = self.frame_index[text] = len(self.frame_strings)
            self.frame_strings.append(text)
            self.refs.append(_FrameRef(index))
        return index

    def _segment(self, segment: dict[str, Any]) -> None:
        for block in segment.get("blocks", ()):
            if type(block) is dict and type(block.get("frames")) in (list, _FrameRef):
                block["frames"] = self.frame_strings[self._frames_ref(block["frames"]).index]
        self.segments.append(segment)

    def _finish(self, value: Any) -> None:
        if not isinstance(value, dict) or not ("device_traces" in value or "segments" in value):
            raise SnapshotError(
                "This pickle is not a memory snapshot (no 'segments' or 'device_traces'): give the path "
                "`torch.cuda.memory._dump_snapshot` wrote."
            )
        self.top = value
        self.done = True

    # -- the summary -----------------------------------------------------------------------------------------

    def summary(self, path: str, top: int, complete: bool, seconds: float) -> MemorySnapshot:
        traces = self.traces or self.provisional
        for trace in traces:
            trace.advance(top)
        devices = [trace.timeline(i, top, self.frame_strings) for i, trace in enumerate(traces)]
        segments = self.segments if self.segments else list((self.top or {}).get("segments", []) or [])
        reserved = sum(_int(s.get("total_size")) for s in segments if isinstance(s, dict))
        allocated = sum(_int(s.get("allocated_size", _active(s))) for s in segments if isinstance(s, dict))
        return MemorySnapshot(
            path=path,
            devices=devices,
            segments_reserved=reserved,
            segments_allocated=allocated,
            segment_count=len(segments),
            complete=complete,
            read_bytes=self.consumed + self.pos,
            seconds=seconds,
        )


def _widened(column: array[int], value: int) -> array[int]:
    """`column` as 8-byte signed integers, with `value` appended (0 where even that cannot hold it)."""
    wide = array("q", column)
    wide.append(value if -(1 << 63) <= value < (1 << 63) else 0)
    return wide


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _active(segment: dict[str, Any]) -> int:
    """A segment's allocated bytes where an older torch did not write "allocated_size": its active blocks'."""
    blocks = segment.get("blocks", ())
    return sum(_int(b.get("size")) for b in blocks if isinstance(b, dict) and b.get("state") == "active_allocated")


_REFUSED = {
    0x63: "a global (GLOBAL)",
    0x93: "a global (STACK_GLOBAL)",
    0x52: "a call (REDUCE)",
    0x62: "an object's state (BUILD)",
    0x69: "an object (INST)",
    0x6F: "an object (OBJ)",
    0x81: "an object (NEWOBJ)",
    0x92: "an object (NEWOBJ_EX)",
    0x50: "a persistent id (PERSID)",
    0x51: "a persistent id (BINPERSID)",
    0x82: "an extension code (EXT1)",
    0x83: "an extension code (EXT2)",
    0x84: "an extension code (EXT4)",
}


def _describe(op: int) -> str:
    return _REFUSED.get(op, f"the opcode {bytes([op])!r}, which no snapshot holds")
