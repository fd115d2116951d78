"""Helpers the batch, CLI, GraphNet and corpus tests share (test files never import one another)."""

import hashlib
import json
import os
import re
from pathlib import Path

import torch

import bwd_widgets as bw

MODEL = """import torch
{prelude}

class GraphModule(torch.nn.Module):
    def forward(self, w_0: torch.Tensor, in_0: torch.Tensor):
        return (torch.nn.functional.linear(in_0, w_0).relu(),)
"""

META = """class Program_weight_tensor_meta_w_0:
    name = "w_0"
    shape = [4, 4]
    dtype = "torch.float32"
    device = "cpu"
    mean = 0.0
    std = 0.5
    data = None


class Program_weight_tensor_meta_in_0:
    name = "in_0"
    shape = [2, 4]
    dtype = "torch.float32"
    device = "cpu"
    mean = 0.0
    std = 1.0
    data = None
"""


def tiny_sample(folder: Path, prelude: str = "") -> Path:
    """A GraphNet sample of one linear layer; `prelude` runs when its model.py is imported."""
    folder.mkdir(parents=True)
    (folder / "model.py").write_text(MODEL.format(prelude=prelude))
    (folder / "weight_meta.py").write_text(META)
    (folder / "input_meta.py").write_text("")
    (folder / "graph_net.json").write_text(json.dumps({"framework": "torch", "model_name": folder.name}))
    return folder


def checksums(*folders: Path, skip: Path | None = None) -> dict[str, str]:
    """Every file and folder under `folders` (links not followed), with a checksum for files."""
    found = {}
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            if skip is not None and (path == skip or skip in path.parents):
                continue
            found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "folder"
    return found


def worker_processes() -> list[int]:
    """Worker processes that this test process started and left running."""
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text, command = status.read_text(), (status.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if f"PPid:\t{os.getpid()}\n" in text and b"batch import serve" in command:
            found.append(int(status.parent.name))
    return found


def summary_of(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def _outputs(gm):
    values = gm.graph.output_node().args[0]
    return [v.meta["val"] for v in (values if isinstance(values, (tuple, list)) else [values])]


def run_written_sample(folder, recorded_gm):
    """Reload a written sample and run it: outputs have the recorded shapes and dtypes (in the order written:
    a boolean first output trades places with another, as the sample's marker says)."""
    sample = bw.load_graphnet_sample(folder)
    with torch.no_grad():
        outputs = sample.module(*sample.inputs)
    outputs = outputs if isinstance(outputs, (tuple, list)) else [outputs]
    expected = _outputs(recorded_gm)
    marker = json.loads((folder / "graph_net.json").read_text())["bwd_widgets"]
    for change in marker.get("rewritten_for_graphnet", []):
        swapped = re.fullmatch(r"outputs 0 and (\d+) trade places: .*", change)
        if swapped:
            other = int(swapped.group(1))
            expected[0], expected[other] = expected[other], expected[0]
            assert outputs[0].dtype != torch.bool
    assert [tuple(o.shape) for o in outputs] == [tuple(e.shape) for e in expected]
    assert [o.dtype for o in outputs] == [e.dtype for e in expected]
    return sample
