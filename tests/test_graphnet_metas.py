"""Metas GraphNet's own loaders can use, and metas we refuse to read, each in one sentence."""

import json
import shutil
import subprocess
import sys

import pytest
import torch
from torch import nn

import bwd_widgets as bw
from bwd_widgets.core.compat import dynamo_config
from bwd_widgets.graphnet.files import LAYOUT_NOTE
from bwd_widgets.graphnet.validate import GRAPHNET_DYNAMO_CONFIG
from bwd_widgets.graphnet.writer import SPLITS, STAGING_PREFIX

from shared_data import shared_path

GRAPHNET_LOAD_AND_RUN = """
import sys
from graph_net.torch.fx_graph_module_util import get_torch_module_and_inputs
for folder in sys.argv[1:]:
    for dummy in (False, True):
        module, inputs = get_torch_module_and_inputs(folder, use_dummy_inputs=dummy)
        module(*inputs)
"""


def _run_under_graphnets_loader(*folders) -> subprocess.CompletedProcess:
    """GraphNet's `get_torch_module_and_inputs`, in its own process: importing GraphNet sets Dynamo's config."""
    peer = shared_path("peer")
    command = [sys.executable, "-c", GRAPHNET_LOAD_AND_RUN, *map(str, folders)]
    return subprocess.run(command, cwd=peer, capture_output=True, text=True, timeout=600)


class _MaskedTranspose(nn.Module):
    """`view(-1)` needs x's transposed layout; `.item()` (captured) makes a graph fake tensors cannot run."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 4))

    def forward(self, x):
        z = (x * self.w.t()).add(1).transpose(0, 1).view(-1)
        return (z * z).sum() + z[int(z.argmax().item())]


def test_a_sample_needing_its_recorded_strides_runs_under_graphnets_loader(tmp_path):
    """GraphNet's loaders build every input contiguous (its metas have no stride): model.py copies the input
    into the layout the graph needs, also when fake tensors cannot run the graph to tell."""
    x = torch.randn(6, 4).t().requires_grad_()
    extraction = bw.extract(_MaskedTranspose(), x, partitioner="min_cut", memory_budget=0.0)  # backward redoes the view
    written = extraction.save_graphnet(tmp_path, "masked_transpose")
    backward = written["train_backward"]
    assert f"{LAYOUT_NOTE}\n    stride = [1, 4]" in (backward / "weight_meta.py").read_text()
    result = _run_under_graphnets_loader(*written.values())
    assert result.returncode == 0, result.stderr[-2000:]
    for folder in written.values():
        marker = json.loads((folder / "graph_net.json").read_text())["bwd_widgets"]
        assert marker["rewritten_for_graphnet"] == ["primals_2 is copied into its recorded strides [1, 4]"]
        sample = bw.load_graphnet_sample(folder)
        sample.module(*sample.inputs)


PAST_INT64 = 2**63
BAD_METAS = {  # case: (tensor, the line that ends its class, what the sentence names)
    "original_name not text": ("L_x_", "original_name = 5", "original_name = 5"),
    "stride as text": ("L_x_", 'stride = "128, 1"', "stride '128, 1'"),
    "stride of the wrong length": ("L_x_", "stride = [1]", "stride [1] for shape [1000, 128]"),
    "negative stride": ("L_x_", "stride = [128, -1]", "negative step in stride [128, -1]"),
    "fractional stride": ("L_x_", "stride = [128, 0.5]", "stride [128, 0.5]"),
    "shape past int64": ("L_x_", f"shape = [{PAST_INT64}, 128]", f"{PAST_INT64} in shape"),
    "stride past int64": ("L_x_", f"stride = [{PAST_INT64}, 1]", f"{PAST_INT64} in stride"),
    "data past int64": (
        "L_edge_index_",
        "data = [" + ", ".join([str(PAST_INT64)] + ["0"] * 199) + "]",
        f"{PAST_INT64} in data",
    ),
    "min_val past int64": ("L_edge_index_", f"min_val = {-PAST_INT64 - 1}", f"{-PAST_INT64 - 1} in min_val"),
    "max_val past int64": ("L_edge_index_", f"max_val = {PAST_INT64}", f"{PAST_INT64} in max_val"),
}


def _edited_sample(samples_dir, folder, tensor: str, line: str):
    """A copy of the GCN sample whose tensor `tensor` ends with `line` (a later assignment wins)."""
    shutil.copytree(samples_dir / "torchgeometric" / "GCN", folder)
    meta = folder / "weight_meta.py"
    classes = meta.read_text().split("\n\n\n")
    (edited,) = [i for i, text in enumerate(classes) if f'name = "{tensor}"' in text]
    classes[edited] = classes[edited].rstrip("\n") + f"\n    {line}\n"
    meta.write_text("\n\n\n".join(classes))
    return folder


@pytest.mark.parametrize("case", BAD_METAS)
def test_a_bad_meta_is_refused_in_one_sentence_naming_the_file_the_tensor_and_the_fault(samples_dir, tmp_path, case):
    tensor, line, fault = BAD_METAS[case]
    sample = _edited_sample(samples_dir, tmp_path / "GCN", tensor, line)
    with pytest.raises(bw.SampleError) as error:
        bw.load_graphnet_sample(sample)
    text = str(error.value)
    assert text.startswith(f"weight_meta.py: {tensor} has ") and fault in text, text
    assert "\n" not in text and "Traceback" not in text and len(text) < 300


def test_samples_with_bad_metas_write_nothing_in_a_batch(samples_dir, tmp_path):
    """Refused when read, in the worker: each record says why in one sentence and no split holds a file."""
    samples = [
        _edited_sample(samples_dir, tmp_path / "samples" / f"case_{i}", tensor, line)
        for i, (tensor, line, _) in enumerate(BAD_METAS.values())
    ]
    out = tmp_path / "out"
    summary = bw.extract_many(samples, out, workers=1, progress=False)
    reasons = {record["name"]: record["reason"] for record in summary.records if record["status"] == "error"}
    for i, (tensor, _, fault) in enumerate(BAD_METAS.values()):
        assert f"weight_meta.py: {tensor} has " in reasons[f"case_{i}"] and fault in reasons[f"case_{i}"]
        assert "\n" not in reasons[f"case_{i}"]
    assert not [path for split in SPLITS for path in (out / split).rglob("*") if path.is_file()]
    assert not list(out.glob(STAGING_PREFIX + "*"))


def test_a_backward_taking_sizes_runs_under_graphnets_loader(samples_dir, tmp_path):
    """Traced under GraphNet's Dynamo settings (as in a process that imported GraphNet), GCN is one graph whose
    backward takes the sizes of its data-dependent edges (`sym_size_int`) with torch's range checks on them;
    GraphNet's loaders pass sizes as 0-d tensors, which those checks refuse."""
    with dynamo_config.patch(GRAPHNET_DYNAMO_CONFIG):
        extraction = bw.extract(bw.load_graphnet_sample(samples_dir / "torchgeometric" / "GCN"))
    backward = extraction.save_graphnet(tmp_path, "GCN")["train_backward"]
    assert "sym_size_int" in (backward / "weight_meta.py").read_text()
    result = _run_under_graphnets_loader(backward)
    assert result.returncode == 0, result.stderr[-2000:]
    sample = bw.load_graphnet_sample(backward)
    sample.module(*sample.inputs)


class _TransposedView(nn.Module):
    """`view(-1)` needs x's transposed layout; `w` reaches the backward through nodes x does not reach."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 4))

    def forward(self, x):
        z = (x * self.w.t()).add(1).transpose(0, 1).view(-1)
        return (z * z).sum() + self.w.sin().sum()


def _runs_whole_on_fakes(gm, values, recorded_strides: bool) -> bool:
    """The check as it was before it ran only what a changed input reaches: every node, under fake tensors."""
    from bwd_widgets.core.compat import FakeTensorMode
    from bwd_widgets.graphnet import files as graphnet_files

    with FakeTensorMode(allow_non_fake_inputs=True):
        try:
            torch.fx.Interpreter(gm).run(*graphnet_files.fake_inputs(values, recorded_strides))
        except Exception:  # noqa: BLE001 - as the package's check did: any failure means it cannot tell
            return False
    return True


def _ran_on_contiguous_fakes(gm, values) -> list:
    """The nodes the layout check runs when the inputs are contiguous (the rest stand in)."""
    from bwd_widgets.core.compat import FakeTensorMode
    from bwd_widgets.graphnet import files as graphnet_files

    placeholders = gm.graph.find_nodes(op="placeholder")
    changed = {n for n, v in zip(placeholders, values) if isinstance(v, torch.Tensor) and not v.is_contiguous()}
    run = graphnet_files._LayoutRun(gm, changed, until_recorded=True)
    with FakeTensorMode(allow_non_fake_inputs=True):
        try:
            run.run(*graphnet_files.fake_inputs(values, recorded_strides=False))
        except Exception:  # noqa: BLE001 - the view that needs the recorded layout: the last node run
            pass
    return run.ran


def test_the_layout_check_runs_only_what_a_non_contiguous_input_changes_and_decides_as_a_whole_run():
    """The check GraphNet's contiguous loaders need runs the nodes a non-contiguous input reaches, until a node's
    output comes out as torch recorded it; the rest stand in with their recorded values. On each graph, contiguous
    and in its recorded strides, it answers as running every node does."""
    from bwd_widgets.graphnet import files as graphnet_files

    x = torch.randn(6, 4).t()  # (4, 6) in a transposed layout, which the model's view needs
    partition = bw.extract(_TransposedView(), x, partitioner="min_cut", memory_budget=0.0).partitions[0]
    answers = []
    for gm, values in ((partition.forward, partition.forward_inputs), (partition.backward, partition.backward_inputs)):
        ran = _ran_on_contiguous_fakes(gm, values)
        assert ran and all("sin" not in str(n.target) for n in ran), "w.sin() is not reached by x"
        assert ran[-1].target is torch.ops.aten.view.default, "the run stops at the view that needs x's layout"
        for recorded in (False, True):
            answers.append(graphnet_files._runs_on(gm, values, recorded))
            assert answers[-1] == _runs_whole_on_fakes(gm, values, recorded)
    assert answers == [False, True, False, True]  # each graph needs the recorded layout, and runs in it


def test_the_layout_check_stops_where_an_op_makes_a_fresh_layout():
    """A transposed weight into `mm` (resnet18's classifier in backward): mm's output is laid out as recorded,
    so nothing after it runs, and the graph is shown to run on contiguous inputs."""
    from bwd_widgets.graphnet import files as graphnet_files

    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4), nn.ReLU(), nn.Linear(4, 2))
    partition = bw.extract(model, torch.randn(3, 8)).partitions[0]
    gm, values = partition.backward, partition.backward_inputs
    assert any(isinstance(v, torch.Tensor) and not v.is_contiguous() for v in values), "a saved weight transpose"
    ran = _ran_on_contiguous_fakes(gm, values)
    ops = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert 0 < len(ran) < len(ops) / 2, (len(ran), len(ops))
    assert graphnet_files._runs_on(gm, values, recorded_strides=False) is True
    assert graphnet_files._layout_matters(gm, values) is False
