"""What bwd_widgets predicts a GPU step holds, against what the GPU's allocator says it held.

Run where a GPU is: `python bench/gpu_prediction.py --out results.json`. For each model (the course models,
transformers' GPT-2 at a small size and at its real 124 M size, torchvision's resnet18, a cuDNN LSTM), on `cuda`:

- real mode: `bw.extract` and `g.measure()`, which runs the partition's graphs op by op as AOT Autograd's code
  does and reads `torch.cuda.max_memory_allocated`; the prediction (`g.memory_timeline()`, a liveness walk over
  the graphs' values) beside it, in storage bytes and in the allocator's blocks (`memory.allocator_block`);
- fake mode on the same GPU: the same extraction with no compute; its saved set and predicted peak against the
  real one's, and the attention op it chose (a GPU's fused kernel saves a log-sum-exp row, not seq x seq);
- `torch.compile(model, backend="aot_eager")` itself: a step's `max_memory_allocated` above what was allocated
  before it, and a pack hook's count of the bytes it saves, against the extraction's saved bytes.

Without a GPU it runs on the CPU (no allocator figures), which checks the script itself. Each model's figures are
written to `--out` as soon as they are made, so a run cut short keeps what it finished.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
import traceback
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
warnings.filterwarnings("ignore")

import bwd_widgets as bw  # noqa: E402
from bwd_widgets import examples  # noqa: E402
from bwd_widgets.core import memory  # noqa: E402

sys.path.insert(0, str(ROOT / "tests"))
from compiled_saves import counted_saves  # noqa: E402 - the tests' own count, one copy

ATTENTION_OPS = ("flash_attention", "efficient_attention", "cudnn_attention", "_softmax", "bmm")


def models(device: str, names: set[str] | None) -> list[tuple[str, torch.nn.Module, tuple, dict]]:
    """(name, model, positional inputs, keyword inputs), cheapest first; each made only if asked for."""
    made = []

    def want(name: str) -> bool:
        return names is None or name in names

    torch.manual_seed(0)
    if want("mlp"):
        made.append(("mlp", examples.MLP(width=256, depth=4), (torch.randn(64, 256),), {}))
    if want("course_transformer"):
        model = examples.Transformer(width=64, depth=2, heads=4, vocab=128)
        made.append(("course_transformer", model, (torch.randint(0, 128, (4, 32)),), {}))
    if want("gpt2_tiny") or want("gpt2_small"):
        import transformers

        if want("gpt2_tiny"):
            config = transformers.GPT2Config(
                n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=128, bos_token_id=0, eos_token_id=0
            )
            config.resid_pdrop = config.embd_pdrop = config.attn_pdrop = 0.0
            config._attn_implementation = "sdpa"
            ids = torch.randint(0, 1000, (2, 64))
            made.append(("gpt2_tiny", transformers.GPT2LMHeadModel(config), (), {"input_ids": ids, "labels": ids}))
    if want("resnet18") and importlib.util.find_spec("torchvision"):
        import torchvision

        made.append(("resnet18", torchvision.models.resnet18(num_classes=10), (torch.randn(8, 3, 64, 64),), {}))
    if want("lstm"):
        made.append(("lstm", torch.nn.LSTM(64, 128, num_layers=2, batch_first=True), (torch.randn(4, 16, 64),), {}))
    if want("gpt2_small"):
        import transformers

        config = transformers.GPT2Config()  # GPT-2 small: 12 blocks, width 768, 124 M parameters, dropout 0.1
        config._attn_implementation = "sdpa"
        ids = torch.randint(0, config.vocab_size, (4, 256))
        made.append(("gpt2_small", transformers.GPT2LMHeadModel(config), (), {"input_ids": ids, "labels": ids}))
    out = []
    for name, model, args, kwargs in made:
        model.to(device).train()
        out.append((name, model, tuple(a.to(device) for a in args), {k: v.to(device) for k, v in kwargs.items()}))
    return out


def block_timeline_peak(partitions) -> int:
    """The prediction's peak with each storage counted as the CUDA allocator's block for it."""
    return max((s["live_bytes"] for s in memory.timeline(partitions, memory.allocator_block)), default=0)


def saved_set(g) -> list[list]:
    return sorted([s.name, list(s.shape), str(s.dtype), s.bytes] for s in g.saved_tensors)


def attention_ops(g) -> list[str]:
    code = g.forward_code
    return sorted({op for op in ATTENTION_OPS if op in code})


def first_value(out: object) -> torch.Tensor:
    """The tensor a step's backward starts from: the loss when the output holds one, else the output."""
    loss = getattr(out, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    if isinstance(out, tuple):
        return out[0]
    return out  # type: ignore[return-value]


def compiled_step(model, args, kwargs, device: str) -> dict:
    """`torch.compile(model, backend="aot_eager")` itself: the bytes its pack hook sees saved (the tests' own count,
    tests/compiled_saves.py) and, on CUDA, a warm step's allocator peak above what was allocated before it (the
    model, its inputs, the tangent; its gradients cleared first, so they are allocated inside the step)."""
    result: dict = {"pack_hook_saved_bytes": counted_saves(model, args, kwargs).bytes}
    if not device.startswith("cuda"):
        return result
    compiled = torch.compile(model, backend="aot_eager")
    params = [p for p in model.parameters() if p.requires_grad]
    for repeat in range(3):
        for p in params:
            p.grad = None
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        out = compiled(*args, **kwargs)
        top = first_value(out)
        top.backward(torch.ones_like(top) if top.dim() else None)
        del out, top
        torch.cuda.synchronize()
        result[f"allocator_peak_bytes_{repeat}"] = torch.cuda.max_memory_allocated() - base
    result["allocated_before"] = base
    for p in params:
        p.grad = None
    torch._dynamo.reset()
    return result


def snapshot_sizes(snapshot: dict | None) -> dict:
    """Requested against block sizes as the allocator recorded them: the rounding, read from torch."""
    if not snapshot:
        return {}
    pairs = set()
    for segment in snapshot.get("segments", []):
        for block in segment.get("blocks", []):
            if block.get("requested_size"):
                pairs.add((int(block["requested_size"]), int(block["size"])))
    mismatched = sorted([r, s, memory.allocator_block(r)] for r, s in pairs if memory.allocator_block(r) != s)
    return {"blocks_read": len(pairs), "rounding_mismatches": mismatched[:50]}


def run_model(name, model, args, kwargs, device: str) -> dict:
    row: dict = {"model": name, "parameters": sum(p.numel() for p in model.parameters())}
    t0 = time.perf_counter()
    real = bw.extract(model, *args, partitioner="min_cut", cache=False, **kwargs)
    row["real_extract_s"] = round(time.perf_counter() - t0, 2)
    row["real_saved"] = saved_set(real)
    row["real_saved_bytes"] = real.saved_activation_bytes
    row["real_attention_ops"] = attention_ops(real)
    row["predicted_peak_bytes"] = real.peak_activation_bytes
    row["predicted_peak_blocks"] = block_timeline_peak(real.partitions)
    t0 = time.perf_counter()
    measured = real.measure()
    row["measure_s"] = round(time.perf_counter() - t0, 2)
    row["measured_curve_peak_bytes"] = max((p["live_bytes"] for p in measured.curve), default=0)
    row["measured_allocator_peak_bytes"] = measured.allocator_peak_bytes
    row["measure_predicted_peak_bytes"] = measured.predicted_peak_bytes
    row["snapshot"] = snapshot_sizes(measured.cuda_snapshot)
    del measured
    t0 = time.perf_counter()
    fake = bw.extract(model, *args, partitioner="min_cut", mode="fake", cache=False, **kwargs)
    row["fake_extract_s"] = round(time.perf_counter() - t0, 2)
    row["fake_saved_equal"] = saved_set(fake) == row["real_saved"]
    row["fake_saved_bytes"] = fake.saved_activation_bytes
    row["fake_attention_ops"] = attention_ops(fake)
    row["fake_predicted_peak_bytes"] = fake.peak_activation_bytes
    row["fake_predicted_peak_blocks"] = block_timeline_peak(fake.partitions)
    if not row["fake_saved_equal"]:
        row["fake_saved"] = saved_set(fake)
    del fake, real
    row["compiled"] = compiled_step(model, args, kwargs, device)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="JSON file the figures go to, rewritten after each model")
    parser.add_argument("--models", help="comma-separated names (default: all)")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    names = set(args.models.split(",")) if args.models else None
    report: dict = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "rows": [],
    }
    for name, model, inputs, kwargs in models(device, names):
        t0 = time.perf_counter()
        try:
            row = run_model(name, model, inputs, kwargs, device)
        except Exception as error:  # noqa: BLE001 - one model's failure is a figure too; the rest still run
            row = {"model": name, "error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()}
        row["seconds"] = round(time.perf_counter() - t0, 1)
        report["rows"].append(row)
        shown = {k: v for k, v in row.items() if k not in ("real_saved", "fake_saved", "traceback")}
        print(json.dumps(shown), flush=True)
        if "traceback" in row:
            print(row["traceback"], flush=True)
        if args.out:
            args.out.write_text(json.dumps(report, indent=1))
        del model
        if device == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
