"""Why a value is saved or recomputed is torch's own reason, held against torch's own debug output.

torch's partitioner logs, under `AOT_PARTITIONER_DEBUG`, the op types it bans from recomputation ("Ops banned
from re-materialization"), every value it finds materialized in backward (a debug line), and below budget 1
the structured `min_cut_information` trace of its knapsack. The reasons bwd_widgets shows must agree with
each, on the course's models and the 16 shared GraphNet samples.
"""

from __future__ import annotations

import ast
import json
import logging
import re
from collections import Counter
from dataclasses import dataclass, field

import pytest
import torch

import bwd_widgets as bw
from bwd_widgets.core.compat import torch_partitioners
from bwd_widgets.examples import Transformer

from models import Chain
from shared_data import graphnet_sample_names


@dataclass
class TorchSplit:
    """What torch's partitioner logged at the end of one split: each saved value and its size, and the ops it
    rematerialized (a forward op in both the forward and the backward graph), counted by op."""

    saved_sizes: dict[str, int]
    remat: int = -1
    remat_ops: dict[str, int] = field(default_factory=dict)


@dataclass
class TorchDebug:
    """What torch's partitioner logged while it ran."""

    materialized: set[str] = field(default_factory=set)
    banned_ops: set[str] = field(default_factory=set)
    min_cut_information: list[dict] = field(default_factory=list)
    splits: list[TorchSplit] = field(default_factory=list)


class _Collect(logging.Handler):
    def __init__(self, debug: TorchDebug):
        super().__init__(logging.DEBUG)
        self.debug = debug

    def emit(self, record):
        message = record.getMessage()
        if message.startswith("materialized backwards: "):
            self.debug.materialized.add(message.split()[2])
        elif message.startswith("Ops banned from re-materialization: "):
            self.debug.banned_ops.update(re.findall(r"'([^']+)'", message))
        elif message.startswith("Theoretical Per Activation Storage Sizes: "):
            sizes = ast.literal_eval(message.partition(": ")[2])
            self.debug.splits.append(TorchSplit({name: size for size, name in sizes}))
        elif message.startswith("# remat/fw/bw: "):
            self.debug.splits[-1].remat = int(message.split()[2].split("/")[0])
        elif message.startswith("Count of Ops Rematerialized: "):
            self.debug.splits[-1].remat_ops = dict(ast.literal_eval(message.partition(": ")[2]))
        metadata = getattr(record, "metadata", {})
        if isinstance(metadata, dict) and metadata.get("artifact", {}).get("name") == "min_cut_information":
            self.debug.min_cut_information.append(json.loads(record.payload))


@pytest.fixture
def torch_debug(monkeypatch):
    """torch's own partitioner debug output, as `AOT_PARTITIONER_DEBUG=1` turns it on, collected."""
    debug = TorchDebug()
    handler = _Collect(debug)
    monkeypatch.setattr(torch_partitioners, "AOT_PARTITIONER_DEBUG", True)
    loggers = [logging.getLogger("torch._functorch.partitioners"), logging.getLogger("torch.__trace")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    yield debug
    for logger, level in zip(loggers, levels):
        logger.removeHandler(handler)
        logger.setLevel(level)


def _packet(partition, name: str) -> str:
    node = next(n for n in partition.joint.graph.nodes if n.name == name)
    return str(node.target._overloadpacket)


def _check_against_torch(partition, debug: TorchDebug) -> None:
    """Every ban reason shown agrees with torch's log, and every saved activation's sentence quotes it."""
    run = partition.decisions.chosen
    assert partition.decisions.reachable and run is not None
    materialized = {name for name, reason in run.cannot_recompute.items() if reason == "materialized in backward"}
    assert materialized <= debug.materialized
    assert all(
        run.cannot_recompute[name] == "materialized in backward"
        for name in debug.materialized & set(run.cannot_recompute)
    )
    for name, reason in run.cannot_recompute.items():
        if reason == "not in recomputable allowlist":
            assert _packet(partition, name) in debug.banned_ops, (name, debug.banned_ops)
    for saved in partition.saved_tensors:
        if not saved.is_activation:
            continue
        assert "reason unknown" not in saved.why, saved
        producer = next(n for n in partition.forward.graph.nodes if n.name == saved.name)
        source = producer.args[0] if producer.target.__name__ == "getitem" else producer
        ban = run.cannot_recompute.get(source.name)
        if partition.decisions.route != "knapsack" and ban is not None:
            assert f"\u201ccannot recompute: {ban}\u201d" in saved.why, saved.why


def _check_split_against_torch(partition, split: TorchSplit) -> None:
    """The saved values and their sizes are torch's own list; the recomputed ops torch's own count; and each
    recomputed value's reason is the decision torch recorded for it."""
    assert {s.name: s.bytes for s in partition.saved_tensors} == split.saved_sizes
    forward = {n.name: n for n in partition.forward.graph.nodes if n.op == "call_function"}
    rerun = [forward[name] for name, _ in partition.recomputed if name in forward]
    assert len(rerun) == split.remat
    counted = Counter(str(n.target._overloadpacket) for n in rerun if hasattr(n.target, "_overloadpacket"))
    assert dict(counted) == split.remat_ops
    decisions, run = partition.decisions, partition.decisions.chosen
    for node in partition.nodes:
        if not node.recomputed:
            continue
        if node.name not in forward:
            assert "computed only here" in node.why or "computes it once, here" in node.why, node
        elif decisions.route == "knapsack" and node.name in decisions.knapsack.recomputed:
            assert "knapsack chose to recompute it" in node.why, node
        elif decisions.route == "inputs":
            assert "saves only the forward inputs" in node.why, node
        elif run is not None and node.name in run.must_recompute:
            assert "\u201cmust recompute: marked by checkpoint policy\u201d" in node.why, node
        elif run is not None and node.name in decisions.runs[0].cannot_recompute:
            assert "plain min-cut would not" in node.why and node.name not in run.cannot_recompute, node
        elif run is not None:
            assert node.name not in run.saved and "by torch's minimum cut" in node.why, node


def _check_splits(extraction, debug: TorchDebug, since: int) -> None:
    """Each partition of an extraction against the split torch logged for it, in order."""
    splits = debug.splits[since:]
    assert len(splits) == len(extraction.partitions)
    for partition, split in zip(extraction.partitions, splits):
        _check_split_against_torch(partition, split)


def test_chain_layer_outputs_are_banned_as_materialized_in_backward(torch_debug):
    """Notebook 4's chain: torch bans the layer outputs as materialized in backward, not as part of a cut."""
    chain = Chain(width=256, depth=3)
    extraction = bw.extract(chain, torch.randn(256, 256), partitioner="min_cut")
    _check_splits(extraction, torch_debug, since=0)
    partition = extraction.partitions[0]
    _check_against_torch(partition, torch_debug)
    layer_outputs = {s.alias_of for s in partition.saved_tensors if "materialized in backward" in s.why}
    assert len(layer_outputs) >= 2 and layer_outputs <= torch_debug.materialized, partition.saved_tensors


def test_transformer_reasons_and_knapsack_match_torch(torch_debug):
    """The course Transformer: allowlist bans as torch lists them; at budget 0.8 torch lifts the
    materialized-in-backward ban and recomputes both GELUs; at 0.3 the knapsack's choice, candidates and
    budget ratio equal torch's own `min_cut_information` trace."""
    model = Transformer(width=64, depth=2, heads=4, vocab=128)
    extraction = bw.extract(model, torch.randint(0, 128, (4, 32)), partitioner="min_cut")
    _check_splits(extraction, torch_debug, since=0)
    _check_against_torch(extraction.partitions[0], torch_debug)
    since = len(torch_debug.splits)
    lifted_extraction = extraction.rerun("min_cut", 0.8)
    _check_splits(lifted_extraction, torch_debug, since)
    lifted = lifted_extraction.partitions[0]
    assert lifted.decisions.route == "more_aggressive" and lifted.decisions.budget_ratio <= 0.8
    gelus = {n.name: n.why for n in lifted.nodes if n.recomputed and n.op == "aten.gelu"}
    assert len(gelus) == 2 and all("ban_if_materialized_backward" in why for why in gelus.values()), gelus
    assert all("\u201ccannot recompute: materialized in backward\u201d" in why for why in gelus.values())
    since = len(torch_debug.splits)
    budgeted_extraction = extraction.rerun("min_cut", 0.3)
    _check_splits(budgeted_extraction, torch_debug, since)
    budgeted = budgeted_extraction.partitions[0]
    decisions = budgeted.decisions
    assert decisions.route == "knapsack" and decisions.knapsack is not None
    info = torch_debug.min_cut_information[-1]
    order = info["Recomputable Banned Nodes Order"]
    assert list(decisions.knapsack.candidates) == order
    assert decisions.knapsack.saved == {order[i] for i in info["Knapsack Saved Nodes"]}
    assert decisions.knapsack.recomputed == {order[i] for i in info["Knapsack Recomputed Nodes"]}
    assert info["Memory Budget"] == 0.3
    torch_ratio = (info["Saved Values Activation Size (GB)"] - info["Min Activation Size (GB)"]) / (
        info["Max Activation Size (GB)"] - info["Min Activation Size (GB)"]
    )
    assert decisions.budget_ratio == pytest.approx(torch_ratio, rel=1e-9)
    recomputed = {n.name: n.why for n in budgeted.nodes if n.recomputed}
    chosen = decisions.knapsack.recomputed & set(recomputed)
    assert chosen and all("knapsack chose to recompute it" in recomputed[name] for name in chosen)


def test_budget_zero_and_default_say_what_torch_did(torch_debug):
    extraction = bw.extract(Chain(width=64, depth=2), torch.randn(64, 64), partitioner="min_cut", memory_budget=0.0)
    _check_splits(extraction, torch_debug, since=0)
    decisions = extraction.partitions[0].decisions
    assert decisions.route == "inputs" and decisions.budget_ratio == 0.0
    assert all("saves only the forward inputs" in n.why for n in extraction.partitions[0].nodes if n.recomputed)
    default = extraction.rerun("default").partitions[0]
    assert default.decisions.route == "" and default.decisions.budget_ratio is None


def test_a_torch_without_the_decision_functions_says_reason_unknown(monkeypatch):
    """A torch release that moved a function the recording wraps: no guess, one plain sentence."""
    monkeypatch.delattr(torch_partitioners, "_optimize_runtime_with_given_memory")
    partition = bw.extract(Chain(width=64, depth=2), torch.randn(64, 64), partitioner="min_cut").partitions[0]
    assert not partition.decisions.reachable
    activations = [s for s in partition.saved_tensors if s.is_activation]
    assert activations and all("reason unknown on this torch" in s.why for s in activations)


@pytest.mark.parametrize("name", graphnet_sample_names())
def test_shared_sample_reasons_match_torch(name, samples_dir, torch_debug):
    sample = bw.load_graphnet_sample(samples_dir / name)
    extraction = bw.extract(sample, name=name, partitioner="min_cut")
    _check_splits(extraction, torch_debug, since=0)
    for partition in extraction.partitions:
        _check_against_torch(partition, torch_debug)


def test_the_sweep_carries_torchs_ratio_and_flags_peaks_a_larger_budget_beats(torch_debug):
    """On the course Transformer torch's ratio sits at or under each budget and equals its own trace at every
    knapsack budget, and budgets 0.1 and 0.2 peak above 0.3 (the pinned sweep of notebook 3)."""
    torch.manual_seed(0)
    model = Transformer(width=64, depth=2, heads=4, vocab=128)
    # in this process (torch logs here), the trace made at the largest budget first: its split is that point's
    budgets = [0.1, 0.2, 0.3, 0.5]
    result = bw.sweep(model, torch.randint(0, 128, (4, 32)), budgets=budgets, progress=False, workers=0)
    traces = iter(torch_debug.min_cut_information)
    assert len(torch_debug.splits) == len(result.points)
    in_split_order = [result.points[-1], *result.points[:-1]]
    for point, split in zip(in_split_order, torch_debug.splits):
        _check_split_against_torch(point.extraction.partitions[0], split)
        assert point.torch_budget_ratio is not None and point.torch_budget_ratio <= point.budget
        if point.extraction.partitions[0].decisions.route == "knapsack":
            info = next(traces)
            assert info["Memory Budget"] == point.budget
            torch_ratio = (info["Saved Values Activation Size (GB)"] - info["Min Activation Size (GB)"]) / (
                info["Max Activation Size (GB)"] - info["Min Activation Size (GB)"]
            )
            assert point.torch_budget_ratio == pytest.approx(torch_ratio, rel=1e-9)
        beaten_by = [
            q
            for q in result.points
            if q.budget > point.budget and q.peak_activation_bytes < point.peak_activation_bytes
        ]
        assert (point.peak_above_budget is not None) == bool(beaten_by)
        if beaten_by:
            assert point.peak_above_budget in {q.budget for q in beaten_by}
    assert [p.peak_above_budget for p in result.points[:2]] == [0.3, 0.3]
    assert "torch's ratio" in repr(result) and "peaks above budget 0.3" in repr(result)


def test_a_recording_that_fails_never_breaks_torchs_partitioning(monkeypatch):
    """If reading torch's decision data fails (a torch that changed it), the split still stands."""
    from bwd_widgets.core import decisions

    def broken(nx_graph):
        raise KeyError("a torch whose flow graph changed")

    monkeypatch.setattr(decisions, "_edge_reasons", broken)
    partition = bw.extract(Chain(width=64, depth=2), torch.randn(64, 64), partitioner="min_cut").partitions[0]
    assert not partition.decisions.reachable and partition.saved_tensors
    assert all("reason unknown on this torch" in s.why for s in partition.saved_tensors if s.is_activation)


def test_a_graph_torch_cannot_size_gets_no_ratio_and_a_failing_budget_one_sentence(samples_dir):
    """timm's efficientnet sample: torch's `_size_of` cannot size its inputs, so torch's own budget-0.5
    plan fails; budget 0 and 1 stand, without a ratio torch could not compute."""
    sample = bw.load_graphnet_sample(samples_dir / "timm/test_efficientnet.r160_in1k")
    extraction = bw.extract(sample, partitioner="min_cut")
    assert extraction.partitions[0].decisions.route == "min_cut"
    assert extraction.partitions[0].torch_budget_ratio is None
    assert extraction.rerun("min_cut", 0.0).partitions[0].decisions.route == "inputs"
    with pytest.raises(bw.PartitionerError) as failed:
        extraction.rerun("min_cut", 0.5)
    message = str(failed.value)
    assert "\n" not in message and message.startswith("the min_cut budget 0.5 partitioner failed on this graph")
