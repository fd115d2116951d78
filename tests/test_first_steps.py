"""What users type first, as they type it: the README's examples and the advisor on ordinary blocks.

Each case here broke on a new user's first try: the README's min-cut line printed a traceback (the static SVG had no
colour for an edge of recomputed values), the advisor crashed on blocks holding Dropout (torch's FLOP counter cannot
run the operators that carry a recomputed random op's generator state), a user's own checkpoint around Dropout broke
`recompute_flops` the same way, and a model that *is* an `nn.Sequential` of alike blocks got no checkpoint plan.
tests/test_every_view.py generates the same family over every view and partition; these are the users' own words.
"""

import inspect

import pytest
import torch
from compiled_saves import counted_saves
from IPython.utils.capture import capture_output
from ipython_shell import notebook_shell
from torch import nn
from torch.utils.checkpoint import checkpoint

import bwd_widgets as bw
from bwd_widgets.core.kinds import NODE_KINDS
from bwd_widgets.examples import MLP, ConvBN, Transformer
from bwd_widgets.views import dot
from bwd_widgets.views.grouping import EDGE_KINDS


@pytest.fixture(scope="module")
def shell():
    """The README's notebook: its Transformer and tokens, in a real IPython shell with the extension loaded."""
    with notebook_shell(
        "import torch\nfrom bwd_widgets.examples import Transformer\ntorch.manual_seed(0)\n"
        "model = Transformer(width=64, depth=2)\nx = torch.randint(0, 64, (4, 32))"
    ) as ip:
        yield ip


@pytest.mark.parametrize("budget", ["0.3", "0.5", "0"])
def test_the_readme_min_cut_line_shows_its_widget(shell, budget):
    with capture_output() as captured:
        result = shell.run_cell(f"g = %bwd_extract --partitioner min_cut --budget {budget} model(x)")
    assert result.success, result.error_in_exec
    assert "Traceback" not in captured.stdout + captured.stderr
    assert any("BackwardGraph(bw_nodes=" in str(o.data.get("text/plain", "")) for o in captured.outputs)
    assert shell.user_ns["g"].partitioner == "min_cut" and shell.user_ns["g"].recomputed


@pytest.fixture(scope="module")
def transformer():
    torch.manual_seed(0)
    return bw.extract(Transformer(width=64, depth=2), torch.randint(0, 64, (4, 32)))


@pytest.mark.parametrize("budget", [1.0, 0.5, 0.0])
def test_min_cut_partitions_draw_as_static_pictures(transformer, budget, tmp_path):
    partition = transformer.rerun("min_cut", budget)
    assert bw.save_svg(partition, tmp_path / "g.svg").read_text().startswith("<?xml")
    data, _ = bw.show(partition)._repr_mimebundle_()
    assert "<svg" in data["image/svg+xml"]


def test_every_edge_and_node_kind_has_a_colour_in_the_static_picture():
    """The static SVG colours what widget.css colours by class: each kind the grouping draws has its colour."""
    assert set(dot.EDGE_COLOURS) == set(EDGE_KINDS)
    assert set(dot.COLOURS) == {*NODE_KINDS, "recomputed", "group"} == set(dot.SHAPE)


class DropoutBlock(nn.Module):
    """A transformer-style residual block in training mode: Linear, ReLU, Dropout."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.dropout(torch.relu(self.linear(x)))


class Blocks(nn.Module):
    def __init__(self, depth: int = 4) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(DropoutBlock() for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


@pytest.mark.parametrize("mode", ["real", "fake"])
def test_the_advisor_takes_blocks_holding_dropout(mode):
    torch.manual_seed(0)
    advice = bw.advise(Blocks(), torch.randn(8, 16), target="4KB", mode=mode, progress=False)
    assert advice.tried and all(p.recompute_flops >= 0 for p in advice.tried)
    assert any(p.kind == "checkpoint" for p in advice.tried)


class CheckpointedBlocks(Blocks):
    """The user's own checkpoint around each Dropout block, as torch's docs write it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False)
        return x


@pytest.mark.parametrize("mode", ["real", "fake"])
def test_recompute_flops_of_a_users_checkpoint_around_dropout(mode):
    torch.manual_seed(0)
    extraction = bw.extract(CheckpointedBlocks(), torch.randn(8, 16), mode=mode)
    assert extraction.recomputed and extraction.recompute_flops > 0
    if mode == "real":
        assert extraction.measure().peak_bytes > 0  # the recomputed dropout's generator state reaches backward


@pytest.mark.parametrize("mode", ["real", "fake"])
def test_a_model_that_is_a_sequential_of_alike_blocks_gets_checkpoint_plans(mode):
    torch.manual_seed(0)
    model = nn.Sequential(*(DropoutBlock() for _ in range(4)))
    advice = bw.advise(model, torch.randn(8, 16), target="4KB", mode=mode, progress=False)
    kinds = {p.kind for p in advice.tried}
    assert {"checkpoint", "selective"} <= kinds, kinds
    assert not any("no repeated-block container" in note for note in advice.notes)
    checkpointed = next(p for p in advice.tried if p.label == "checkpoint every block")
    assert "for block in model:" in checkpointed.code


def _mlp() -> tuple[nn.Module, tuple]:
    return MLP(width=8, depth=2), (torch.randn(4, 8),)


def _conv_bn() -> tuple[nn.Module, tuple]:
    return ConvBN(), (torch.randn(2, 3, 16, 16),)


def _transformer() -> tuple[nn.Module, tuple]:
    return Transformer(width=16, depth=1), (torch.randint(0, 64, (2, 8)),)


def _names(extraction: bw.BackwardExtraction) -> tuple[list, list]:
    inputs = sorted((s.kind, s.name, s.key) for p in extraction.partitions for s in p.inputs)
    return inputs, sorted((g.kind, g.key) for g in extraction.gradients)


@pytest.mark.parametrize("make", [_mlp, _conv_bn, _transformer], ids=["mlp", "conv_bn", "transformer"])
def test_a_compiled_model_is_extracted_as_the_model_it_wraps(make):
    """`bw.extract(torch.compile(net), x)` named the input `args` and the parameters `_orig_mod.*`: the module
    torch.compile wraps is traced, named as the user names it; the compiled model still runs as compiled."""
    torch.manual_seed(0)
    model, inputs = make()
    compiled = torch.compile(model, backend="eager")
    expected = bw.extract(model, *inputs)
    extraction = bw.extract(compiled, *inputs)
    assert extraction.model_name == type(model).__name__
    assert _names(extraction) == _names(expected)
    assert extraction.backward_node_count == expected.backward_node_count
    torch.testing.assert_close(compiled(*inputs), model(*inputs))


def test_a_compiled_function_is_extracted_as_the_function_it_wraps():
    torch.manual_seed(0)
    model, (x,) = _mlp()

    def loss_of(batch: torch.Tensor) -> torch.Tensor:
        return model(batch).square().mean()

    expected = bw.extract(loss_of, x)
    extraction = bw.extract(torch.compile(loss_of), x)
    assert extraction.model_name == expected.model_name
    assert _names(extraction) == _names(expected)
    assert any(s.name == "batch" for p in extraction.partitions for s in p.inputs)


class _TwoLayers(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)


class _Branches(_TwoLayers):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.a(x)
        if y.sum() > 0:  # the break
            y = y * 2
        return self.b(y)


class _BreaksOnPurpose(_TwoLayers):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.a(x)
        torch._dynamo.graph_break()
        return self.b(y)


class _BranchesOnAScalar(_TwoLayers):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.a(x)
        return self.b(y) * (int(y.abs().sum().item() > 0) + 1)


@pytest.mark.parametrize(
    ("model", "says"),
    [
        (_Branches, "Data-dependent branching"),
        (_BreaksOnPurpose, "torch._dynamo.graph_break()"),
        (_BranchesOnAScalar, "recorded no reason on this torch"),
    ],
    ids=["data_dependent_if", "graph_break_call", "scalar_branch"],
)
def test_a_graph_break_gets_a_note_in_dynamos_words(model, says):
    """A forward Dynamo breaks into regions showed "compiled region 1 of 2" with no note (issue 43, item 11): the
    note says why in Dynamo's own words and, where Dynamo's reason names it, the user's line."""
    extraction = bw.extract(model(), torch.randn(4, 8), cache=False)
    assert len(extraction.partitions) >= 2
    (note,) = [n for n in extraction.notes if n.startswith("Dynamo broke")]
    assert says in note
    if model is _Branches:
        line = next(i for i, text in enumerate(open(__file__).read().splitlines(), 1) if text.endswith("# the break"))
        assert f"{__file__}:{line} (`if y.sum() > 0:  # the break`)" in note


class _BreaksInALoop(torch.nn.Module):
    """Blocks that break the graph, called in a loop: Dynamo gives up on the loop's frame and runs it eagerly."""

    def __init__(self, block: type) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(block() for _ in range(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x.tanh()


@pytest.mark.parametrize("block", [_Branches, _BreaksOnPurpose], ids=["data_dependent_if", "graph_break_call"])
def test_a_frame_dynamo_ran_eagerly_is_named_in_a_note(block):
    """What the eager frame's own ops save (here the tanh's output) is in no graph: bw's saved bytes are less than
    what a pack hook counts around the compiled model, and a note says which frame ran eagerly and why, in
    Dynamo's words; without the loop, no frame runs eagerly and no such note is given."""
    torch.manual_seed(0)
    model, x = _BreaksInALoop(block), torch.randn(4, 8)
    extraction = bw.extract(model, x, cache=False)
    (note,) = [n for n in extraction.notes if " eagerly " in n]
    line = inspect.getsourcelines(_BreaksInALoop.forward)[1]
    assert note.startswith(f"Dynamo ran forward ({__file__}:{line}) eagerly (") and "loop" in note
    assert any(n.startswith("Dynamo broke the graph") for n in extraction.notes)
    assert extraction.saved_activation_bytes < counted_saves(model, (x,)).bytes
    alone = bw.extract(block(), x, cache=False)
    assert not any(" eagerly " in n for n in alone.notes)


def test_a_forward_in_one_region_has_no_graph_break_note():
    extraction = bw.extract(_OneRegion(), torch.randn(4, 8), cache=False)
    assert len(extraction.partitions) == 1 and not any(n.startswith("Dynamo broke") for n in extraction.notes)


class _OneRegion(_TwoLayers):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x).relu())
