import importlib.util
import json
from pathlib import Path

import pytest
import torch

import bwd_widgets as bw
import bwd_widgets.graphnet.writer as graphnet_writer

from _batch_util import run_written_sample


def test_save_and_reload_reference(conv_bn_dir, tmp_path):
    extraction = bw.extract(bw.load_graphnet_sample(conv_bn_dir))
    written = extraction.save_graphnet(tmp_path, "conv_bn")
    assert set(written) == {"train_forward", "train_backward"}
    for split, gm in (("train_forward", extraction.forward), ("train_backward", extraction.backward)):
        folder = tmp_path / split / "conv_bn" / f"conv_bn_{split}"  # GraphNet's extractor nests it so
        assert written[split] == folder
        assert sorted(p.name for p in folder.iterdir()) == [
            "graph_net.json",
            "input_meta.py",
            "input_tensor_constraints.py",
            "model.py",
            "weight_meta.py",
        ]
        info = json.loads((folder / "graph_net.json").read_text())
        assert info["framework"] == "torch" and info["model_name"] == f"conv_bn_{split}"
        run_written_sample(folder, gm)
    backward = bw.load_graphnet_sample(written["train_backward"])
    assert [m.name for m in backward.metas][:2] == ["primals_1", "primals_2"]
    assert backward.metas[0].original_name == "bn.running_mean"
    assert not list(tmp_path.glob(".bwd_widgets_tmp_*"))


def test_interrupted_write_leaves_no_partial_sample(conv_bn_dir, tmp_path, monkeypatch):
    extraction = bw.extract(bw.load_graphnet_sample(conv_bn_dir))
    real_write = graphnet_writer.write_sample
    calls = []

    def failing_write(directory, *args, **kwargs):
        calls.append(directory)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_write(directory, *args, **kwargs)

    monkeypatch.setattr(graphnet_writer, "write_sample", failing_write)
    with pytest.raises(KeyboardInterrupt):
        extraction.save_graphnet(tmp_path, "conv_bn")
    assert list(tmp_path.iterdir()) == []


def test_loader_handles_device_strings_missing_data_and_index_ranges(tmp_path):
    (tmp_path / "model.py").write_text(
        "import torch\nfrom torch import device\n\n"
        "class GraphModule(torch.nn.Module):\n"
        "    def forward(self, ids, table, pos):\n"
        "        e = torch.nn.functional.embedding(ids, table)\n"
        "        p = torch.arange(4, device=device(type='cuda', index=0))\n"
        "        return (e.sum() + p.sum() + pos.sum(),)\n"
    )
    (tmp_path / "weight_meta.py").write_text(
        "class Program_weight_tensor_meta_ids:\n    name = 'ids'\n    shape = [64]\n    dtype = 'torch.int64'\n"
        "    device = 'cuda:0'\n    mean = None\n    std = None\n    min_val = 0\n    max_val = 1000\n\n"
        "class Program_weight_tensor_meta_table:\n    name = 'table'\n    shape = [7, 3]\n    dtype = 'torch.float32'\n"
        "    device = 'cuda:0'\n    mean = 0.5\n    std = 0.1\n\n"
        "class Program_weight_tensor_meta_pos:\n    name = 'pos'\n    shape = [3]\n    dtype = 'torch.int64'\n"
        "    device = 'cuda:0'\n    mean = None\n    std = None\n    data = [4, 5, 6]\n"
    )
    sample = bw.load_graphnet_sample(tmp_path)
    ids, table, pos = sample.inputs
    assert ids.min() >= 0 and ids.max() < 7, "indices must stay inside the embedding table"
    assert table.device.type == "cpu" and abs(float(table.mean()) - 0.5) < 0.1
    assert pos.tolist() == [4, 5, 6]
    sample.module(*sample.inputs)


def test_constant_tensors_are_written_by_value_not_inlined(tmp_path):
    """An all-ones tangent of a big output is one number, not megabytes of `1.0`, and reloads exactly."""
    ones = torch.ones(8, 64, 32, 32)
    third = torch.full((100,), 1 / 3)
    graphnet_writer.write_sample(
        tmp_path, "import torch\n", ["tangents_1", "third", "noise"], [ones, third, torch.randn(100)], {}, {}
    )
    text = (tmp_path / "weight_meta.py").read_text()
    assert len(text) < 2000, "a constant tensor must not be written element by element"
    (tmp_path / "model.py").write_text(
        "import torch\n\nclass GraphModule(torch.nn.Module):\n"
        "    def forward(self, tangents_1, third, noise):\n        return (tangents_1 * third.sum() + noise.sum(),)\n"
    )
    tangents, reloaded_third, _ = bw.load_graphnet_sample(tmp_path).inputs
    assert torch.equal(tangents, ones) and torch.equal(reloaded_third, third)


def test_graphs_are_written_so_graphnet_tools_run_them():
    """GraphNet's loaders build inputs contiguous and its runner takes argmin of the first output."""

    def layout_bound(x):
        return (x.add(1).transpose(0, 1).view(-1),)  # the view needs x's transposed layout

    gm = torch.fx.symbolic_trace(layout_bound)
    x = torch.randn(4, 3).t()
    with pytest.raises(RuntimeError):
        gm(x.contiguous())
    rewritten, changes = graphnet_writer.for_graphnet_tools(gm, [x])
    assert changes == ["x is copied into its recorded strides [1, 3]"]
    assert torch.equal(rewritten(x.contiguous())[0], gm(x)[0])
    assert graphnet_writer.for_graphnet_tools(gm, [x.contiguous()]) == (gm, [])  # nothing to do: unchanged

    def mask_first(x):
        return (x > 0, x * 2)

    gm = torch.fx.symbolic_trace(mask_first)
    torch.fx.passes.shape_prop.ShapeProp(gm).propagate(torch.randn(3))
    for node in gm.graph.nodes:
        if node.op != "output":  # values as AOT Autograd leaves them on its nodes
            node.meta["val"] = torch.empty(node.meta["tensor_meta"].shape, dtype=node.meta["tensor_meta"].dtype)
    rewritten, changes = graphnet_writer.for_graphnet_tools(gm, [torch.randn(3)])
    assert changes == ["outputs 0 and 1 trade places: the first output is a boolean tensor"]
    first = rewritten(torch.tensor([1.0, -1.0, 2.0]))[0]
    assert first.dtype == torch.float32 and torch.argmin(first) == 1


def test_the_sample_pass_file_loads_by_its_path_as_graphnets_driver_loads_it():
    """GraphNet's driver imports batch/sample_pass.py from its path, outside our package: a relative import fails there."""
    path = Path(bw.__file__).parent / "batch" / "sample_pass.py"
    spec = importlib.util.spec_from_file_location("sample_pass_by_path", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(bw.SamplePassError, match="needs model_path_prefix"):
        module.BackwardGraphExtractorPass({"output_dir": "out"})
