"""Issue 44, item 19: the device a user names (`device` of the GraphNet sample pass, `bwd-extract --device`,
`extract_many(device=...)`) is kept, as GraphNet's own pass keeps `cpu` and `cuda`, and passed on to the worker,
which points the sample's `cuda` device strings at it. Nothing here runs on those devices: the tests read what
is passed on and written, and extract in fake mode, which builds no tensor on the device."""

import json

import pytest
import torch

import bwd_widgets as bw
import bwd_widgets.batch.sample_pass as sample_pass
from bwd_widgets.batch import plan
from bwd_widgets.batch.summary import BatchSummary
from bwd_widgets.batch.transport import make_request
from bwd_widgets.core.errors import BatchError, SampleError, SamplePassError
from bwd_widgets.graphnet.sample import map_device_strings

from _batch_util import summary_of, tiny_sample

DEVICES = ["cuda:1", "cuda:0", "xpu", "mps", "cpu"]

RECORDED_ON_A_GPU = """import torch
from torch import device

HOME = device(type='cuda', index=0)
NAMED = 'cuda:0'
PLAIN = device(type="cuda")


class GraphModule(torch.nn.Module):
    def forward(self, w_0: torch.Tensor, in_0: torch.Tensor):
        return (torch.nn.functional.linear(in_0, w_0).relu(),)
"""


def _gpu_sample(folder):
    """A tiny sample whose model.py names the GPU it was recorded on, as GraphNet samples do (`cuda:0`)."""
    tiny_sample(folder)
    (folder / "model.py").write_text(RECORDED_ON_A_GPU)
    return folder


@pytest.mark.parametrize("device", DEVICES)
def test_the_sample_pass_keeps_the_device_it_is_given_and_passes_it_to_the_worker(tmp_path, monkeypatch, device):
    _gpu_sample(tmp_path / "samples" / "net")
    batches = []

    def run(batch, **options):
        batches.append(batch)
        return BatchSummary(batch.out, batch.settings, [{"name": "net", "status": "skipped"}])

    monkeypatch.setattr(sample_pass, "run", run)
    config = {"model_path_prefix": str(tmp_path / "samples"), "output_dir": str(tmp_path / "out"), "device": device}
    sample_pass.BackwardGraphExtractorPass(config)("net")
    (batch,) = batches
    assert batch.device == device
    assert make_request(batch, batch.jobs[0])["device"] == device, "what the worker is sent"


@pytest.mark.parametrize("device", DEVICES)
def test_the_worker_points_the_samples_device_strings_at_the_named_device(tmp_path, device):
    sample = bw.load_graphnet_sample(_gpu_sample(tmp_path / "net"), device=device)
    assert sample.device == device
    names = type(sample.module).forward.__globals__  # the module's model.py, as it was run
    named = torch.device(device)
    assert names["HOME"] == named and names["PLAIN"] == named and names["NAMED"] == device
    code = map_device_strings(RECORDED_ON_A_GPU, device)
    assert "cuda" not in code or device.startswith("cuda")
    if named.index is not None:
        assert f"device(type='{named.type}', index={named.index})" in code


@pytest.mark.parametrize("device", DEVICES)
def test_the_sample_pass_extracts_and_writes_in_fake_mode_on_any_named_device(tmp_path, device):
    """Fake mode builds nothing on the device: the pass runs end to end and writes every split."""
    _gpu_sample(tmp_path / "samples" / "net")
    out = tmp_path / "out"
    config = {"model_path_prefix": str(tmp_path / "samples"), "output_dir": str(out), "device": device, "mode": "fake"}
    sample_pass.BackwardGraphExtractorPass(config)("net")
    (record,) = summary_of(out)["samples"]
    assert record["status"] == "ok", record
    for split in ("train_forward", "train_backward"):
        assert (out / split / "net" / f"net_{split}" / "model.py").is_file()
    assert (out / "eval_forward" / "net" / "model.py").read_text() == RECORDED_ON_A_GPU, "the input, copied"


@pytest.mark.parametrize("device", DEVICES)
def test_extract_many_and_the_plan_keep_the_named_device(tmp_path, device):
    sample = tiny_sample(tmp_path / "samples" / "net")
    batch = plan([sample], tmp_path / "out", device=device)
    assert batch.device == device and make_request(batch, batch.jobs[0])["device"] == device


def test_auto_is_graphnets_choice_cuda_where_torch_sees_one_else_cpu(tmp_path, monkeypatch):
    config = {"model_path_prefix": str(tmp_path), "output_dir": str(tmp_path / "out")}
    for available, expected in ((False, "cpu"), (True, "cuda")):
        monkeypatch.setattr(torch.cuda, "is_available", lambda available=available: available)
        assert sample_pass.BackwardGraphExtractorPass({**config, "device": "auto"}).device == expected
        assert sample_pass.BackwardGraphExtractorPass(config).device == expected, "auto is the default"


@pytest.mark.parametrize("device", ["gpu", "cuda:x", "", 3])
def test_a_device_torch_does_not_know_is_one_sentence(tmp_path, device):
    config = {"model_path_prefix": str(tmp_path), "output_dir": str(tmp_path / "out"), "device": device}
    with pytest.raises(SamplePassError) as error:
        sample_pass.BackwardGraphExtractorPass(config)
    text = str(error.value)
    assert "\n" not in text and f"device {device!r}" in text and "'cuda:1'" in text
    with pytest.raises(BatchError) as error:
        plan([tiny_sample(tmp_path / "samples" / "net")], tmp_path / "out", device=device)
    assert "\n" not in str(error.value) and f"device {device!r}" in str(error.value)
    if isinstance(device, str):
        with pytest.raises(SampleError) as error:
            bw.load_graphnet_sample(tmp_path / "samples" / "net", device=device)
        assert f"device {device!r}" in str(error.value)


def test_bwd_extract_passes_its_device_on(tmp_path, capsys):
    from bwd_widgets.cli import main as bwd_extract

    sample = _gpu_sample(tmp_path / "samples" / "net")
    out = tmp_path / "out"
    assert bwd_extract([str(sample), "--out", str(out), "--device", "cuda:1", "--mode", "fake", "--workers", "1"]) == 0
    assert json.loads((out / "summary.json").read_text())["samples"][0]["status"] == "ok"
    assert bwd_extract([str(sample), "--out", str(out), "--device", "gpu"]) == 2
    assert "device 'gpu'" in capsys.readouterr().err
