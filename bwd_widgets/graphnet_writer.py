"""Write GraphNet samples (`model.py`, `weight_meta.py`, `input_meta.py`, `graph_net.json`) of an extraction."""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import tempfile
from pathlib import Path

import torch

INLINE_DATA_LIMIT = 4096
INLINE_FLOAT_LIMIT = 64


def _literal(value) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return f"float('{value}')"
    return repr(value)


def _list_literal(values) -> str:
    return "[" + ", ".join(_literal(v) for v in values) + "]"


def meta_class(name: str, value, original_name: str | None = None) -> str:
    """One `Program_weight_tensor_meta_<name>` class for a real or fake value."""
    lines = [f"class Program_weight_tensor_meta_{name}:", f'    name = "{name}"']
    if original_name and original_name != name:
        lines.append(f"    original_name = {original_name!r}")
    if isinstance(value, torch.Tensor):
        fake = _is_fake(value)
        lines += [
            f"    shape = {list(int(s) for s in value.shape)}",
            f'    dtype = "{value.dtype}"',
            '    device = "cpu"',
        ]
        if not value.is_contiguous() and value.numel():
            lines.append(f"    stride = {list(value.stride())}")
        flat = None if fake else value.detach().cpu().reshape(-1)
        mean = std = data = None
        extra = []
        if flat is not None and flat.numel():
            if value.is_floating_point():
                as_float = flat.double()
                mean = round(float(as_float.mean()), 6)
                std = round(float(as_float.std()), 6) if flat.numel() > 1 else 0.0
                if flat.numel() <= INLINE_FLOAT_LIMIT or std == 0.0:
                    data = flat.tolist()
            elif not value.is_complex():
                if flat.numel() <= INLINE_DATA_LIMIT:
                    data = flat.tolist()
                extra = [f"    min_val = {_literal(flat.min().item())}", f"    max_val = {_literal(flat.max().item())}"]
        lines += [f"    mean = {_literal(mean)}", f"    std = {_literal(std)}"]
        lines.append(f"    data = {_list_literal(data) if data is not None else None}")
        lines += extra
    else:
        lines += [
            "    shape = []",
            '    dtype = "torch.int64"',
            '    device = "cpu"',
            "    mean = None",
            "    std = None",
        ]
        lines.append(f"    data = [{int(value)}]" if isinstance(value, int) else "    data = None")
    return "\n".join(lines) + "\n"


def _is_fake(tensor) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(tensor, FakeTensor) or tensor.device.type == "meta"


def write_sample(directory: Path, code: str, names: list, values: list, original_names: dict, info: dict) -> None:
    """Write one sample folder; `graph_net.json` last, as GraphNet's completion marker."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "model.py").write_text(code)
    metas = "\n\n".join(meta_class(n, v, original_names.get(n)) for n, v in zip(names, values))
    (directory / "weight_meta.py").write_text(metas)
    (directory / "input_meta.py").write_text("")
    (directory / "graph_hash.txt").write_text(hashlib.sha256(code.encode()).hexdigest())
    (directory / "graph_net.json").write_text(json.dumps(info, indent=4) + "\n")


def _placeholder_values(gm, real_values):
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    names = [n.name for n in placeholders]
    if real_values is not None and len(real_values) == len(placeholders):
        return names, list(real_values)
    return names, [n.meta.get("val") for n in placeholders]


def save_extraction(extraction, out_dir, name: str) -> dict:
    """Write train_forward/<name> and train_backward/<name>, atomically.

    Everything is written under a temporary folder inside out_dir and renamed
    into place at the end: an interruption leaves no partial sample.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".bwd_widgets_tmp_", dir=out_dir))
    try:
        written = {}
        for split in ("train_forward", "train_backward"):
            for partition in extraction.partitions:
                relative = Path(name) if len(extraction.partitions) == 1 else Path(name) / f"subgraph_{partition.index}"
                if split == "train_forward":
                    gm, code, real = partition.forward, partition.forward_code, partition.forward_inputs
                else:
                    gm, code, real = partition.backward, partition.backward_code, partition.backward_inputs
                names, values = _placeholder_values(gm, real)
                originals = {f"primals_{i + 1}": source.name for i, source in enumerate(partition.inputs)}
                info = {
                    "framework": "torch",
                    "num_devices_required": 1,
                    "num_nodes_required": 1,
                    "dynamic": False,
                    "model_name": f"{Path(name).name}_{split}",
                    "source": "bwd_widgets",
                    "partitioner": extraction.partitioner,
                    "memory_budget": extraction.memory_budget,
                    "extraction_mode": extraction.mode,
                }
                write_sample(staging / split / relative, code, names, values, originals, info)
            written[split] = out_dir / split / name
        for split, final in written.items():
            final.parent.mkdir(parents=True, exist_ok=True)
            if final.exists():
                shutil.rmtree(final)
            (staging / split / name).rename(final)
        return written
    finally:
        shutil.rmtree(staging, ignore_errors=True)
