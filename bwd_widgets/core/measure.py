"""Measured activation memory: a partition's real forward and backward, run op by op, live storages counted.

The memory pane's timeline is a prediction (`core/memory.py`, a liveness walk over fake tensors). This
runs the same graphs on the real values the extraction recorded, the way AOT Autograd's generated code
runs them: each value dropped after its last use (`x = None`), the argument list handed over (boxed), the
saved values carried from forward to backward, gradients alive to the end of backward. It counts what
the prediction counts: the storages the graphs allocate, each once, never the forward inputs or the
tangents. Storages are watched through `weakref.finalize` on their real `untyped_storage()`, so views,
aliases and frees are torch's and Python's own, not re-derived: one point per op, aligned with
`memory.timeline()`. On CUDA the allocator's own peak (`torch.cuda.max_memory_allocated`) and its
memory snapshot are taken as well.
"""

from __future__ import annotations

import contextlib
import pickle
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from . import memory
from .analysis import backward_inputs
from .compat import _record_memory_history, _snapshot, pytree
from .errors import MeasureNeedsRealModeError
from .kinds import is_tangent

if TYPE_CHECKING:
    from .trace import Partition


@dataclass(frozen=True)
class MeasuredMemory:
    """What `measure` saw: live activation bytes after each op, against the prediction."""

    curve: list[dict]
    """`{"phase", "node", "graph", "live_bytes"}` after each op, the same steps as `memory.timeline()`."""
    predicted: list[int]
    """The prediction's live bytes at the same steps."""
    device: str
    events: list[dict] = field(repr=False)
    """Each storage's `alloc` and `free` as the run made them: `{"action", "addr", "size", "step"}`."""
    allocator_peak_bytes: int | None = None
    """CUDA only: `torch.cuda.max_memory_allocated()` above what was allocated before the run."""
    cuda_snapshot: dict | None = field(default=None, repr=False)
    """CUDA only: `torch.cuda.memory._snapshot()` of the run."""
    gradient_bytes: list[int] = field(default_factory=list, repr=False)
    """Live bytes, at each step of `curve`, of the parameters' gradients the backward returned."""
    predicted_blocks: list[int] | None = field(default=None, repr=False)
    """CUDA only: the prediction at the same steps with each storage counted as the caching allocator books it
    (`memory.allocator_block`, whole 512-byte blocks), which is what `allocator_peak_bytes` counts."""
    reserved_peak_bytes: int | None = None
    """The most the allocator's segments held during the run, apart from the peak allocated: from a memory
    snapshot that records segment events (`core/snapshot_match.py`); None where nothing says."""

    @property
    def peak_bytes(self) -> int:
        """The measured peak: the allocator's on CUDA (temporaries inside an op included), else the curve's."""
        if self.allocator_peak_bytes is not None:
            return self.allocator_peak_bytes
        return max((p["live_bytes"] for p in self.curve), default=0)

    @property
    def activation_peak_bytes(self) -> int:
        """The curve's peak less the parameters' gradients' storages at each step: what
        `BackwardExtraction.peak_activation_only_bytes` predicts (from the curve, on CUDA too)."""
        gradients = self.gradient_bytes or [0] * len(self.curve)
        return max((p["live_bytes"] - g for p, g in zip(self.curve, gradients)), default=0)

    @property
    def peak_step(self) -> int:
        """The first step of the curve at its highest (-1 for an empty run)."""
        live = [p["live_bytes"] for p in self.curve]
        return live.index(max(live)) if live else -1

    @property
    def predicted_peak_bytes(self) -> int:
        """The prediction's peak, counted as `peak_bytes` is: in the allocator's blocks where the measured peak is
        the CUDA allocator's, else in storage bytes."""
        if self.allocator_peak_bytes is not None and self.predicted_blocks:
            return max(self.predicted_blocks)
        return max(self.predicted, default=0)

    @property
    def error_percent(self) -> float:
        """How far the prediction's peak is from the measured one, in percent of the measured peak."""
        measured = self.peak_bytes
        if not measured:
            return 0.0 if not self.predicted_peak_bytes else 100.0
        return 100.0 * (self.predicted_peak_bytes - measured) / measured

    def snapshot(self) -> dict:
        """The run as a `torch.cuda.memory._snapshot()` dict, which pytorch.org/memory_viz draws."""
        return self.cuda_snapshot if self.cuda_snapshot is not None else memory_viz_snapshot(self.events, self.curve)

    def to_memory_viz(self, path: str | Path) -> Path:
        """Write `snapshot()` pickled: drop the file on pytorch.org/memory_viz ("Active Memory Timeline")."""
        path = Path(path)
        with path.open("wb") as f:
            pickle.dump(self.snapshot(), f)
        return path


class _Storages:
    """Live storages the run allocated: each counted once, from the first tensor holding it until the
    last one goes (a finalizer on the storage). Storages of `external` tensors never count."""

    def __init__(self, external: list[Any]):
        self.external = [t.untyped_storage() for t in external if isinstance(t, torch.Tensor)]
        self.excluded = {id(s) for s in self.external}
        self.live: dict[int, int] = {}
        self.born: dict[int, int] = {}
        self.bytes = 0
        self.step = 0
        self.events: list[dict] = []
        self.finalizers: list[weakref.finalize] = []

    def hold(self, value: object) -> None:
        for leaf in pytree.tree_leaves(value):
            if not isinstance(leaf, torch.Tensor):
                continue
            try:
                storage = leaf.untyped_storage()
            except RuntimeError:  # a tensor without storage (sparse, nested): nothing to watch
                continue
            key = id(storage)
            if key in self.excluded or key in self.live:
                continue
            self.live[key] = nbytes = int(storage.nbytes())
            self.born[key] = self.step
            self.bytes += nbytes
            address = int(storage.data_ptr())
            self.events.append({"action": "alloc", "addr": address, "size": nbytes, "step": self.step})
            finalizer = weakref.finalize(storage, self._free, key, address)
            finalizer.atexit = False
            self.finalizers.append(finalizer)

    def _free(self, key: int, address: int) -> None:
        nbytes = self.live.pop(key)
        self.bytes -= nbytes
        self.events.append({"action": "free", "addr": address, "size": nbytes, "step": self.step})

    def close(self) -> None:
        """Stop watching: storages that outlive the run must not call back into it."""
        for finalizer in self.finalizers:
            finalizer.detach()


class _Run(torch.fx.Interpreter):
    """Runs a graph node by node, recording live bytes after each op (before the values it used last
    are dropped, as the prediction counts them). Inputs are popped from the list it is given, so a
    value the caller handed over dies at its last use, as with AOT Autograd's boxed calls."""

    def __init__(self, gm: torch.fx.GraphModule, tracker: _Storages, curve: list[dict], phase: str, graph: int):
        super().__init__(gm)
        self.extra_traceback = False
        self.tracker, self.curve, self.phase, self.graph_index = tracker, curve, phase, graph
        self.inputs: list = []

    def run_list(self, inputs: list) -> Any:
        self.inputs = inputs
        return self.run()

    def run_node(self, n: torch.fx.Node) -> Any:
        if n.op == "placeholder":
            value = self.inputs.pop(0)
            return value if n.users else None
        value = super().run_node(n)
        if n.op != "call_function":
            return value
        self.tracker.hold(value)
        self.curve.append(
            {"phase": self.phase, "node": n.name, "graph": self.graph_index, "live_bytes": self.tracker.bytes}
        )
        self.tracker.step = len(self.curve)
        return value if n.users else None  # generated code drops an unused result at once


def _check_real(partitions: list[Partition]) -> None:
    for p in partitions:
        if p.trace.real is None:
            raise MeasureNeedsRealModeError(
                "measure() runs the real forward and backward, so it needs a real-mode extraction "
                "(bw.extract(model, inputs), not mode='fake')."
            )


def _tangents(partition: Partition) -> dict[str, Any]:
    """The real tangents, or zeros of their shape when the real backward did not run (memory is the same)."""
    given = partition.trace.tangent_values
    tangents: dict[str, Any] = {}
    for node in partition.backward.graph.find_nodes(op="placeholder"):
        if is_tangent(node.name):
            if given is not None and node.name in given:
                tangents[node.name] = given[node.name]
            else:
                val = node.meta.get("val")
                tangents[node.name] = (
                    torch.zeros(val.shape, dtype=val.dtype, device=val.device) if isinstance(val, torch.Tensor) else val
                )
    return tangents


def _forward(partition: Partition, index: int, tracker: _Storages, curve: list[dict], tangents: dict) -> list:
    """Run the forward graph; return the backward graph's inputs (saved values and tangents), in order.
    The rest of what forward returns (the user's outputs) is dropped."""
    rng = partition.trace.rng_state
    if rng is not None:
        torch.set_rng_state(rng)
    outputs = _Run(partition.forward, tracker, curve, memory.FORWARD, index).run_list(
        list(partition.forward_inputs or [])
    )
    return _backward_inputs(partition, outputs, tangents)


def _backward_inputs(partition: Partition, outputs: Any, tangents: dict) -> list:
    """The backward graph's inputs, in order: the forward's saved outputs, then the tangents."""
    return backward_inputs(partition.forward, partition.backward, outputs, tangents)


def time_step(partitions: list[Partition], min_run_time: float = 0.3) -> float:
    """Median seconds of one forward and backward of the partitions' real graphs as generated code runs them
    (no tracker), by `torch.utils.benchmark` at torch's own thread count: what a plan's recompute costs here."""
    from torch.utils import benchmark

    _check_real(partitions)
    tangents = [_tangents(p) for p in partitions]

    def step() -> None:
        carried = [_backward_inputs(p, p.forward(*(p.forward_inputs or [])), t) for p, t in zip(partitions, tangents)]
        for partition in reversed(partitions):
            partition.backward(*carried.pop())

    grad_mode = torch.is_grad_enabled()
    # The generator is put back afterwards only from the main thread: from another (the widget's advisor), the
    # put-back would rewind the draws the user's cells made meanwhile; there the timed graphs only advance it.
    keep_rng = torch.random.fork_rng(devices=[]) if threading.current_thread() is threading.main_thread() else None
    try:
        with torch.no_grad(), keep_rng or contextlib.nullcontext():
            timer = benchmark.Timer("step()", globals={"step": step}, num_threads=torch.get_num_threads())
            return float(timer.blocked_autorange(min_run_time=min_run_time).median)
    finally:
        torch.set_grad_enabled(grad_mode)  # as in measure(): Ctrl-C may land inside no_grad().__enter__


def _run_all(partitions: list[Partition], tracker: _Storages, tangents: list[dict]) -> tuple[list[dict], list[int]]:
    """Forwards in order, then backwards in reverse, as AOT Autograd runs several compiled regions; with
    the curve, the live bytes of the parameters' gradients each backward returned (allocation to its end)."""
    curve: list[dict] = []
    carried = [_forward(p, i, tracker, curve, tangents[i]) for i, p in enumerate(partitions)]
    spans: list[tuple[int, int, int]] = []
    for index in range(len(partitions) - 1, -1, -1):
        inputs = carried.pop()
        backward = partitions[index].backward
        returned = _Run(backward, tracker, curve, memory.BACKWARD, index).run_list(inputs)
        spans += _parameter_gradient_spans(partitions[index], returned, tracker, len(curve) - 1)
        del returned  # dropped here: the prediction counts them to the end of their own backward
    return curve, bytes_alive(spans, len(curve))


def bytes_alive(spans: list[tuple[int, int, int]], steps: int) -> list[int]:
    """Bytes alive at each of `steps` steps, from (first step, last step, bytes) spans, both steps included."""
    delta = [0] * (steps + 1)
    for first, last, nbytes in spans:
        delta[first] += nbytes
        delta[last + 1] -= nbytes
    live, total = [], 0
    for d in delta[:steps]:
        total += d
        live.append(total)
    return live


def _parameter_gradient_spans(
    partition: Partition, returned: list, tracker: _Storages, last: int
) -> list[tuple[int, int, int]]:
    """(first step, last step, bytes) of each parameter's gradient storage this backward returned; a function
    of its own so that no local keeps a gradient alive into the next region's backward."""
    nodes = partition.backward.graph.output_node().args[0]
    by_name = dict(zip((getattr(n, "name", None) for n in nodes), returned))  # type: ignore[union-attr]
    spans, seen = [], set()
    for gradient in partition.gradients:
        value = by_name.get(gradient.name) if gradient.kind == "parameter" else None
        key = id(value.untyped_storage()) if isinstance(value, torch.Tensor) else None
        if key is not None and key in tracker.live and key not in seen:
            seen.add(key)
            spans.append((tracker.born[key], last, tracker.live[key]))
    return spans


def _cuda_device(partitions: list[Partition]) -> torch.device | None:
    for p in partitions:
        for value in p.forward_inputs or []:
            if isinstance(value, torch.Tensor) and value.device.type == "cuda":
                return value.device
    return None


def measure(partitions: list[Partition]) -> MeasuredMemory:
    """Run the partitions' real forward and backward graphs and measure live activation memory per op."""
    _check_real(partitions)
    tangents = [_tangents(p) for p in partitions]
    external = [v for p in partitions for v in (p.forward_inputs or [])] + [v for t in tangents for v in t.values()]
    tracker = _Storages(external)
    cuda = _cuda_device(partitions)
    base = _cuda_start(cuda)
    grad_mode = torch.is_grad_enabled()
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            curve, gradient_bytes = _run_all(partitions, tracker, tangents)
        allocator_peak, snapshot = _cuda_end(cuda, base)
    finally:
        # Ctrl-C stays live during a long run; one landing inside no_grad().__enter__ skips its __exit__
        torch.set_grad_enabled(grad_mode)
        tracker.close()
        if cuda is not None:
            _record_memory_history(enabled=None)  # stopped on failure too
    predicted = [s["live_bytes"] for s in memory.timeline(partitions)]
    blocks = None if cuda is None else [s["live_bytes"] for s in memory.timeline(partitions, memory.allocator_block)]
    device = str(cuda) if cuda is not None else "cpu"
    return MeasuredMemory(
        curve,
        predicted,
        device,
        list(tracker.events),
        allocator_peak,
        snapshot,
        gradient_bytes=gradient_bytes,
        predicted_blocks=blocks,
    )


def _cuda_start(device: torch.device | None) -> int:
    """Reset the allocator's peak and start recording its history; return the bytes allocated before."""
    if device is None:
        return 0
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    _record_memory_history(max_entries=1_000_000)
    return torch.cuda.memory_allocated(device)


def _cuda_end(device: torch.device | None, base: int) -> tuple[int | None, dict | None]:
    if device is None:
        return None, None
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - base
    return peak, _snapshot()


def _frame(step: int, curve: list[dict], freed: bool) -> dict:
    """A stack frame naming the op: the one that allocated, or the one after which the storage was freed."""
    index = step - 1 if freed else step
    point = curve[index] if 0 <= index < len(curve) else {"phase": "", "node": "", "graph": 0}
    what = f"freed after {point['node']}" if freed else point["node"]
    return {"filename": f"graph {point['graph']} {point['phase']}", "line": index + 1, "name": what}


def memory_viz_snapshot(events: list[dict], curve: list[dict]) -> dict:
    """Storage events as the snapshot dict `torch.cuda.memory._snapshot()` returns (one device, one
    segment spanning every address), so pytorch.org/memory_viz and `torch.cuda._memory_viz` read it.
    Each event's frame names its op; `time_us` is the op's step."""
    trace = []
    for e in events:
        frames = [_frame(e["step"], curve, e["action"] != "alloc")]
        entry = {"addr": e["addr"], "size": e["size"], "stream": 0, "frames": frames, "time_us": e["step"]}
        if e["action"] == "alloc":
            trace.append({"action": "alloc", **entry})
        else:
            trace += [{"action": "free_requested", **entry}, {"action": "free_completed", **entry}]
    low = min((e["addr"] for e in events), default=0)
    high = max((e["addr"] + e["size"] for e in events), default=0)
    segment: dict[str, Any] = {
        "device": 0,
        "address": low,
        "total_size": high - low,
        "allocated_size": 0,
        "active_size": 0,
        "requested_size": 0,
        "stream": 0,
        "segment_type": "large",
        "segment_pool_id": (0, 0),
        "is_expandable": False,
        "frames": [],
        "blocks": [{"address": low, "size": high - low, "requested_size": 0, "state": "inactive", "frames": []}],
    }
    return {"segments": [segment] if high > low else [], "device_traces": [trace]}
