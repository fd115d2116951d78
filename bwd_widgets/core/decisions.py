"""What torch's min-cut partitioner decided for one split, and why, read from torch's own decision data.

torch keeps its reasons on the flow graph it hands its max-flow solver (`networkx.minimum_cut` up to torch 2.14,
its own Dinic solver `minimum_cut` from 2.15: `compat.min_cut_solver`): every infinite edge carries a
`reason` ("cannot recompute: materialized in backward", "must recompute: marked by checkpoint policy", ...).
Below budget 1 it also runs a knapsack over the values it had banned from recomputation. `recording()` wraps,
for one split on one thread, the functions that see that data (that solver, torch's
`solve_min_cut`, its knapsack and `choose_saved_values_set`) and keeps what they were given and returned,
by node name. Nothing here re-derives a rule: where a torch release moves one of these functions the
decisions are marked unreachable and the reasons say so.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .compat import min_cut_solver, partitioner_size_of, torch_partitioners

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


@dataclass(frozen=True)
class MinCutRun:
    """One call of torch's `solve_min_cut`: its options, the reasons on its flow graph, and its cut."""

    options: dict[str, bool]
    """torch's `MinCutOptions` for this call (`ban_if_materialized_backward`, ...)."""
    dont_ban: frozenset[str]
    """Values the knapsack allowed to be recomputed although banned (its last call only)."""
    cannot_recompute: dict[str, str]
    """torch's reason on the `source -> X_in` edge, after "cannot recompute: "."""
    cannot_save: dict[str, str]
    """torch's reason on an infinite `X_in -> X_out` edge, after "cannot save: "."""
    must_recompute: frozenset[str]
    """Values with torch's `X_in -> sink` edge "must recompute: marked by checkpoint policy"."""
    weights: dict[str, float]
    """The capacity of each value's `X_in -> X_out` edge: what saving it costs in torch's flow graph."""
    saved: tuple[str, ...] = ()
    """The values torch's cut saves, in graph order."""


@dataclass(frozen=True)
class Knapsack:
    """torch's knapsack below budget 1: which banned values it keeps and which it lets be recomputed."""

    budget: float
    candidates: tuple[str, ...]
    """`all_recomputable_banned_nodes`, in torch's order (largest first)."""
    memories: tuple[float, ...]
    """Each candidate's memory, normalised by torch to the span between saving inputs only and min-cut."""
    runtimes: tuple[float, ...]
    """Each candidate's estimated runtime, by torch's estimator."""
    saved: frozenset[str]
    recomputed: frozenset[str]


@dataclass(frozen=True)
class Decisions:
    """Everything torch's partitioner decided in one split; empty for partitioners that run no min-cut."""

    reachable: bool = True
    """False when this torch has moved a function the recording wraps: no reason can be read."""
    budget: float | None = None
    """The memory budget torch's `choose_saved_values_set` was given (None: it was not called)."""
    runs: tuple[MinCutRun, ...] = ()
    knapsack: Knapsack | None = None
    route: str = ""
    """Which of torch's plans was returned: "min_cut", "more_aggressive", "aggressive", "knapsack", or
    "inputs" (budget 0, or nothing left to recompute); "" when min-cut did not run."""
    input_bytes: int = 0
    """torch's `_size_of` summed over the forward inputs: the least a plan can save."""
    min_cut_bytes: int = 0
    """torch's `_size_of` summed over plain min-cut's saved values: budget 1."""
    saved_bytes: int = 0
    """torch's `_size_of` summed over the values torch returned."""
    sized: bool = True
    """False where torch's `_size_of` could not size these nodes: no ratio then."""
    unknown: str = ""
    """Where a reason cannot be read, why not, in place of "reason unknown on this torch" (a loaded trace says
    its reasons are not in the trace)."""

    @property
    def chosen(self) -> MinCutRun | None:
        """The min-cut run whose cut torch returned (None on the "inputs" route or without min-cut)."""
        if self.route in ("", "inputs") or not self.runs:
            return None
        if self.route == "knapsack":
            return self.runs[-1]
        return self.runs[("min_cut", "more_aggressive", "aggressive").index(self.route)]

    @property
    def budget_ignored(self) -> bool:
        """torch returned plain min-cut's plan under a budget between 0 and 1, because that plan saves no more
        than the forward's inputs weigh (`choose_saved_values_set`, "the optimized choice is smaller than the
        inputs anyways"): every budget above 0 then saves what budget 1 saves."""
        budget_between = self.budget is not None and 0 < self.budget < 1
        return budget_between and self.sized and self.route == "min_cut" and self.min_cut_bytes <= self.input_bytes

    @property
    def budget_ratio(self) -> float | None:
        """The budget as torch measures a plan: (saved - inputs) / (min-cut's saved - inputs), by its sizes."""
        if not self.sized:
            return None
        if self.route == "inputs" and self.saved_bytes == self.input_bytes:
            return 0.0
        if self.route == "" or self.min_cut_bytes <= self.input_bytes:
            return None
        return (self.saved_bytes - self.input_bytes) / (self.min_cut_bytes - self.input_bytes)


UNREACHABLE = Decisions(reachable=False)
NO_MIN_CUT = Decisions()


@dataclass
class _Recorder:
    thread: int
    runs: list[MinCutRun] = field(default_factory=list)
    graphs: list = field(default_factory=list)
    knapsack: Knapsack | None = None
    decisions: Decisions = NO_MIN_CUT
    failed: bool = False


_lock = threading.Lock()
_active: _Recorder | None = None


def _recorder() -> _Recorder | None:
    """The recording of this thread's split, if one is active (torch compiling elsewhere is not recorded)."""
    recorder = _active
    return (
        recorder if recorder is not None and recorder.thread == threading.get_ident() and not recorder.failed else None
    )


def _record(recorder: _Recorder | None, step: Callable[[_Recorder], None]) -> None:
    """Run one recording step; if it fails (a torch that changed its data), the split goes on and its
    decisions read "reason unknown on this torch": recording never breaks torch's partitioning."""
    if recorder is None:
        return
    try:
        step(recorder)
    except Exception:  # noqa: BLE001 - recording never breaks the split: any failure marks its decisions unknown
        recorder.failed = True


def _edge_reasons(nx_graph: Any) -> MinCutRun:
    """torch's reasons, read off its flow graph's edges."""
    cannot_recompute: dict[str, str] = {}
    cannot_save: dict[str, str] = {}
    weights: dict[str, float] = {}
    must_recompute: set[str] = set()
    for start, end, data in nx_graph.edges(data=True):
        reason = data.get("reason", "")
        if start == "source" and reason.startswith("cannot recompute"):
            cannot_recompute[end[: -len("_in")]] = reason.partition(": ")[2] or reason
        elif end == "sink" and reason.startswith("must recompute"):
            must_recompute.add(start[: -len("_in")])
        elif start.endswith("_in") and end == start[: -len("_in")] + "_out":
            name = start[: -len("_in")]
            weights[name] = float(data.get("capacity", math.inf))
            if reason.startswith("cannot save"):
                cannot_save[name] = reason.partition(": ")[2]
    return MinCutRun({}, frozenset(), cannot_recompute, cannot_save, frozenset(must_recompute), weights)


def _minimum_cut(original: Callable[..., Any]) -> Callable[..., Any]:
    def minimum_cut(nx_graph: Any, *args: Any, **kwargs: Any) -> Any:
        recorder = _recorder()
        if recorder is not None:
            recorder.graphs.append(nx_graph)
        return original(nx_graph, *args, **kwargs)

    return minimum_cut


def _solve_min_cut(original: Callable[..., Any]) -> Callable[..., Any]:
    def solve_min_cut(joint_graph: Any, node_info: Any, min_cut_options: Any, dont_ban: Any = None) -> Any:
        recorder = _recorder()
        graphs_before = len(recorder.graphs) if recorder is not None else 0
        saved, banned = original(joint_graph, node_info, min_cut_options, dont_ban)

        def step(recorder: _Recorder) -> None:
            if len(recorder.graphs) <= graphs_before:
                return
            run = _edge_reasons(recorder.graphs.pop())
            options = {f.name: bool(getattr(min_cut_options, f.name)) for f in dataclasses.fields(min_cut_options)}
            names = frozenset(n.name for n in dont_ban or ())
            recorder.runs.append(
                dataclasses.replace(run, options=options, dont_ban=names, saved=tuple(n.name for n in saved))
            )

        _record(recorder, step)
        return saved, banned

    return solve_min_cut


def _optimize(original: Callable[..., Any]) -> Callable[..., Any]:
    def optimize(
        joint_graph: Any,
        memories: Any,
        runtimes: Any,
        max_memory: Any,
        node_info: Any,
        candidates: Any,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        result = original(joint_graph, memories, runtimes, max_memory, node_info, candidates, *args, **kwargs)

        def step(recorder: _Recorder) -> None:
            _, saved_indices, recomputed_indices = result
            names = tuple(n.name for n in candidates)
            recorder.knapsack = Knapsack(
                float(max_memory),
                names,
                tuple(float(m) for m in memories),
                tuple(float(r) for r in runtimes),
                frozenset(names[i] for i in saved_indices),
                frozenset(names[i] for i in recomputed_indices),
            )

        _record(_recorder(), step)
        return result

    return optimize


def _choose(original: Callable[..., Any]) -> Callable[..., Any]:
    def choose_saved_values_set(
        joint_graph: Any, node_info: Any, memory_budget: Any = 1, *args: Any, **kwargs: Any
    ) -> Any:
        recorder = _recorder()
        runs_before = len(recorder.runs) if recorder is not None else 0
        saved = original(joint_graph, node_info, memory_budget, *args, **kwargs)

        def step(recorder: _Recorder) -> None:
            recorder.decisions = _decided(recorder, runs_before, joint_graph, node_info, saved, float(memory_budget))

        _record(recorder, step)
        return saved

    return choose_saved_values_set


def _decided(
    recorder: _Recorder, runs_before: int, joint_graph: Any, node_info: Any, saved: list, budget: float
) -> Decisions:
    """Which plan torch returned, and the sizes torch's own `_size_of` gives the budget ratio."""
    size_of = partitioner_size_of()
    runs = tuple(recorder.runs[runs_before:])
    returned = tuple(n.name for n in saved)
    route = "inputs"
    if recorder.knapsack is not None and runs and runs[-1].dont_ban:
        route = "knapsack"
    else:
        for name, run in zip(("min_cut", "more_aggressive", "aggressive"), runs):
            if run.saved == returned:
                route = name
                break
    nodes = {n.name: n for n in joint_graph.nodes}
    min_cut = runs[0].saved if runs else ()
    try:  # torch sizes these only below budget 1; some graphs' inputs carry no `val` to size
        sizes = (
            sum(size_of(n) for n in node_info.inputs),
            sum(size_of(nodes[name]) for name in min_cut),
            sum(size_of(n) for n in saved),
        )
    except Exception:  # noqa: BLE001 - torch's sizing of graphs it never sizes itself may fail anyhow: no ratio
        sizes = None
    return Decisions(
        reachable=True,
        budget=budget,
        runs=runs,
        knapsack=recorder.knapsack,
        route=route,
        input_bytes=sizes[0] if sizes else 0,
        min_cut_bytes=sizes[1] if sizes else 0,
        saved_bytes=sizes[2] if sizes else 0,
        sized=sizes is not None,
    )


_WRAPPED = (
    ("solve_min_cut", _solve_min_cut),
    ("_optimize_runtime_with_given_memory", _optimize),
    ("choose_saved_values_set", _choose),
)


@contextlib.contextmanager
def recording() -> Iterator[_Recorder]:
    """Record torch's partitioner decisions for one split on this thread; `.decisions` holds them after."""
    global _active
    solver_home, solver_name = min_cut_solver()

    recorder = _Recorder(threading.get_ident())
    if not all(callable(getattr(torch_partitioners, name, None)) for name, _ in _WRAPPED):
        recorder.decisions = UNREACHABLE
        yield recorder
        return
    with _lock:
        originals = {name: getattr(torch_partitioners, name) for name, _ in _WRAPPED}
        original_cut = getattr(solver_home, solver_name)
        try:
            _active = recorder
            setattr(solver_home, solver_name, _minimum_cut(original_cut))
            for name, wrap in _WRAPPED:
                setattr(torch_partitioners, name, wrap(originals[name]))
            yield recorder
            if recorder.failed:
                recorder.decisions = UNREACHABLE
        finally:
            setattr(solver_home, solver_name, original_cut)
            for name, original in originals.items():
                setattr(torch_partitioners, name, original)
            _active = None


def logged_decisions(information: dict[str, Any]) -> Decisions | None:
    """The decisions torch's knapsack wrote into a trace (`min_cut_information`, what torch logs with
    `AOT_PARTITIONER_DEBUG=1` each time its knapsack runs below budget 1), as `recording()` would have kept them
    in the run: the budget, the knapsack's candidates and choice, and the cut of the min-cut run it fed. The
    reasons on the flow graph's edges are not in it (they stay empty). None where the payload is not in the
    form torch 2.13 to 2.15 write."""
    try:
        candidates = tuple(str(name) for name in information["Recomputable Banned Nodes Order"])
        kept = {candidates[int(i)] for i in information["Knapsack Saved Nodes"]}
        dropped = {candidates[int(i)] for i in information["Knapsack Recomputed Nodes"]}
        budget = float(information["Memory Budget"])
        knapsack = Knapsack(
            budget,
            candidates,
            tuple(float(m) for m in information["Knapsack Input Memories"]),
            tuple(float(r) for r in information["Knapsack Input Runtimes"]),
            frozenset(kept),
            frozenset(dropped),
        )
        cut = tuple(str(name) for name in information["Min Cut Solution Saved Values"])
        sizes = [float(information[key]) for key in _LOGGED_SIZES]
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    run = MinCutRun({}, frozenset(dropped), {}, {}, frozenset(), {}, cut)
    input_bytes, min_cut_bytes, saved_bytes = (round(gigabytes * 1e9) for gigabytes in sizes)
    return Decisions(
        budget=budget,
        runs=(run,),
        knapsack=knapsack,
        route="knapsack",
        input_bytes=input_bytes,
        min_cut_bytes=min_cut_bytes,
        saved_bytes=saved_bytes,
    )


_LOGGED_SIZES = ("Min Activation Size (GB)", "Max Activation Size (GB)", "Saved Values Activation Size (GB)")
"""torch's `estimate_activations_size` of the inputs, of plain min-cut's plan and of the plan returned: `_size_of`
summed and divided by 1e9."""
