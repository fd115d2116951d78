"""Read and write GraphNet samples (`model.py`, `weight_meta.py`, `input_meta.py`, `graph_net.json`)."""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import re
import shutil
import tempfile
import types
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .core.errors import SampleError
from .core.naming import parse_flat_name

_CUDA_STRING = re.compile(r"""(['"])cuda(?::\d+)?\1""")
_CUDA_DEVICE = re.compile(r"""device\(type=(['"])cuda\1(?:,\s*index=\d+)?\)""")
_EMBEDDING_CALL = re.compile(r"embedding\(\s*(\w+)\s*,\s*(\w+)")
INLINE_DATA_LIMIT = 4096
INLINE_FLOAT_LIMIT = 64


@dataclass
class TensorMeta:
    """One `Program_weight_tensor_meta_*` class, with GraphNet's optional fields."""

    name: str
    shape: list
    dtype: str
    device: str = "cpu"
    mean: float | None = None
    std: float | None = None
    data: list | None = None
    min_val: float | None = None
    max_val: float | None = None
    original_name: str | None = None
    stride: list | None = None  # only for non-contiguous tensors; GraphNet's own loader ignores it


@dataclass
class GraphNetSample:
    """A loaded sample: the module, built inputs, and what each argument is."""

    name: str
    path: Path
    module: torch.nn.Module
    inputs: list
    metas: list
    original_names: dict = field(default_factory=dict)  # argument -> original (Dynamo) name
    input_sources: dict = field(default_factory=dict)  # argument -> (kind, human name)

    def __repr__(self):
        return f"GraphNetSample(name={self.name!r}, inputs={len(self.inputs)}, path={str(self.path)!r})"


def map_device_strings(code: str, device: str) -> str:
    """Samples recorded on a GPU say `cuda:0`; point them at the device we run on."""
    code = _CUDA_DEVICE.sub(f"device(type='{device}')", code)
    return _CUDA_STRING.sub(lambda m: f"{m.group(1)}{device}{m.group(1)}", code)


def read_metas(path: Path) -> list:
    namespace = {}
    try:
        exec(compile(path.read_text(), str(path), "exec"), namespace)
    except Exception as error:
        raise SampleError(f"{path} could not be read: {type(error).__name__}: {error}") from None
    metas = []
    for value in namespace.values():
        if isinstance(value, type) and hasattr(value, "name") and hasattr(value, "shape"):
            fields = {k: getattr(value, k) for k in TensorMeta.__dataclass_fields__ if hasattr(value, k)}
            metas.append(TensorMeta(**fields))
    return metas


def load_graphnet_sample(path, device: str = "cpu", seed: int = 0) -> GraphNetSample:
    """Load a GraphNet sample folder and build inputs for every forward argument.

    Exact `data` where recorded, else random values with the recorded mean and
    std; integers inside `min_val`/`max_val` and the embedding tables they index;
    `cuda` device strings mapped to `device`.
    """
    path = Path(path)
    if not path.is_dir():
        raise SampleError(f"{path} is not a folder: pass a GraphNet sample folder holding model.py.")
    for required in ("model.py", "weight_meta.py"):
        if not (path / required).is_file():
            raise SampleError(f"{path} has no {required}: a GraphNet sample needs model.py and weight_meta.py.")
    code = map_device_strings((path / "model.py").read_text(), device)
    module_name = f"bwd_widgets_sample_{uuid.uuid4().hex[:8]}"
    namespace = types.ModuleType(module_name)
    namespace.__file__ = str(path / "model.py")
    try:
        exec(compile(code, str(path / "model.py"), "exec"), namespace.__dict__)
        module_class = namespace.GraphModule
        module = module_class()
    except Exception as error:
        raise SampleError(
            f"{path / 'model.py'} could not be imported ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}): "
            "check that it defines class GraphModule(torch.nn.Module)."
        ) from None
    metas = read_metas(path / "weight_meta.py")
    if (path / "input_meta.py").is_file():
        metas += read_metas(path / "input_meta.py")
    by_name = {m.name: m for m in metas}
    parameters = list(inspect.signature(module_class.forward).parameters.values())[1:]
    missing = [p.name for p in parameters if p.name not in by_name]
    if missing:
        raise SampleError(
            f"{path} has no tensor meta for argument(s) {', '.join(missing[:5])}: add them to weight_meta.py."
        )
    ordered = [by_name[p.name] for p in parameters]
    limits = _embedding_limits(code, by_name)
    generator = torch.Generator().manual_seed(seed)
    inputs = []
    for parameter, meta in zip(parameters, ordered):
        if parameter.annotation is torch.SymInt or parameter.annotation == "torch.SymInt":
            inputs.append(int(meta.data[0]) if meta.data else 1)
        else:
            inputs.append(build_tensor(meta, device, generator, limits.get(meta.name)))
    original_names = {m.name: m.original_name or m.name for m in ordered}
    return GraphNetSample(
        name=path.name,
        path=path,
        module=module.train(),
        inputs=inputs,
        metas=ordered,
        original_names=original_names,
        input_sources={n: parse_flat_name(o) for n, o in original_names.items()},
    )


def _embedding_limits(code, metas) -> dict:
    """Arguments passed straight to `embedding(ids, table)` must stay below the table's rows."""
    limits = {}
    for ids, table in _EMBEDDING_CALL.findall(code):
        if ids in metas and table in metas and metas[table].shape:
            rows = int(metas[table].shape[0])
            limits[ids] = min(limits.get(ids, rows), rows)
    return limits


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name.replace("torch.", ""), None)
    if not isinstance(dtype, torch.dtype):
        raise SampleError(f"unknown dtype {name!r} in a tensor meta: use a torch dtype such as 'torch.float32'.")
    return dtype


def build_tensor(meta: TensorMeta, device, generator, index_limit=None) -> torch.Tensor:
    tensor = _build_values(meta, device, generator, index_limit)
    if meta.stride is None or list(meta.stride) == list(tensor.stride()) or tensor.numel() == 0:
        return tensor
    stride = [int(s) for s in meta.stride]
    if 0 in stride:
        return tensor
    return torch.empty_strided(tensor.shape, stride, dtype=tensor.dtype, device=tensor.device).copy_(tensor)


def _build_values(meta: TensorMeta, device, generator, index_limit=None) -> torch.Tensor:
    dtype = _dtype(meta.dtype)
    shape = [int(s) for s in meta.shape]
    if meta.data is not None:
        data = torch.tensor(meta.data, dtype=dtype)
        if data.numel() == math.prod(shape):
            return data.reshape(shape).to(device)
    if dtype == torch.bool:
        return (torch.rand(shape, generator=generator) < 0.5).to(device)
    if dtype.is_floating_point or dtype.is_complex:
        mean = 0.0 if meta.mean is None else float(meta.mean)
        std = 1.0 if meta.std is None else float(meta.std)
        values = torch.randn(shape, generator=generator) * std + mean
        if meta.min_val is not None or meta.max_val is not None:
            values = values.clamp(meta.min_val, meta.max_val)
        return values.to(dtype).to(device)
    low = int(meta.min_val) if meta.min_val is not None else 0
    high = int(meta.max_val) + 1 if meta.max_val is not None else low + 2
    if index_limit is not None:
        high = min(high, index_limit)
        low = min(low, high - 1)
    return torch.randint(low, max(high, low + 1), shape, generator=generator, dtype=dtype).to(device)


# --- writing -----------------------------------------------------------------


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
