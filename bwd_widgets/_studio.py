"""Trace once, partition many: repartition, compare, sweep memory budgets, diff partitions."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import torch

from ._capture import CapturedGraph, copy_graph_module
from ._errors import BwdWidgetsError, one_line
from ._partitioners import resolve_partitioner

DEFAULT_BUDGETS = tuple(i / 10 for i in range(11))


def _fingerprint(gm) -> tuple:
    return tuple((n.name, n.op, n.target, len(n.users)) for n in gm.graph.nodes)


def _partition_kept_joint(pair, resolved):
    """Partition the pair's working joint graph, then put back what the partitioner changed.

    Partitioners (min-cut) rewrite node metadata and add attributes such as
    `dist_from_bw`, but not the graph itself: restoring the metadata is far cheaper
    than copying the graph for every partition. If the structure ever changes, the
    working copy is dropped and the next call copies the untouched joint again.
    """
    work = pair.work_joint if pair.work_joint is not None else copy_graph_module(pair.joint)
    pair.work_joint = None
    nodes = list(work.graph.nodes)
    metas = [dict(n.meta) for n in nodes]
    attributes = [set(vars(n)) for n in nodes]
    fingerprint = _fingerprint(work)
    with resolved.config():
        result = resolved.partition_fn(work, pair.joint_inputs, **pair.partition_kwargs)
    if _fingerprint(work) == fingerprint:
        for node, meta, names in zip(nodes, metas, attributes):
            node.meta = meta
            for added in set(vars(node)) - names:
                delattr(node, added)
        pair.work_joint = work
    return result


def repartition(extraction, partitioner="default", memory_budget=None):
    """Partition a copy of each kept joint graph again: no tracing, same inputs and names."""
    from ._extract import graph_pair

    resolved = resolve_partitioner(partitioner, memory_budget)
    started = time.perf_counter()
    graphs, notes = [], []
    for pair in extraction.graphs:
        if pair.joint is None or pair.joint_inputs is None:
            raise BwdWidgetsError("this extraction kept no joint graph to partition again: extract it again.")
        forward, backward = _partition_kept_joint(pair, resolved)
        captured = CapturedGraph(
            dynamo_graph=None,
            input_sources=pair.inputs,
            joint=pair.joint,
            forward=forward,
            backward=backward,
            num_fwd_outputs=pair.num_fwd_outputs,
            joint_inputs=pair.joint_inputs,
            partition_kwargs=pair.partition_kwargs,
            forward_inputs=pair.forward_inputs,
        )
        if pair.forward_inputs is not None:
            try:
                captured.backward_inputs = replay_backward_inputs(captured, pair)
            except Exception as error:  # the graphs stand; only the real values are missing
                notes.append(f"could not replay real backward inputs: {one_line(error)}")
        new_pair = graph_pair(pair.index, captured, resolved.name)
        new_pair.work_joint = pair.work_joint
        graphs.append(new_pair)
    return dataclasses.replace(
        extraction,
        graphs=graphs,
        partitioner=resolved.name,
        memory_budget=resolved.memory_budget,
        seconds=time.perf_counter() - started,
        notes=notes,
    )


def replay_backward_inputs(captured, original_pair) -> list:
    """Run the new forward graph on the real forward inputs: its saved outputs, plus the
    tangents autograd used, are the real inputs of the new backward graph."""
    with torch.no_grad():
        outputs = captured.forward(*original_pair.forward_inputs)
    output_nodes = captured.forward.graph.output_node().args[0]
    by_name = {node.name: value for node, value in zip(output_nodes, outputs) if isinstance(node, torch.fx.Node)}
    old_tangents = {
        n.name: v
        for n, v in zip(original_pair.backward_with_nones.graph.find_nodes(op="placeholder"), original_pair.backward_inputs or [])
        if n.name.startswith("tangents_")
    }
    values = []
    for node in captured.backward.graph.find_nodes(op="placeholder"):
        if node.name.startswith("tangents_"):
            values.append(old_tangents[node.name])
        else:
            values.append(by_name[node.name])
    return values


# --- compare ------------------------------------------------------------------


def _spec(entry):
    """"default", "min_cut", a budget, ("min_cut", budget), or a partition_fn."""
    if isinstance(entry, tuple):
        return entry
    return (entry, None)


def _label(extraction) -> str:
    if extraction.memory_budget is None:
        return extraction.partitioner
    return f"{extraction.partitioner} budget {extraction.memory_budget:g}"


def row(extraction) -> dict:
    """Plain numbers for one partition."""
    recomputed = extraction.recomputed
    return {
        "partition": _label(extraction),
        "partitioner": extraction.partitioner,
        "memory_budget": extraction.memory_budget,
        "saved": len(extraction.saved_tensors),
        "saved_activation_bytes": extraction.saved_activation_bytes,
        "recomputed": len(recomputed),
        "recomputed_ops": sorted({op for _, op in recomputed}),
        "forward_nodes": extraction.forward_node_count,
        "backward_nodes": extraction.backward_node_count,
        "backward_flops": extraction.backward_flops,
        "recompute_flops": extraction.recompute_flops,
    }


@dataclass
class Comparison:
    """Partitions of one joint graph, side by side."""

    extractions: list
    rows: list = field(default_factory=list)

    def diff(self, a: int = 0, b: int = 1) -> dict:
        return diff(self.extractions[a], self.extractions[b])

    def widget(self):
        from ._widget import BackwardGraphWidget

        return BackwardGraphWidget(comparison=self)

    def __repr__(self) -> str:
        columns = ("partition", "saved", "saved_activation_bytes", "recomputed", "backward_nodes", "backward_flops")
        lines = ["  ".join(f"{c:>22}" for c in columns)]
        lines += ["  ".join(f"{str(r[c]):>22}" for c in columns) for r in self.rows]
        return "\n".join(lines)


def _base(model_or_extraction, inputs, extract_kwargs):
    from ._extract import extract
    from ._extraction import BackwardExtraction

    if isinstance(model_or_extraction, BackwardExtraction):
        return model_or_extraction
    return extract(model_or_extraction, *inputs, **extract_kwargs)


def compare(model_or_extraction, *inputs, partitioners=("default", "min_cut", 0.5, 0.0), **extract_kwargs) -> Comparison:
    """Trace once, then one row per partitioner: saved count and bytes, recomputed ops,
    node counts, estimated backward FLOPs."""
    base = _base(model_or_extraction, inputs, extract_kwargs)
    extractions = [repartition(base, *_spec(entry)) for entry in partitioners]
    return Comparison(extractions, [row(e) for e in extractions])


def diff_payload(previous, current) -> dict:
    """What the widget highlights after a switch: values now recomputed, values newly saved."""
    from ._graph_data import saved_row

    d = diff(previous, current)
    before = {s.name: s for s in previous.saved_tensors}
    return {
        "against": _label(previous),
        "recomputed_now": d["saved_in_a_recomputed_in_b"],
        "recomputed_rows": [saved_row(before[name]) for name in d["saved_in_a_recomputed_in_b"]],
        "newly_saved": d["saved_only_in_b"],
    }


def sweep_payload(result) -> list:
    front = {id(p) for p in result.pareto()}
    return [
        {
            "budget": p.budget,
            "saved_activation_bytes": p.saved_activation_bytes,
            "recompute_flops": p.recompute_flops,
            "saved": p.saved,
            "pareto": id(p) in front,
        }
        for p in result.points
    ]


def diff(a, b) -> dict:
    """What one partition saves that the other recomputes (or does not need), and back."""
    saved_a = {s.name for s in a.saved_tensors if s.is_activation}
    saved_b = {s.name for s in b.saved_tensors if s.is_activation}
    recomputed_a = {name for name, _ in a.recomputed}
    recomputed_b = {name for name, _ in b.recomputed}
    return {
        "saved_in_a_recomputed_in_b": sorted(saved_a & recomputed_b),
        "saved_in_b_recomputed_in_a": sorted(saved_b & recomputed_a),
        "saved_only_in_a": sorted(saved_a - saved_b),
        "saved_only_in_b": sorted(saved_b - saved_a),
    }


# --- sweep --------------------------------------------------------------------


@dataclass
class SweepPoint:
    budget: float
    saved_activation_bytes: int
    recompute_flops: int
    backward_flops: int
    saved: int
    extraction: object = field(repr=False, default=None)


@dataclass
class Sweep:
    points: list
    interrupted: bool = False

    def pareto(self) -> list:
        """Points no other point beats on both saved bytes and recompute FLOPs."""
        front = []
        for p in self.points:
            dominated = any(
                q.saved_activation_bytes <= p.saved_activation_bytes
                and q.recompute_flops <= p.recompute_flops
                and (q.saved_activation_bytes, q.recompute_flops) != (p.saved_activation_bytes, p.recompute_flops)
                for q in self.points
            )
            if not dominated:
                front.append(p)
        return sorted(front, key=lambda p: p.saved_activation_bytes)

    def rows(self) -> list:
        return [{k: v for k, v in dataclasses.asdict(p).items() if k != "extraction"} for p in self.points]

    def widget(self):
        from ._widget import BackwardGraphWidget

        return BackwardGraphWidget(sweep=self)

    def __repr__(self) -> str:
        lines = [f"Sweep({len(self.points)} points{', interrupted' if self.interrupted else ''})"]
        for p in self.points:
            lines.append(f"  budget {p.budget:4.2f}: {p.saved_activation_bytes:>14} B saved, {p.recompute_flops:>14} recompute FLOPs")
        return "\n".join(lines)


def sweep(model_or_extraction, *inputs, budgets=None, progress=True, on_point=None, **extract_kwargs) -> Sweep:
    """Min-cut across memory budgets (default 0, 0.1, ..., 1), tracing once.

    Shows a progress bar; Ctrl-C (or the notebook's interrupt) stops the sweep and
    returns the points done so far. torch's budget is restored after every point.
    `on_point(point, done, total)` is called after each point (the widget's progress).
    """
    from tqdm.auto import tqdm

    budgets = DEFAULT_BUDGETS if budgets is None else tuple(budgets)
    for budget in budgets:
        resolve_partitioner("min_cut", budget)  # a bad budget fails before any work
    base = _base(model_or_extraction, inputs, extract_kwargs)
    points, interrupted = [], False
    bar = tqdm(budgets, desc="memory budget sweep", unit="budget", disable=not progress)
    try:
        for budget in bar:
            e = repartition(base, "min_cut", budget)
            points.append(SweepPoint(budget, e.saved_activation_bytes, e.recompute_flops, e.backward_flops, len(e.saved_tensors), e))
            if on_point is not None:
                on_point(points[-1], len(points), len(budgets))
    except KeyboardInterrupt:
        interrupted = True
    finally:
        bar.close()
    return Sweep(points, interrupted)
