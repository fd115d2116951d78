"""Read and write GraphNet samples (`model.py`, `weight_meta.py`, `input_meta.py`, `graph_net.json`)."""

from __future__ import annotations

import inspect
import math
import re
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
