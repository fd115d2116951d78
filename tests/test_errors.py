"""Each user mistake gives one typed, one-sentence error."""

import pytest
import torch
from torch import nn

import bwd_widgets as bw

from models import MLP


def _one_sentence(error):
    text = str(error.value)
    assert "\n" not in text and "Traceback" not in text and len(text) < 300
    return text


def test_nothing_requires_grad():
    with pytest.raises(bw.NothingRequiresGradError) as error:
        bw.extract(lambda x: x * 2, torch.arange(4))
    assert "requires grad" in _one_sentence(error)


def test_nothing_requires_grad_in_a_sample_names_graphnets_rule(tmp_path):
    (tmp_path / "model.py").write_text(
        "import torch\n\nclass GraphModule(torch.nn.Module):\n"
        "    def forward(self, attention_mask, ids):\n        return (attention_mask * ids).sum()\n"
    )
    (tmp_path / "weight_meta.py").write_text(
        "class Program_weight_tensor_meta_attention_mask:\n    name = 'attention_mask'\n    shape = [4]\n"
        "    dtype = 'torch.float32'\n    device = 'cpu'\n    mean = 1.0\n    std = 0.0\n\n"
        "class Program_weight_tensor_meta_ids:\n    name = 'ids'\n    shape = [4]\n    dtype = 'torch.int64'\n"
        "    device = 'cpu'\n    mean = None\n    std = None\n    data = [1, 2, 3, 4]\n"
    )
    with pytest.raises(bw.NothingRequiresGradError) as error:
        bw.extract(bw.load_graphnet_sample(tmp_path))
    text = _one_sentence(error)
    assert "GraphNet's rule" in text and "mask" in text and "requires_grad=" in text


def test_no_differentiable_output():
    with pytest.raises(bw.NoDifferentiableOutputError) as error:
        bw.extract(lambda x: (x > 0).sum(), torch.randn(4))
    assert "differentiable" in _one_sentence(error)


def test_unknown_partitioner():
    with pytest.raises(bw.PartitionerError) as error:
        bw.extract(MLP(), torch.randn(2, 16), partitioner="greedy")
    assert "greedy" in _one_sentence(error)


@pytest.mark.parametrize("budget", [-0.1, 1.5, "half"])
def test_budget_outside_range(budget):
    with pytest.raises(bw.PartitionerError) as error:
        bw.extract(MLP(), torch.randn(2, 16), partitioner="min_cut", memory_budget=budget)
    assert "[0, 1]" in _one_sentence(error)


def test_unknown_mode():
    with pytest.raises(bw.BwdWidgetsError) as error:
        bw.extract(MLP(), torch.randn(2, 16), mode="imaginary")
    assert "mode" in _one_sentence(error)


def test_sample_missing_files(tmp_path):
    with pytest.raises(bw.SampleError) as error:
        bw.load_graphnet_sample(tmp_path)
    assert "model.py" in _one_sentence(error)
    (tmp_path / "model.py").write_text("import torch\n")
    with pytest.raises(bw.SampleError) as error:
        bw.load_graphnet_sample(tmp_path)
    assert "weight_meta.py" in _one_sentence(error)
    with pytest.raises(bw.SampleError):
        bw.load_graphnet_sample(tmp_path / "nowhere")


def test_sample_code_fails_to_import(tmp_path):
    (tmp_path / "model.py").write_text("import torch\nimport not_a_module_anywhere\n")
    (tmp_path / "weight_meta.py").write_text("")
    with pytest.raises(bw.SampleError) as error:
        bw.load_graphnet_sample(tmp_path)
    assert "could not be imported" in _one_sentence(error)


def test_torch_failure_is_one_line():
    class Broken(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(x) @ torch.ones(5, 5)

    with pytest.raises(bw.ExtractionFailed) as error:
        bw.extract(Broken(), torch.randn(2, 4))
    _one_sentence(error)
