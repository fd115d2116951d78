"""Issue 44, items 15 and 16: what building a sample's inputs takes, and shapes no device can hold.

15: the memory guard counts what building every tensor allocates (a bool or floating tensor's float32 draw
beside it, the tensors built before it) and refuses the sample before anything is built.
16: a shape whose element count (or byte count) passes int64 is refused when read, in both modes, in one sentence
naming the input and its shape.
"""

import json
import subprocess
import sys

import pytest
import torch

import bwd_widgets as bw
import bwd_widgets.graphnet.sample as sample_module
from bwd_widgets.core.errors import BwdWidgetsError, SampleMemoryError, TensorTooLargeError
from bwd_widgets.graphnet.sample import TensorMeta, build_bytes, build_tensor, check_build_memory

MiB = 2**20


def _meta_class(name: str, shape: list, dtype: str) -> str:
    return (
        f"class Program_weight_tensor_meta_{name}:\n    name = {name!r}\n    shape = {shape}\n"
        f"    dtype = {dtype!r}\n    device = 'cpu'\n    mean = 0.0\n    std = 1.0\n    data = None\n\n\n"
    )


def _sample(folder, weights: dict, inputs: dict | None = None):
    """A GraphNet sample whose forward sums every argument; `weights` and `inputs`: name -> (shape, dtype)."""
    inputs = inputs if inputs is not None else {"x": ([4], "torch.float32")}
    names = [*weights, *inputs]
    folder.mkdir(parents=True)
    (folder / "model.py").write_text(
        "import torch\n\n\nclass GraphModule(torch.nn.Module):\n"
        f"    def forward(self, {', '.join(names)}):\n"
        f"        return sum(t.float().sum() for t in ({', '.join(names)},))\n"
    )
    (folder / "weight_meta.py").write_text("".join(_meta_class(n, *weights[n]) for n in weights))
    (folder / "input_meta.py").write_text("".join(_meta_class(n, *inputs[n]) for n in inputs))
    (folder / "graph_net.json").write_text(json.dumps({"framework": "torch", "model_name": folder.name}))
    return folder


@pytest.fixture
def limit_20_mib(monkeypatch):
    monkeypatch.setattr(sample_module, "_memory_bytes", lambda: 20 * MiB)


def _one_sentence(error) -> str:
    text = str(error.value)
    assert "\n" not in text and "Traceback" not in text and len(text) < 300, text
    return text


def test_bool_weights_under_the_limit_whose_build_is_over_it_are_refused_before_anything_is_built(
    tmp_path, limit_20_mib
):
    """10 MB of bool weights under a 20 MiB limit: each is drawn as 40 MB of float32 first, so the build is not."""
    sample = bw.load_graphnet_sample(_sample(tmp_path / "masks", {"mask": ([10_000_000], "torch.bool")}))
    assert build_bytes(sample.metas[0]) == (10_000_000, 50_000_000)
    with pytest.raises(SampleMemoryError) as error:
        sample.inputs  # noqa: B018 - the property builds them
    text = _one_sentence(error)
    assert text.startswith("the inputs of masks would take about 48 MiB of memory to build (10 MiB kept"), text
    assert "float32" in text and "20 MiB" in text and "mode='fake'" in text
    with pytest.raises(SampleMemoryError):
        bw.extract(sample)  # real mode builds them; fake mode builds nothing
    assert bw.extract(sample, mode="fake").backward_node_count > 0


def test_tensors_each_under_the_limit_are_counted_together(tmp_path, limit_20_mib):
    """Two float32 weights of 12 MB each passed a 20 MiB limit one by one; together they keep 24 MB."""
    weights = {"w_0": ([3_000_000], "torch.float32"), "w_1": ([3_000_000], "torch.float32")}
    sample = bw.load_graphnet_sample(_sample(tmp_path / "two", weights))
    with pytest.raises(SampleMemoryError) as error:
        sample.inputs  # noqa: B018
    assert "about 34 MiB of memory to build (23 MiB kept" in _one_sentence(error)


def test_a_sample_whose_build_fits_is_built(tmp_path, limit_20_mib):
    sample = bw.load_graphnet_sample(_sample(tmp_path / "small", {"mask": ([1_000_000], "torch.bool")}))
    assert sample.inputs[0].dtype == torch.bool and sample.inputs[0].shape == (1_000_000,)


def test_build_tensor_alone_counts_its_float32_draw(limit_20_mib):
    meta = TensorMeta("mask", [5_000_000], "torch.bool")  # 5 MB kept, 25 MB while drawn
    with pytest.raises(SampleMemoryError) as error:
        build_tensor(meta, "cpu", torch.Generator())
    assert _one_sentence(error).startswith("mask would take about 24 MiB")


def test_another_device_keeps_nothing_here_but_its_draw_is_made_here():
    meta = TensorMeta("w", [1000], "torch.float16")
    assert build_bytes(meta, "cuda:1") == (0, 8000) and build_bytes(meta, "cpu") == (2000, 8000)
    check_build_memory("w", [meta], "cuda:1")  # nothing is built, nothing is refused


MEASURE = """
import json, sys
import torch
from bwd_widgets.graphnet.sample import TensorMeta, build_bytes, build_tensor

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024

meta = TensorMeta(**json.loads(sys.argv[1]))
generator = torch.Generator().manual_seed(0)
build_tensor(TensorMeta("warm", [16], meta.dtype, min_val=meta.min_val, max_val=meta.max_val), "cpu", generator)
with open("/proc/self/clear_refs", "w") as clear:
    clear.write("5")  # the peak resident size starts again from now
before = status("VmRSS")
tensor = build_tensor(meta, "cpu", generator)
print(json.dumps({"grew": status("VmHWM") - before, "estimate": build_bytes(meta)[1]}))
"""


@pytest.mark.parametrize(
    "dtype, extra",
    [
        ("torch.bool", {}),
        ("torch.float32", {"min_val": -1.0, "max_val": 1.0}),
        ("torch.float16", {}),
        ("torch.float64", {}),
        ("torch.int64", {"min_val": 0, "max_val": 9}),
    ],
)
def test_the_estimate_is_what_building_the_tensor_grows_the_process_by(dtype, extra):
    """In a fresh process, the peak memory `build_tensor` adds is the estimate, within 5%: a 0.40 GB guess for a
    bool tensor that grew the process by 2.00 GB is what the guard used to make."""
    meta = {"name": "w", "shape": [4_000_000], "dtype": dtype, **extra}
    done = subprocess.run([sys.executable, "-c", MEASURE, json.dumps(meta)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    measured = json.loads(done.stdout)
    assert measured["estimate"] == pytest.approx(measured["grew"], rel=0.05), measured


# --- item 16: shapes past int64 -----------------------------------------------------------------------------

HUGE = [2**32, 2**32]  # each size fits int64, their product (2**64 elements) does not


def test_a_shape_past_int64_in_input_meta_is_refused_when_the_sample_folder_is_read(tmp_path):
    folder = _sample(tmp_path / "huge", {"w": ([4], "torch.float32")}, {"x": (HUGE, "torch.float32")})
    with pytest.raises(TensorTooLargeError) as error:
        bw.load_graphnet_sample(folder)
    text = _one_sentence(error)
    assert text.startswith(f"input_meta.py: x has shape {HUGE}: its 18,446,744,073,709,551,616 elements are past int64")
    assert "no device can hold it" in text and "Storage size" not in text
    assert isinstance(error.value, BwdWidgetsError) and isinstance(error.value, ValueError)


def test_bytes_past_int64_are_refused_too(tmp_path):
    """2**61 float32 elements fit int64; their 2**63 bytes do not (torch's storage size would overflow)."""
    folder = _sample(tmp_path / "wide", {"w": ([2**61], "torch.float32")})
    with pytest.raises(TensorTooLargeError) as error:
        bw.load_graphnet_sample(folder)
    assert "9,223,372,036,854,775,808 bytes are past int64" in _one_sentence(error)


@pytest.mark.parametrize("mode", ["real", "fake"])
def test_a_shape_past_int64_is_one_sentence_in_real_and_fake_mode(tmp_path, mode):
    """A meta changed after the sample was read (or made by hand) is checked again before torch is asked: real
    mode used to advise fake mode, and fake mode failed with torch's 'Storage size calculation overflowed'."""
    sample = bw.load_graphnet_sample(_sample(tmp_path / "net", {"w": ([4], "torch.float32")}))
    sample.metas[-1].shape = HUGE
    with pytest.raises(TensorTooLargeError) as error:
        bw.extract(sample, mode=mode)
    text = _one_sentence(error)
    assert text.startswith(f"x has shape {HUGE}: its ") and "no device can hold it, in real or fake mode" in text
    assert "mode='fake'" not in text


def test_a_shape_past_int64_is_one_error_record_in_a_batch(tmp_path):
    folder = _sample(tmp_path / "samples" / "huge", {"w": ([4], "torch.float32")}, {"x": (HUGE, "torch.float32")})
    for mode in ("real", "fake"):
        summary = bw.extract_many([folder], tmp_path / f"out_{mode}", mode=mode, workers=1, progress=False)
        (record,) = summary.records
        assert record["status"] == "error" and "input_meta.py: x has shape" in record["reason"]
        assert "no device can hold it" in record["reason"] and "\n" not in record["reason"]
