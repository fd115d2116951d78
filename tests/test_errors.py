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


@pytest.fixture(scope="module")
def results():
    """Each kind of result bw.show takes, made from one extraction."""
    torch.manual_seed(0)
    x = torch.randn(2, 8)
    g = bw.extract(MLP(width=8, depth=2), x)
    made = {
        "extraction": g,
        "comparison": bw.compare(g, partitioners=["default", 0.5]),
        "sweep": bw.sweep(g, budgets=[0.5, 1.0], progress=False),
    }
    return x, made


PASSED_A_RESULT = {
    "bw.extract(result, x)": lambda result, x: bw.extract(result, x),
    "bw.advise(result, x)": lambda result, x: bw.advise(result, x, target="1KB", progress=False),
    "bw.show(result, x)": lambda result, x: bw.show(result, x),
    "bw.show(result, mode=...)": lambda result, x: bw.show(result, mode="fake"),
}


@pytest.mark.parametrize("call", PASSED_A_RESULT)
@pytest.mark.parametrize("kind", ["extraction", "comparison", "sweep"])
def test_a_result_passed_as_the_model_or_shown_with_inputs_is_one_sentence(results, kind, call):
    x, made = results
    with pytest.raises(bw.CallError) as error:
        PASSED_A_RESULT[call](made[kind], x)
    text = _one_sentence(error)
    if call.startswith("bw.show"):
        assert "would be ignored" in text and type(made[kind]).__name__ in text
    else:
        assert "expected a model" in text
        assert kind != "extraction" or "bw.show(g)" in text
