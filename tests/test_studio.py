"""Trace once, partition many: repartition, compare, sweep, diff, why saved."""

import os
import sys
import time

import pytest
import torch

import bwd_widgets as bw
from bwd_widgets.core.kinds import MODES
from bwd_widgets.examples import Block, Transformer
from bwd_widgets.views.payload import graph_payload


@pytest.fixture(scope="module")
def transformer():
    torch.manual_seed(0)
    return bw.extract(Transformer(width=64, depth=2), torch.randint(0, 64, (4, 32)))


def _no_retrace(monkeypatch):
    from bwd_widgets.core.capture import CaptureSession

    def fail(*args, **kwargs):
        raise AssertionError("a repartition must not trace again")

    monkeypatch.setattr(CaptureSession, "compile_fx", fail)
    monkeypatch.setattr(CaptureSession, "compile_dynamo", fail)


def test_default_repartition_of_the_reference_equals_the_extractor(conv_bn_dir, monkeypatch):
    extraction = bw.extract(bw.load_graphnet_sample(conv_bn_dir))
    _no_retrace(monkeypatch)
    again = extraction.rerun("default")
    assert str(again.backward.graph) == str(extraction.backward.graph)
    assert str(again.forward.graph) == str(extraction.forward.graph)
    assert [s.name for s in again.saved_tensors] == [s.name for s in extraction.saved_tensors]


def test_repartition_equals_a_fresh_extraction_and_replays_real_gradients(transformer, monkeypatch):
    torch.manual_seed(0)
    fresh = bw.extract(Transformer(width=64, depth=2), torch.randint(0, 64, (4, 32)), partitioner="min_cut")
    _no_retrace(monkeypatch)
    again = transformer.rerun("min_cut")
    assert str(again.backward.graph) == str(fresh.backward.graph)
    pair = again.partitions[0]
    for output, gradient in zip(pair.backward(*pair.backward_inputs), pair.gradients):
        torch.testing.assert_close(output, transformer.autograd_gradients[gradient.key], rtol=1e-4, atol=1e-5)


def test_min_cut_budget_zero_saves_no_more_than_default_on_a_block():
    torch.manual_seed(0)
    default = bw.extract(Block(64, 4), torch.randn(2, 32, 64))
    zero = default.rerun("min_cut", 0.0)
    assert zero.saved_activation_bytes <= default.saved_activation_bytes
    assert zero.saved_activation_bytes == 0 and zero.recomputed and zero.recompute_flops > 0


def test_compare_rows_match_separate_extractions(transformer):
    comparison = bw.compare(transformer, partitioners=["default", "min_cut", ("min_cut", 0.5), 0.0])
    assert [r["partition"] for r in comparison.rows] == ["default", "min_cut", "min_cut budget 0.5", "min_cut budget 0"]
    for row, (partitioner, budget) in zip(
        comparison.rows, [("default", None), ("min_cut", None), ("min_cut", 0.5), ("min_cut", 0.0)]
    ):
        torch.manual_seed(0)
        alone = bw.extract(
            Transformer(width=64, depth=2), torch.randint(0, 64, (4, 32)), partitioner=partitioner, memory_budget=budget
        )
        assert row["saved"] == len(alone.saved_tensors)
        assert row["saved_activation_bytes"] == alone.saved_activation_bytes
        assert row["recomputed"] == len(alone.recomputed)
        assert row["backward_nodes"] == alone.backward_node_count
        assert row["forward_nodes"] == alone.forward_node_count
    default, _, _, zero = comparison.rows
    assert default["recomputed"] == 0 and default["recompute_flops"] == 0
    assert zero["backward_flops"] > default["backward_flops"] > 0
    assert "aten.native_layer_norm" in zero["recomputed_ops"]
    assert "Comparison" not in repr(comparison) and "default" in repr(comparison)
    # torch's own measure of each plan, in the rows and in the header's payload, read from its partitioner
    assert default["torch_budget_ratio"] is None, "the default partitioner runs no min-cut"
    assert comparison.rows[1]["torch_budget_ratio"] == pytest.approx(1.0)
    for row, extraction in zip(comparison.rows[2:], comparison.extractions[2:]):
        ratio = extraction.partitions[0].decisions.budget_ratio
        assert ratio is not None and row["torch_budget_ratio"] == ratio <= extraction.memory_budget
        assert graph_payload(extraction)["partition"]["torch_budget_ratio"] == ratio
    assert graph_payload(comparison.extractions[0])["partition"]["torch_budget_ratio"] is None


def test_diff_names_what_one_saves_and_the_other_recomputes(transformer):
    comparison = bw.compare(transformer, partitioners=["default", 0.0])
    d = comparison.diff(0, 1)
    assert "embedding" in d["saved_in_a_recomputed_in_b"]
    assert d["saved_in_b_recomputed_in_a"] == []
    assert set(d["saved_in_a_recomputed_in_b"]) <= set(d["saved_only_in_a"])


def test_sweep_is_monotone_and_gives_a_pareto_front(transformer):
    result = bw.sweep(transformer, progress=False)
    assert [p.budget for p in result.points] == [i / 10 for i in range(11)]
    saved = [p.saved_activation_bytes for p in result.points]
    assert saved == sorted(saved), "saved bytes rise with the budget on this model"
    assert result.points[0].saved_activation_bytes == 0 and result.points[-1].recompute_flops == 0
    front = result.pareto()
    assert front and all(a.saved_activation_bytes < b.saved_activation_bytes for a, b in zip(front, front[1:]))
    assert all(a.recompute_flops > b.recompute_flops for a, b in zip(front, front[1:]))
    assert torch._functorch.config.activation_memory_budget == 1.0


@pytest.mark.parametrize("workers", [0, 1])
def test_sweep_interrupted_keeps_points_and_restores_the_budget(transformer, monkeypatch, workers):
    """Ctrl-C during this process's fourth partition: the points done so far are kept, its own and, with a
    worker, those the worker sent; torch's budget is as it was."""

    real = bw.BackwardExtraction.rerun
    calls = []
    this_process = os.getpid()

    def interrupt_on_fourth(extraction, partitioner="default", memory_budget=None):
        if os.getpid() == this_process:  # a forked worker's partitions go on
            calls.append(memory_budget)
            if len(calls) == 4:
                assert torch._functorch.config.activation_memory_budget == 1.0
                raise KeyboardInterrupt
        return real(extraction, partitioner, memory_budget)

    monkeypatch.setattr(bw.BackwardExtraction, "rerun", interrupt_on_fourth)
    result = bw.sweep(transformer, progress=False, workers=workers)
    kept = [p.budget for p in result.points]
    assert result.interrupted and set(calls[:3]) <= set(kept) and calls[3] not in kept
    assert kept == ([0.0, 0.1, 0.2] if workers == 0 else sorted(kept)) and len(kept) < 11
    assert torch._functorch.config.activation_memory_budget == 1.0


def test_budget_is_restored_after_a_failing_partition(transformer):
    def broken(joint, inputs, **kwargs):
        assert torch._functorch.config.activation_memory_budget == 0.3
        raise RuntimeError("partitioner bug")

    with pytest.raises(
        bw.PartitionerError,
        match=r"^the broken budget 0.3 partitioner failed on this graph \(RuntimeError: partitioner bug",
    ):
        transformer.rerun(broken, 0.3)
    assert torch._functorch.config.activation_memory_budget == 1.0
    with pytest.raises(bw.PartitionerError):
        bw.sweep(transformer, budgets=[0.5, 2.0], progress=False)


def test_why_saved(transformer, conv_bn_dir):
    min_cut = transformer.rerun("min_cut")
    why = {s.name: s.why for s in min_cut.saved_tensors}
    assert "forward input kept alive" in why["primals_2"]
    layer_norm_stats = [
        s for s in min_cut.saved_tensors if s.producer and s.producer.startswith("aten.native_layer_norm[")
    ]
    # torch's plain min-cut bans them by its allowlist, before its reduction rule is reached
    assert layer_norm_stats and all("not in recomputable allowlist" in s.why for s in layer_norm_stats)
    assert all(s.why.startswith("read by ") for s in min_cut.saved_tensors if s.kind == "activation")
    default = bw.extract(bw.load_graphnet_sample(conv_bn_dir))
    convolution = next(s for s in default.saved_tensors if s.name == "convolution")
    assert "native_batch_norm_backward" in convolution.why and "default partitioner" in convolution.why


def test_checkpoint_policy_tags_are_reported():
    import functools

    from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

    def save_matmuls(ctx, op, *args, **kwargs):
        if op in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default):
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    block = Block(32, 4)

    def run(x):
        context = functools.partial(create_selective_checkpoint_contexts, save_matmuls)
        return checkpoint(block, x, use_reentrant=False, context_fn=context)

    extraction = bw.extract(run, torch.randn(2, 8, 32))
    tagged = [s for s in extraction.saved_tensors if "MUST_SAVE" in s.why]
    assert tagged and all(s.producer.split("[")[0] in ("aten.mm", "aten.addmm", "aten.bmm") for s in tagged)


def test_many_repartitions_of_one_joint_match_fresh_ones(transformer):
    """The working joint graph is reused: what one partitioner changes must not leak into the next."""
    sequence = [
        ("min_cut", 0.0),
        ("default", None),
        ("min_cut", None),
        ("min_cut", 0.5),
        ("default", None),
        ("min_cut", 0.0),
    ]
    results = [transformer.rerun(p, b) for p, b in sequence]
    for (partitioner, budget), result in zip(sequence, results):
        torch.manual_seed(0)
        fresh = bw.extract(
            Transformer(width=64, depth=2), torch.randint(0, 64, (4, 32)), partitioner=partitioner, memory_budget=budget
        )
        assert str(result.backward.graph) == str(fresh.backward.graph), (partitioner, budget)
        assert str(result.forward.graph) == str(fresh.forward.graph), (partitioner, budget)
    assert str(transformer.joint.graph) == str(results[-1].joint.graph)


def test_extract_traces_once_per_model_inputs_and_mode(monkeypatch):
    from bwd_widgets.core.capture import CaptureSession
    from bwd_widgets.examples import MLP

    compiles = []
    for route in ("compile_fx", "compile_dynamo"):
        real = getattr(CaptureSession, route)

        def counting(self, *args, real=real, **kwargs):
            compiles.append(1)
            return real(self, *args, **kwargs)

        monkeypatch.setattr(CaptureSession, route, counting)
    torch.manual_seed(0)
    model, x = MLP(width=16, depth=3), torch.randn(4, 16)
    bw.extract(model, x)
    assert len(compiles) == 1
    again = bw.extract(model, x, partitioner="min_cut", memory_budget=0.0)
    assert len(compiles) == 1, "same model, inputs and mode: partitioned again, not traced"
    fresh = bw.extract(model, x, partitioner="min_cut", memory_budget=0.0, cache=False)
    assert str(again.backward.graph) == str(fresh.backward.graph)
    pair = again.partitions[0]
    for output, gradient in zip(pair.backward(*pair.backward_inputs), pair.gradients):
        torch.testing.assert_close(output, fresh.autograd_gradients[gradient.key])
    compiles.clear()
    bw.extract(model, torch.randn(5, 16))
    bw.extract(model, x, mode="fake")
    with torch.no_grad():
        model.head.weight.add_(1.0)
    bw.extract(model, x)
    assert len(compiles) == 3, "a new shape, another mode, and changed weights each trace again"


def test_a_sweep_shares_torchs_cuts_and_flop_counts_yet_equals_independent_partitions(transformer):
    """Budgets share the flow graphs torch cuts alike, the FLOP counts of alike ops and the graphs of a saved set
    an earlier budget chose (core/reuse.py): every point is, node for node, what a fresh extraction at its budget
    gives, with torch's reasons."""
    from bwd_widgets.core.flops import node_flops

    torch.manual_seed(0)
    model, tokens = Transformer(width=64, depth=2), torch.randint(0, 64, (4, 32))
    base = bw.extract(model, tokens, cache=False)
    trace = base.partitions[0].trace
    budgets = (0.0, 0.2, 0.5, 0.8, 0.9, 1.0)
    result = bw.sweep(base, budgets=budgets, progress=False, workers=0)  # shared within one process
    assert trace._cuts.hits > 0, "the budgets below 1 cut the same three flow graphs: each cut once"
    chosen = [tuple(s.name for s in p.extraction.saved_tensors) for p in result.points]
    assert len(set(chosen)) < len(chosen), "0.8 and 0.9 choose one saved set on this model"
    assert trace._splits.hits == len(chosen) - len(set(chosen)), "a saved set chosen again: its graphs built once"
    graphs = [id(g) for p in result.points for g in (p.extraction.forward, p.extraction.backward)]
    assert len(set(graphs)) == len(graphs), "each point holds graphs of its own, copies where shared"
    calls = sum(1 for n in result.points[0].extraction.backward.graph.nodes if n.op == "call_function")
    assert 0 < len(trace.op_flops) < calls, "two alike layers: fewer distinct ops counted than nodes"
    for point in result.points:
        shared = point.extraction.partitions[0]
        fresh = bw.extract(model, tokens, partitioner="min_cut", memory_budget=point.budget, cache=False)
        alone = fresh.partitions[0]
        assert str(shared.backward_with_nones.graph) == str(alone.backward_with_nones.graph), point.budget
        assert str(shared.forward.graph) == str(alone.forward.graph), point.budget
        for graph in ("forward", "backward_with_nones"):  # torch's `desc` on the outputs: whose gradient each is
            outputs = (getattr(p, graph).graph.output_node().meta for p in (shared, alone))
            assert set(next(outputs)) == set(next(outputs)), (point.budget, graph)
        assert [s.name for s in shared.saved_tensors] == [s.name for s in alone.saved_tensors]
        assert shared.decisions == alone.decisions and (shared.decisions.runs or point.budget == 0.0), point.budget
        assert shared.node_flops == node_flops(alone.backward_with_nones), point.budget
        assert point.recompute_flops == fresh.recompute_flops and point.backward_flops == fresh.backward_flops


def test_a_kept_split_is_a_partitions_own_and_another_threads_min_cut_runs_as_torchs():
    """The graphs a saved set is kept by are copies both ways: what is done to one partition's graphs never reaches
    another's. And the shortcut is this thread's: torch's min-cut run by another thread meanwhile (the user's own
    torch.compile beside a widget's sweep) runs to its end."""
    import threading

    from bwd_widgets.core.codegen import copy_graph_module
    from bwd_widgets.core.compat import min_cut_rematerialization_partition
    from bwd_widgets.core.trace import _tracing_as_compiled

    torch.manual_seed(0)
    model, tokens = Transformer(width=64, depth=2), torch.randint(0, 64, (4, 32))
    base = bw.extract(model, tokens, cache=False)
    trace = base.partitions[0].trace
    first = base.rerun("min_cut", 0.8)
    graph = first.partitions[0].forward.graph
    with graph.inserting_before(graph.output_node()):
        graph.call_function(torch.ops.aten.relu.default, (next(iter(graph.nodes)),))
    again = base.rerun("min_cut", 0.9)
    fresh = bw.extract(model, tokens, partitioner="min_cut", memory_budget=0.9, cache=False)
    assert trace._splits.hits == 1 and str(again.forward.graph) == str(fresh.forward.graph)

    outcome = []

    def elsewhere():
        joint = copy_graph_module(trace.joint)
        try:
            with torch._functorch.config.patch(activation_memory_budget=0.9), _tracing_as_compiled(joint):
                forward, _ = min_cut_rematerialization_partition(joint, trace.joint_inputs, **trace.partition_kwargs)
            outcome.append(str(forward.graph))
        except BaseException as error:  # noqa: BLE001 - the test reports what the other thread met
            outcome.append(repr(error))

    def this_threads_run():
        other = threading.Thread(target=elsewhere)
        other.start()
        other.join()
        return again.partitions[0].forward, again.partitions[0].backward_with_nones

    with torch._functorch.config.patch(activation_memory_budget=0.9):
        trace._splits.made(this_threads_run)
    assert outcome == [str(fresh.forward.graph)]


@pytest.mark.parametrize(
    ("config", "setting", "value"),
    [
        ("torch._functorch.config", "recompute_views", True),
        ("torch._functorch.config", "enable_activation_offloading", True),
        ("torch._inductor.config", "post_grad_fusion_options", {"activation_quantization_aten_pass": {}}),
    ],
)
def test_a_saved_set_is_shared_only_under_the_same_settings_its_budget_aside(config, setting, value):
    """min-cut builds its graphs from the saved set it chose and torch's settings (functorch's, Inductor's
    fusion options): the graphs a set is kept by are keyed by all of them but the budget, read only to choose."""
    import importlib

    from bwd_widgets.core.reuse import _split_key

    torch.manual_seed(0)
    base = bw.extract(Transformer(width=64, depth=2), torch.randint(0, 64, (4, 32)), cache=False)
    saved = list(base.partitions[0].forward.graph.find_nodes(op="placeholder"))[:3]
    key = _split_key(saved)
    with torch._functorch.config.patch(activation_memory_budget=0.25):
        assert _split_key(saved) == key, "the budget is read only while choosing"
    assert _split_key(saved[:2]) != key
    with importlib.import_module(config).patch(**{setting: value}):
        assert _split_key(saved) != key, (config, setting)


@pytest.mark.parametrize("workers", [0, 1])
def test_with_workers_this_process_takes_the_first_task_then_the_last_ones(workers):
    """Neighbouring tasks stay in one process (a sweep's neighbouring budgets share a saved set's graphs there):
    this process takes the first task and then walks down from the last, the worker up from the second;
    without workers, in order."""
    from bwd_widgets.studio.forked import ForkedTasks

    def slowly(index):  # a worker's task: long enough for this process to do the rest
        time.sleep(1.0)
        return index

    pool = ForkedTasks(6, workers, slowly)
    order: list[int] = []

    def here(index):
        waited = time.monotonic()  # the first task waits until the worker has taken its own, if there is one
        while workers and 1 not in pool.counter.taken[:] and time.monotonic() - waited < 30:
            time.sleep(0.01)
        order.append(index)
        return index

    made: dict[int, bool] = {}
    pool.run(here, lambda index, result, mine: made.__setitem__(index, mine))
    assert sorted(made) == list(range(6))
    assert order == ([0, 1, 2, 3, 4, 5] if workers == 0 else [0, 5, 4, 3, 2]), order
    assert [i for i in sorted(made) if not made[i]] == ([] if workers == 0 else [1])


def test_shared_flop_counts_step_aside_for_an_op_that_writes_its_input():
    from bwd_widgets.core.reuse import counted_flops

    def f(x, w):
        return torch.ops.aten.add_.Tensor(torch.ops.aten.mm.default(x, w), 1.0)

    gm = torch.fx.experimental.proxy_tensor.make_fx(f, tracing_mode="fake")(torch.randn(4, 8), torch.randn(8, 2))
    assert counted_flops(gm, {}) is None, "run on its recorded values it would change them: counted whole instead"
    plain = torch.fx.experimental.proxy_tensor.make_fx(torch.mm, tracing_mode="fake")(
        torch.randn(4, 8), torch.randn(8, 2)
    )
    assert sum(counted_flops(plain, {}).values()) == 2 * 4 * 8 * 2


def _points_slowed_in(monkeypatch, process: str, seconds: float = 0.5) -> None:
    """Each sweep point takes `seconds` longer in the test's own process ("here") or in a forked worker
    ("worker"), so which process makes which points does not hang on a race with the fork."""
    import importlib

    compare = importlib.import_module("bwd_widgets.studio.compare")  # the package's `compare` is its function

    parent, point = os.getpid(), compare._point

    def slowed(*args, **kwargs):
        if (os.getpid() == parent) == (process == "here"):
            time.sleep(seconds)
        return point(*args, **kwargs)

    monkeypatch.setattr(compare, "_point", slowed)


@pytest.mark.parametrize("workers", [0, 1])
def test_sweep_stops_between_points_when_asked(transformer, workers, monkeypatch):
    _points_slowed_in(monkeypatch, "worker")  # a worker never makes every other point before the stop
    asked = []

    def stop_after_two():
        asked.append(1)
        return len(asked) > 2

    budgets = [0.0, 0.5, 1.0, 0.3]
    result = bw.sweep(transformer, budgets=budgets, progress=False, should_stop=stop_after_two, workers=workers)
    kept = [p.budget for p in result.points]
    assert result.interrupted and kept[0] == 0.0 and len(kept) < len(budgets)
    assert kept == [0.0, 0.5] if workers == 0 else kept == [b for b in budgets if b in kept]
    assert torch._functorch.config.activation_memory_budget == 1.0


def test_torchs_work_runs_with_the_garbage_collector_paused_and_gives_it_back(transformer):
    """A sweep's partitions build some 100,000 fx objects each: no collector pass runs while torch works,
    the collector is back on after, even when the work fails, and one the user turned off stays off."""
    import gc

    from bwd_widgets.core.trace import TORCH_WORK

    passes_while_held = []
    gc.callbacks.append(lambda phase, info: passes_while_held.append(TORCH_WORK._depth) if phase == "start" else None)
    try:
        sweep = bw.sweep(transformer, budgets=[0.3, 0.6], progress=False)
        torch.manual_seed(0)
        bw.extract(Transformer(width=64, depth=2), torch.randint(0, 64, (4, 32)), cache=False)
    finally:
        gc.callbacks.pop()
    assert len(sweep.points) == 2
    assert passes_while_held and set(passes_while_held) == {0}  # passes ran, only between torch's work
    assert gc.isenabled()
    with pytest.raises(ZeroDivisionError), TORCH_WORK:
        with TORCH_WORK:
            assert not gc.isenabled()
        assert not gc.isenabled()  # still inside the outer hold
        _ = 1 / 0
    assert gc.isenabled()
    gc.disable()
    try:
        with TORCH_WORK:
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.fixture(scope="module")
def fake_transformer():
    with torch.device("meta"):
        model, tokens = Transformer(width=64, depth=2), torch.randint(0, 64, (4, 32))
    return bw.extract(model, tokens, mode="fake", cache=False)


def _numbers(point):
    return (
        point.budget,
        point.saved_activation_bytes,
        point.recompute_flops,
        point.backward_flops,
        point.saved,
        point.torch_budget_ratio,
        point.peak_activation_bytes,
        point.peak_above_budget,
        point.live_bytes,
    )


@pytest.mark.parametrize("mode", MODES)
def test_a_sweep_shares_its_budgets_with_a_forked_worker_and_equals_one_made_in_process(
    mode, transformer, fake_transformer, monkeypatch
):
    """In either mode a point is made from the graphs' shapes: a worker forked from a real-mode kernel sends
    the same numbers, and the point's real values are replayed here when read."""
    from bwd_widgets.studio.forked import spare_cores

    base = {"real": transformer, "fake": fake_transformer}[mode]
    budgets = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    arrived = []
    here = bw.sweep(base, budgets=budgets, progress=False, workers=0)
    _points_slowed_in(monkeypatch, "here")  # the worker takes budgets, however long its fork takes
    shared = bw.sweep(base, budgets=budgets, progress=False, workers=1, on_point=lambda p, n, total: arrived.append(n))
    assert not shared.interrupted and arrived == [1, 2, 3, 4, 5, 6]
    assert [_numbers(p) for p in shared.points] == [_numbers(p) for p in here.points]
    by_worker = [p for p in shared.points if p.extraction_made is None]
    assert by_worker and shared.points[0].extraction_made is not None  # this process took the first budget
    for point, same in zip(shared.points, here.points):
        extraction = point.extraction  # a worker's point is partitioned here when read, once
        assert extraction is point.extraction and extraction.memory_budget == point.budget
        assert [s.name for s in extraction.saved_tensors] == [s.name for s in same.extraction.saved_tensors]
        replayed, made_here = extraction.partitions[0].backward_inputs, same.extraction.partitions[0].backward_inputs
        assert (replayed is None) == (mode == "fake") and (made_here is None) == (mode == "fake")
        for a, b in zip(replayed or [], made_here or []):
            assert not isinstance(a, torch.Tensor) or torch.equal(a, b)
    assert bw.sweep(base, budgets=[0.5], progress=False).points[0].extraction_made is not None
    # the default, in either mode and on every build: a point runs no backward, so a CUDA build's autograd (which
    # refuses a fork) is never asked
    assert spare_cores() == len(os.sched_getaffinity(0)) - 1


def test_a_model_swept_is_traced_at_its_largest_budget_and_that_partition_is_its_point():
    """bw.sweep(model, x) partitions the trace it makes at the largest budget (not the default, which no
    point uses): that partition is the point, the same as the one made again from it."""
    torch.manual_seed(0)
    model, tokens = Transformer(width=64, depth=2), torch.randint(0, 64, (4, 32))
    result = bw.sweep(model, tokens, budgets=[0.5, 0.0, 0.8], progress=False, cache=False)
    traced = result.points[2].extraction_made
    assert traced is not None and traced.label == "min_cut budget 0.8"
    again = traced.rerun("min_cut", 0.8)
    assert [s.name for s in traced.saved_tensors] == [s.name for s in again.saved_tensors]
    assert _numbers(result.points[2])[1:5] == (
        again.saved_activation_bytes,
        again.recompute_flops,
        again.backward_flops,
        len(again.saved_tensors),
    )
    named = bw.sweep(model, tokens, budgets=[1.0, 0.5], progress=False, cache=False, partitioner=0.5, workers=0)
    assert [p.extraction.label for p in named.points] == ["min_cut budget 1", "min_cut budget 0.5"]


def test_budgets_a_worker_leaves_undone_are_partitioned_in_this_process(fake_transformer, monkeypatch):

    import bwd_widgets.studio.forked as forked
    from bwd_widgets.studio.forked import autograd_survives_fork, default_workers

    monkeypatch.setattr(forked, "_serve", lambda *args: os._exit(1))  # the worker dies at once
    budgets = [0.0, 0.25, 0.5, 0.75, 1.0]
    result = bw.sweep(fake_transformer, budgets=budgets, progress=False, workers=1)
    assert not result.interrupted and [p.budget for p in result.points] == budgets
    assert all(p.extraction_made is not None for p in result.points)
    assert default_workers(fake_transformer.mode) == (
        len(os.sched_getaffinity(0)) - 1 if autograd_survives_fork() else 0
    )
    torch.manual_seed(0)
    real = bw.extract(Transformer(width=64, depth=2), torch.randint(0, 64, (4, 32)))
    assert default_workers(real.mode) == 0  # a real-mode replay stays in the process that has the real tensors


def _hold_at_the_fork(lock, forked):
    """A thread that holds `lock` until this process forks, as a thread of the kernel might."""
    import threading

    held = threading.Event()

    def hold():
        with lock:
            held.set()
            forked.wait(60)

    os.register_at_fork(after_in_parent=forked.set)
    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    held.wait()
    return thread


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="cached_property holds no lock from Python 3.12")
def test_a_worker_forked_while_another_thread_holds_a_cached_property_lock_still_sends_its_points(
    fake_transformer, monkeypatch
):
    """Python 3.11's cached_property has one lock per attribute; a worker forked while another thread held
    one (the widget preparing payloads, a cell reading a memory profile) hung on it before."""
    import threading

    import bwd_widgets.studio.forked as forked
    from bwd_widgets.core.trace import Partition

    monkeypatch.setattr(forked, "STALLED_AFTER_SECONDS", 30.0)  # a hung worker is given up on sooner
    forked = threading.Event()
    thread = _hold_at_the_fork(Partition.__dict__["memory"].lock, forked)
    _points_slowed_in(monkeypatch, "here")
    result = bw.sweep(fake_transformer, budgets=[0.0, 0.25, 0.5, 0.75, 1.0], progress=False, workers=1)
    thread.join()
    assert forked.is_set() and not result.interrupted and len(result.points) == 5
    assert any(p.extraction_made is None for p in result.points)  # the worker's points came from the worker


def test_a_worker_that_stalls_is_given_up_on_and_its_budgets_are_partitioned_here(fake_transformer, monkeypatch):
    import time

    import bwd_widgets.studio.forked as forked

    def take_one_and_stall(owner, counter, connection, work):
        counter.take(owner)
        time.sleep(600)

    monkeypatch.setattr(forked, "_serve", take_one_and_stall)
    monkeypatch.setattr(forked, "STALLED_AFTER_SECONDS", 1.0)
    budgets = [0.0, 0.25, 0.5, 0.75, 1.0]
    result = bw.sweep(fake_transformer, budgets=budgets, progress=False, workers=1)
    assert not result.interrupted and [p.budget for p in result.points] == budgets
    assert all(p.extraction_made is not None for p in result.points)


def test_torchs_cse_pass_runs_once_per_trace_and_each_partition_equals_a_fresh_extraction(monkeypatch):
    """min-cut runs `fx_graph_cse` on the joint graph first; the trace keeps its output as the working copy
    and hands it back (core/reuse.py `cse_once`), so three budgets run the pass once, not three times, on
    every tested torch: 2.14 on pass a key function made per call (`extra_node_key`), and a graph made under
    it is handed back too. Each partition made so equals a fresh extraction's, forward and backward."""
    from bwd_widgets.core.compat import torch_partitioners

    calls = []
    original = torch_partitioners.fx_graph_cse

    def counted(graph, *args, **kwargs):
        calls.append(kwargs)
        return original(graph, *args, **kwargs)

    monkeypatch.setattr(torch_partitioners, "fx_graph_cse", counted)
    with torch.device("meta"):
        model, tokens = Transformer(width=64, depth=2), torch.randint(0, 64, (4, 32))
    base = bw.extract(model, tokens, mode="fake", cache=False)
    for budget in (1.0, 0.5, 0.2):
        again = base.rerun("min_cut", budget)
        fresh = bw.extract(model, tokens, mode="fake", cache=False, partitioner="min_cut", memory_budget=budget)
        for graph in ("forward", "backward"):
            assert [str(n) for n in getattr(again.partitions[0], graph).graph.nodes] == [
                str(n) for n in getattr(fresh.partitions[0], graph).graph.nodes
            ]
        assert [(s.name, s.bytes) for s in again.saved_tensors] == [(s.name, s.bytes) for s in fresh.saved_tensors]
    assert len(calls) == 1 + 3  # the trace's first split only, then each fresh extraction's
