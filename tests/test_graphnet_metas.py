"""Metas GraphNet's own loaders can use, and metas we refuse to read, each in one sentence."""

import json
import subprocess
import sys

import torch
from torch import nn

import bwd_widgets as bw

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
    assert "stride = [1, 4]" in (backward / "weight_meta.py").read_text()
    result = _run_under_graphnets_loader(*written.values())
    assert result.returncode == 0, result.stderr[-2000:]
    for folder in written.values():
        marker = json.loads((folder / "graph_net.json").read_text())["bwd_widgets"]
        assert marker["rewritten_for_graphnet"] == ["primals_2 is copied into its recorded strides [1, 4]"]
        sample = bw.load_graphnet_sample(folder)
        sample.module(*sample.inputs)
