import pytest
import torch

import bwd_widgets as bw

from models import MLP, DataclassOut, DictOut, GraphBreak, ScalarSetting, Transformer


def _check_gradients(extraction):
    """Each backward graph, run on the inputs captured in real mode, gives autograd's gradients."""
    assert len(extraction.partitions) == 1
    pair = extraction.partitions[0]
    outputs = pair.backward(*pair.backward_inputs)
    assert len(outputs) == len(pair.gradients)
    for output, gradient in zip(outputs, pair.gradients):
        torch.testing.assert_close(output, extraction.autograd_gradients[gradient.key])


def test_mlp_saved_tensors_have_module_paths_and_sources():
    torch.manual_seed(0)
    model = MLP()
    extraction = bw.extract(model, torch.randn(8, 16))
    saved = extraction.saved_tensors
    activations = [s for s in saved if s.kind == "activation"]
    # Linear saves t(weight), a view: it shares the parameter's memory
    views = [s for s in activations if s.alias_of]
    parameters = dict(model.named_parameters())
    assert views and all(s.alias_of in parameters and s.activation_bytes == 0 for s in views)
    assert extraction.saved_activation_bytes == sum(s.bytes for s in activations if not s.alias_of)
    assert {s.module for s in activations if not s.alias_of} >= {"blocks.0.0", "blocks.3.1"}
    assert all(s.source_line and "examples/__init__.py" in s.source_line for s in activations if s.producer)
    assert {g.grad_of for g in extraction.gradients} == {n for n, _ in model.named_parameters()} | {"x"}
    _check_gradients(extraction)
    assert "bw_nodes=" in repr(extraction)


def test_user_parameters_and_grads_are_restored():
    model = MLP()
    model.head.weight.requires_grad_(False)
    bw.extract(model, torch.randn(2, 16))
    assert model.head.weight.requires_grad is False
    assert model.blocks[0][0].weight.requires_grad is True
    assert all(p.grad is None for p in model.parameters())


def test_dataclass_and_dict_outputs():
    extraction = bw.extract(DataclassOut(), torch.randn(3, 4))
    assert len(extraction.tangents) == 2
    _check_gradients(extraction)
    extraction = bw.extract(DictOut(), torch.randn(3, 4), torch.tensor(2.0))
    assert {g.grad_of for g in extraction.gradients} == {"lin.weight", "lin.bias", "x", "scale"}
    _check_gradients(extraction)


def test_requires_grad_override():
    extraction = bw.extract(
        DictOut(), torch.randn(3, 4), torch.tensor(2.0), requires_grad={"x": False, "lin.bias": False}
    )
    assert {g.grad_of for g in extraction.gradients} == {"lin.weight", "scale"}
    assert extraction.requires_grad["x"] is False


def test_graph_breaks_give_several_pairs_in_order():
    extraction = bw.extract(GraphBreak(), torch.randn(2, 4))
    assert len(extraction.partitions) >= 2
    assert [g.index for g in extraction.partitions] == list(range(len(extraction.partitions)))
    first = {g.grad_of for g in extraction.partitions[0].gradients}
    last = {g.grad_of for g in extraction.partitions[-1].gradients}
    assert "a.weight" in first and "b.weight" in last
    assert extraction.summary()["graphs"] == len(extraction.partitions)


def test_item_stays_in_one_graph_unless_asked_to_break():
    """`.item()` stays in the graph unless told, and the extraction names the setting under which torch.compile
    makes the graphs shown: one graph under it, two (a break at `.item()`) under torch's default, as each extraction
    shows, by torch.compile's own count of its graphs. (Real mode: a fake tensor has no number to give `.item()`.)"""
    torch.manual_seed(0)
    model, x, scale = ScalarSetting(), torch.randn(2, 4), torch.tensor(3.0)
    one = bw.extract(model, x, scale, requires_grad={"scale": False}, cache=False)
    split = bw.extract(model, x, scale, requires_grad={"scale": False}, capture_scalars=False, cache=False)
    assert one.torch_compile_settings == {"capture_scalar_outputs": True}
    kept = "reads a scalar from a tensor (.item()) and keeps it inside, as torch._dynamo.config.capture_scalar_outputs"
    assert any(kept in note for note in one.notes), one.notes
    assert split.torch_compile_settings == {} and not any(kept in note for note in split.notes), split.notes
    for extraction, graphs in ((one, 1), (split, 2)):
        made: list[torch.fx.GraphModule] = []

        def counting(gm, example_inputs, made=made):
            made.append(gm)
            return gm.forward

        torch._dynamo.reset()
        with torch._dynamo.config.patch(**extraction.torch_compile_settings):
            torch.compile(model, backend=counting)(x, scale)
        torch._dynamo.reset()
        assert len(extraction.partitions) == len(made) == graphs
    assert torch._dynamo.config.capture_scalar_outputs is False


def test_min_cut_and_budget_differ_from_default():
    torch.manual_seed(0)
    model = Transformer()
    tokens = torch.randint(0, 64, (2, 16))
    default = bw.extract(model, tokens)
    min_cut = bw.extract(model, tokens, partitioner="min_cut")
    low = bw.extract(model, tokens, partitioner="min_cut", memory_budget=0.0)
    assert default.partitioner == "default" and min_cut.partitioner == "min_cut"
    assert low.memory_budget == 0.0
    assert min_cut.saved_activation_bytes <= default.saved_activation_bytes
    assert low.saved_activation_bytes <= min_cut.saved_activation_bytes
    assert low.saved_activation_bytes < default.saved_activation_bytes
    assert torch._functorch.config.activation_memory_budget == 1.0


def test_custom_partition_fn_is_called():
    from functorch.compile import default_partition

    calls = []

    def my_partition(joint, inputs, **kwargs):
        calls.append(kwargs["num_fwd_outputs"])
        return default_partition(joint, inputs, **kwargs)

    extraction = bw.extract(MLP(), torch.randn(2, 16), partitioner=my_partition)
    assert calls and extraction.partitioner == "my_partition"
    assert extraction.joint is not None
    assert any(n.name.startswith("tangents_") for n in extraction.joint.graph.nodes)


@pytest.mark.parametrize("how", ["meta", "fake_mode", "ordinary"])
def test_fake_mode_builds_no_real_tensors(how):
    from torch._subclasses.fake_tensor import FakeTensorMode

    tokens = torch.randint(0, 64, (2, 16))
    if how == "meta":
        with torch.device("meta"):
            model = Transformer()
    elif how == "fake_mode":
        with FakeTensorMode():
            model = Transformer()
            tokens = torch.randint(0, 64, (2, 16))
    else:
        model = Transformer()
    real = bw.extract(Transformer(), torch.randint(0, 64, (2, 16)))
    fake = bw.extract(model, tokens, mode="fake")
    assert fake.mode == "fake"
    assert fake.partitions[0].backward_inputs is None
    assert fake.backward_node_count == real.backward_node_count
    assert fake.saved_activation_bytes == real.saved_activation_bytes
    assert [s.name for s in fake.saved_tensors] == [s.name for s in real.saved_tensors]
    if how == "meta":
        assert all(p.device.type == "meta" for p in model.parameters())


def test_a_failing_real_backward_keeps_the_graphs_with_a_note():
    """min-cut at budget 0 saves a batch-norm running stat that forward then updates in place."""
    from bwd_widgets.examples import ConvBN

    extraction = bw.extract(ConvBN(), torch.randn(2, 3, 8, 8), partitioner="min_cut", memory_budget=0.0)
    assert extraction.partitions[0].backward_inputs is None
    failed = [note for note in extraction.notes if "real backward run failed" in note]
    assert len(failed) == 1 and extraction.notes == [extraction.notes[0], *failed], extraction.notes
    assert extraction.saved_activation_bytes <= bw.extract(ConvBN(), torch.randn(2, 3, 8, 8)).saved_activation_bytes


def test_a_partition_is_built_with_the_old_notes_keyword_as_before():
    """`Partition(..., notes=...)` was the field's name before `given_notes`: code that typed it still works."""
    p = bw.extract(lambda x: x.cos().cos(), torch.randn(4, 4)).partitions[0]
    old = bw.Partition(p.trace, p.partitioner, p.forward, p.backward_with_nones, notes=("told",))
    new = bw.Partition(p.trace, p.partitioner, p.forward, p.backward_with_nones, given_notes=("told",))
    assert old.notes == new.notes == ("told",) and old.given_notes == ("told",)


class _Sin(torch.nn.Module):
    def forward(self, x):
        return x.sin()


class _CheckpointSequential(torch.nn.Module):
    """16 alike blocks through checkpoint_sequential, which Dynamo skips (torch.utils): it compiles one
    block's frame, and the model calls it again and again."""

    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.Sequential(*[_Sin() for _ in range(16)])

    def forward(self, x):
        return torch.utils.checkpoint.checkpoint_sequential(self.blocks, 4, x, use_reentrant=False)


class _BreakingBlock(torch.nn.Module):
    def forward(self, x):
        x = x.sin()
        torch._dynamo.graph_break()
        return x.cos()


class _BlocksPastABreak(torch.nn.Module):
    """Three alike blocks with a graph break in each: Dynamo compiles each half once, the model runs each
    three times, whatever it is told to trace into."""

    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList(_BreakingBlock() for _ in range(3))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def test_checkpoint_sequential_is_captured_whole_by_tracing_into_what_dynamo_skips():
    """Captured again under torch's `dont_skip_tracing`: every block's sin is in the graph, checkpointing
    recomputes in backward, and the gradient is eager's."""
    x = torch.randn(8, 8)
    g = bw.extract(_CheckpointSequential(), x)
    ops = [n.target for n in g.forward.graph.nodes if n.op == "call_function"]
    assert ops.count(torch.ops.aten.sin.default) == 16
    assert g.recomputed and {op for _, op in g.recomputed} == {"aten.sin"}
    assert any("dont_skip_tracing" in note for note in g.notes), g.notes
    assert not any("times in one forward" in note for note in g.notes), g.notes
    leaf = x.clone().requires_grad_()
    _CheckpointSequential()(leaf).sum().backward()
    real = g.partitions[0].backward_inputs
    assert real is not None
    (grad,) = [v for v in g.partitions[0].backward_with_nones(*real) if v is not None]
    torch.testing.assert_close(grad, leaf.grad)
    assert bw.extract(_CheckpointSequential(), x, mode="fake").saved_activation_bytes == g.saved_activation_bytes


def test_a_compiled_region_run_again_in_one_forward_is_told_not_passed_off_as_the_model():
    """Where tracing into skipped functions does not help (a graph break in a block run three times), the
    first capture stands and the notes say its graphs are one of the runs."""
    g = bw.extract(_BlocksPastABreak(), torch.randn(8, 8))
    told = [note for note in g.notes if "times in one forward" in note]
    assert len(told) == 2 and all("ran 3 times" in note and "saved bytes count every run" in note for note in told)
    for once in (torch.nn.Sequential(*[_Sin() for _ in range(16)]), GraphBreak()):  # torch.fx; Dynamo, two frames
        inputs = torch.randn(8, 8) if isinstance(once, torch.nn.Sequential) else torch.randn(3, 4)
        assert not [note for note in bw.extract(once, inputs).notes if "times in one forward" in note]
