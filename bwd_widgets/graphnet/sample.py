"""Read GraphNet samples (`model.py`, `weight_meta.py`, `input_meta.py`).

A sample is code: loading one runs its `model.py`, so load only samples you trust. The metas are
data and are read without running them (a literal parser over the class bodies).
"""

from __future__ import annotations

import ast
import inspect
import math
import os
import re
import types
import uuid
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

import torch

from ..core.errors import SampleError, SampleMemoryError, TensorTooLargeError
from ..core.kinds import InputKind
from ..core.naming import parse_flat_name

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

_CUDA = re.compile(
    r"""(?P<call>device\(type=(?P<q>['"])cuda(?P=q)(?:,\s*index=\d+)?\))|(?P<quote>['"])cuda(?::\d+)?(?P=quote)"""
)
"""`device(type='cuda', index=0)`, or a `'cuda'` / `'cuda:0'` string: one pass, so a rewritten call is not read again."""
_EMBEDDING_CALLS = (
    (re.compile(r"aten\.embedding(?:\.default)?\(\s*(?P<table>\w+)\s*,\s*(?P<ids>\w+)"), "aten"),
    (re.compile(r"(?<!aten\.)embedding\(\s*(?P<ids>\w+)\s*,\s*(?P<table>\w+)"), "functional"),
    (
        re.compile(r"aten\.embedding_dense_backward(?:\.default)?\(\s*\w+\s*,\s*(?P<ids>\w+)\s*,\s*(?P<rows>\d+)"),
        "rows",
    ),
)
"""`torch.ops.aten.embedding.default(table, ids)` (an AOT graph), `torch.nn.functional.embedding(ids, table)`
(Dynamo's graph, as GraphNet samples keep it), and `embedding_dense_backward(grad, ids, rows, ...)`."""


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
    stride: list | None = None
    """Only for non-contiguous tensors; GraphNet's own loader ignores it."""


@dataclass(eq=False)
class GraphNetSample:
    """A loaded sample: the module, what each argument is, and its inputs, built on first use."""

    name: str
    path: Path
    module: torch.nn.Module
    metas: list[TensorMeta]
    original_names: dict[str, str] = field(default_factory=dict)
    """Argument -> original (Dynamo) name."""
    input_sources: dict[str, tuple[InputKind, str]] = field(default_factory=dict)
    """Argument -> (kind, human name)."""
    device: str = "cpu"
    seed: int = 0
    notes: list[str] = field(default_factory=list)
    """What was odd in the metas and how the inputs were built instead, one sentence each."""
    symints: frozenset[str] = frozenset()
    """Arguments annotated `torch.SymInt`: plain ints, not tensors."""
    index_limits: dict[str, int] = field(default_factory=dict)

    @cached_property
    def inputs(self) -> list:
        """Real inputs: exact `data` where recorded, else random values with the recorded mean and std; refused
        (SampleMemoryError) before any is built when building them all would not fit this machine's memory."""
        tensors = [m for m in self.metas if m.name not in self.symints]
        check_build_memory(f"the inputs of {self.name}", tensors, self.device)
        generator = torch.Generator().manual_seed(self.seed)
        return [
            _symint(meta)
            if meta.name in self.symints
            else build_tensor(meta, self.device, generator, self.index_limits.get(meta.name))
            for meta in self.metas
        ]

    def meta_inputs(self) -> list:
        """Inputs on the meta device: shapes and dtypes only, no memory (fake mode)."""
        return [_symint(m) if m.name in self.symints else _meta_tensor(m) for m in self.metas]

    def __repr__(self) -> str:
        return f"GraphNetSample(name={self.name!r}, inputs={len(self.metas)}, path={str(self.path)!r})"


def map_device_strings(code: str, device: str) -> str:
    """Samples recorded on a GPU say `cuda:0`; point them at the device we run on, its index too (`cuda:1` is
    `device(type='cuda', index=1)`: torch refuses an index inside `type=`)."""
    named = torch.device(device)
    call = f"device(type='{named.type}'" + ("" if named.index is None else f", index={named.index}") + ")"
    return _CUDA.sub(lambda m: call if m.group("call") else f"{m.group('quote')}{device}{m.group('quote')}", code)


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SampleError(f"{path} is not UTF-8 text: save it as UTF-8.") from None


def _literal(node: ast.expr, where: str) -> object:
    """A Python literal, with `float('inf')` as GraphNet writes non-finite numbers; nothing runs."""
    if isinstance(node, (ast.List, ast.Tuple)):
        values = [_literal(element, where) for element in node.elts]
        return values if isinstance(node, ast.List) else tuple(values)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "float"
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        try:
            return float(node.args[0].value)
        except ValueError:
            pass
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise SampleError(f"{where} is not a literal value: metas hold data only (numbers, strings, lists).") from None


def read_metas(path: Path, notes: list[str] | None = None) -> list[TensorMeta]:
    """The tensor metas in a `weight_meta.py` / `input_meta.py`, read as data, never run.

    Metas that would build the wrong tensor are refused; a non-finite mean or std (GraphNet records
    them for tensors holding infinities) builds standard values instead, with a line in `notes`.
    """
    try:
        tree = ast.parse(_read_text(path), filename=str(path))
    except SyntaxError as error:
        raise SampleError(f"{path} is not valid Python (line {error.lineno}): fix the meta file.") from None
    metas = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        values: dict[str, Any] = {}  # literals read from the file; TensorMeta's checks follow
        for statement in node.body:
            if (
                isinstance(statement, ast.Assign)
                and len(statement.targets) == 1
                and isinstance(statement.targets[0], ast.Name)
            ):
                key = statement.targets[0].id
                if key in TensorMeta.__dataclass_fields__:
                    values[key] = _literal(statement.value, f"{path.name}: {node.name}.{key}")
        if "name" in values and "shape" in values:
            metas.append(_checked(TensorMeta(**{"dtype": "torch.float32", **values}), path, notes))
    return metas


_REBUILT = re.compile(r"(?P<file>[^:]+): (?P<name>\S+) has (?P<rest>(mean|std) = \S+: its values were built with .*)")


def _grouped(notes: list[str]) -> list[str]:
    """One note for every tensor meta rebuilt the same way (a sample had 48 identical `std = nan` lines)."""
    groups: dict[tuple[str, str], list[str]] = {}
    others = []
    for note in notes:
        found = _REBUILT.fullmatch(note)
        if found:
            groups.setdefault((found["file"], found["rest"]), []).append(found["name"])
        else:
            others.append(note)
    for (file, rest), names in groups.items():
        if len(names) == 1:
            others.append(f"{file}: {names[0]} has {rest}")
            continue
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        rest = rest.replace("its values were", "their values were")
        others.append(f"{file}: {len(names)} tensors ({shown}) have {rest}")
    return others


INT64_RANGE = (-(2**63), 2**63 - 1)
"""torch's sizes, strides and integers are 64-bit: a meta's integers must fit."""


def _is_whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _past_int64(values: object) -> int | None:
    """The first integer in `values` (a number or a list) that int64 cannot hold, else None."""
    for value in values if isinstance(values, (list, tuple)) else [values]:
        if _is_whole(value) and not INT64_RANGE[0] <= value <= INT64_RANGE[1]:
            return value
    return None


def _check_integers_fit(where: str, meta: TensorMeta) -> None:
    for field_name in ("shape", "stride", "data", "min_val", "max_val"):
        value = _past_int64(getattr(meta, field_name))
        if value is not None:
            raise SampleError(f"{where} has {value} in {field_name}: it is past int64, the most torch can hold.")


def storage_elements(shape: list | tuple, stride: list | tuple | None) -> int:
    """Elements the storage of a tensor of `shape` built by `build_tensor` spans: its element count, or with a
    recorded stride (and no 0 step, which is built contiguous) one past the furthest element the steps reach."""
    count = int(math.prod(shape))
    if count == 0 or stride is None or 0 in stride:
        return count
    return 1 + sum(int(size - 1) * int(step) for size, step in zip(shape, stride))


def check_size(where: str, meta: TensorMeta) -> None:
    """Refuse a shape whose element count, or whose storage's bytes, int64 cannot hold: torch cannot describe
    such a tensor on any device, real or fake (it fails with 'Storage size calculation overflowed')."""
    count = math.prod(meta.shape)
    size = storage_elements(meta.shape, meta.stride) * _dtype(str(meta.dtype)).itemsize
    if count > INT64_RANGE[1] or size > INT64_RANGE[1]:
        what = f"{count:,} elements" if count > INT64_RANGE[1] else f"{size:,} bytes"
        raise TensorTooLargeError(
            f"{where} has shape {list(meta.shape)}: its {what} are past int64, the most torch can count, so no "
            "device can hold it, in real or fake mode: fix the shape in the meta file."
        )


def _check_layout(where: str, shape: list | tuple, stride: object) -> None:
    """A recorded `stride`: one whole number per dimension, none negative (torch's layouts step forward)."""
    if not isinstance(stride, (list, tuple)) or not all(_is_whole(s) for s in stride):
        raise SampleError(f"{where} has stride {stride!r}: a stride is a list of whole numbers, one per dimension.")
    if len(stride) != len(shape):
        raise SampleError(
            f"{where} has stride {list(stride)} for shape {list(shape)}: it needs one step per dimension "
            f"({len(shape)}), or no stride."
        )
    if any(s < 0 for s in stride):
        raise SampleError(f"{where} has a negative step in stride {list(stride)}: steps are 0 or more.")


def _checked(meta: TensorMeta, path: Path, notes: list[str] | None) -> TensorMeta:
    """Refuse metas that would silently build the wrong tensor, or fail deep inside torch when built."""
    where = f"{path.name}: {meta.name}"
    for field_name in ("name", "original_name"):
        text = getattr(meta, field_name)
        if not isinstance(text, str) and not (field_name == "original_name" and text is None):
            raise SampleError(f"{where} has {field_name} = {text!r}: it must be text, in quotes.")
    shape = meta.shape
    if not isinstance(shape, (list, tuple)) or not all(_is_whole(s) for s in shape):
        raise SampleError(f"{where} has shape {shape!r}: a shape is a list of whole numbers.")
    if any(s < 0 for s in shape):
        raise SampleError(f"{where} has a negative size in shape {list(shape)}: sizes are 0 or more.")
    if meta.stride is not None:
        _check_layout(where, shape, meta.stride)
    _check_integers_fit(where, meta)
    dtype = _dtype(str(meta.dtype))
    check_size(where, meta)
    for field_name in ("mean", "std", "min_val", "max_val"):
        value = getattr(meta, field_name)
        if value is None:
            continue
        if not isinstance(value, (int, float)):
            raise SampleError(f"{where} has {field_name} = {value!r}: it must be a number.")
        if field_name in ("mean", "std") and not math.isfinite(value):
            fallback = 0.0 if field_name == "mean" else 1.0
            setattr(meta, field_name, fallback)
            if notes is not None:
                notes.append(
                    f"{where} has {field_name} = {value}: its values were built with {field_name} {fallback:g}."
                )
        elif field_name in ("min_val", "max_val") and isinstance(value, float) and math.isnan(value):
            raise SampleError(f"{where} has {field_name} = nan: it must be a number.")
    if meta.std is not None and meta.std < 0:
        raise SampleError(f"{where} has std = {meta.std}: a standard deviation is 0 or more.")
    if meta.min_val is not None and meta.max_val is not None and meta.min_val > meta.max_val:
        raise SampleError(f"{where} has min_val {meta.min_val} above max_val {meta.max_val}: swap them.")
    if meta.data is not None:
        if not isinstance(meta.data, (list, tuple)) or not all(
            isinstance(v, (int, float, bool)) or (dtype.is_complex and isinstance(v, complex)) for v in meta.data
        ):
            raise SampleError(f"{where} has data that is not a list of numbers: fix or remove it.")
        if len(meta.data) != math.prod(shape):
            raise SampleError(
                f"{where} has {len(meta.data)} data values for shape {list(shape)} ({math.prod(shape)} elements): "
                "fix the data or remove it."
            )
    return meta


def load_graphnet_sample(path: str | Path, device: str = "cpu", seed: int = 0) -> GraphNetSample:
    """Load a GraphNet sample folder; its inputs are built when first used.

    This runs the sample's `model.py` (a sample is code: load only samples you trust). Inputs get
    exact `data` where recorded, else random values with the recorded mean and std; integers stay
    inside `min_val`/`max_val` and the embedding tables they index; `cuda` device strings are
    mapped to `device`.
    """
    path = Path(path)
    if not path.is_dir():
        raise SampleError(f"{path} is not a folder: pass a GraphNet sample folder holding model.py.")
    for required in ("model.py", "weight_meta.py"):
        if not (path / required).is_file():
            raise SampleError(f"{path} has no {required}: a GraphNet sample needs model.py and weight_meta.py.")
    try:
        torch.device(device)
    except RuntimeError:
        raise SampleError(
            f"device {device!r} is not a device torch knows: name one such as 'cpu' or 'cuda:1'."
        ) from None
    code = map_device_strings(_read_text(path / "model.py"), device)
    namespace = types.ModuleType(f"bwd_widgets_sample_{uuid.uuid4().hex[:8]}")
    namespace.__file__ = str(path / "model.py")
    try:
        exec(compile(code, str(path / "model.py"), "exec"), namespace.__dict__)
        module_class = namespace.GraphModule
        module = module_class()
    except Exception as error:  # noqa: BLE001 - the sample's code may raise anything: one sentence naming it
        first = str(error).splitlines()[0] if str(error) else ""
        raise SampleError(
            f"{path / 'model.py'} could not be imported ({type(error).__name__}: {first}): "
            "check that it defines class GraphModule(torch.nn.Module)."
        ) from None
    notes: list[str] = []
    metas = read_metas(path / "weight_meta.py", notes)
    if (path / "input_meta.py").is_file():
        metas += read_metas(path / "input_meta.py", notes)
    by_name = {m.name: m for m in metas}
    parameters = list(inspect.signature(module_class.forward).parameters.values())[1:]
    missing = [p.name for p in parameters if p.name not in by_name]
    if missing:
        raise SampleError(
            f"{path} has no tensor meta for argument(s) {', '.join(missing[:5])}: add them to weight_meta.py."
        )
    ordered = [by_name[p.name] for p in parameters]
    original_names = {m.name: m.original_name or m.name for m in ordered}
    return GraphNetSample(
        name=path.name,
        path=path,
        module=module.train(),
        metas=ordered,
        original_names=original_names,
        input_sources={n: parse_flat_name(o) for n, o in original_names.items()},
        device=device,
        seed=seed,
        notes=_grouped([n for n in notes if n.split(":")[1].split(" has ")[0].strip() in original_names]),
        symints=frozenset(p.name for p in parameters if p.annotation in (torch.SymInt, "torch.SymInt")),
        index_limits=embedding_rows(code, {n: list(m.shape) for n, m in by_name.items()}),
    )


def embedding_rows(code: str, shapes: Mapping[str, Sequence[int]]) -> dict[str, int]:
    """Arguments passed straight to an embedding must stay below its table's rows: {ids: rows}."""
    limits: dict[str, int] = {}
    for pattern, _ in _EMBEDDING_CALLS:
        for found in pattern.finditer(code):
            ids, named = found.group("ids"), found.groupdict()
            table_shape = shapes.get(named.get("table") or "")
            rows = int(named["rows"]) if named.get("rows") else int(table_shape[0]) if table_shape else None
            if ids in shapes and rows:
                limits[ids] = min(limits.get(ids, rows), rows)
    return limits


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name.replace("torch.", ""), None)
    if not isinstance(dtype, torch.dtype):
        raise SampleError(f"unknown dtype {name!r} in a tensor meta: use a torch dtype such as 'torch.float32'.")
    return dtype


def _symint(meta: TensorMeta) -> int:
    return int(meta.data[0]) if meta.data else 1


def _meta_tensor(meta: TensorMeta) -> torch.Tensor:
    check_size(meta.name, meta)  # a meta made by hand was never read: checked here, before torch is asked
    dtype, shape = _dtype(meta.dtype), list(meta.shape)
    if meta.stride is not None:  # checked when read: one step per dimension
        return torch.empty_strided(shape, list(meta.stride), dtype=dtype, device="meta")
    return torch.empty(shape, dtype=dtype, device="meta")


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def build_bytes(meta: TensorMeta, device: str = "cpu") -> tuple[int, int]:
    """(bytes the built tensor keeps in this machine's memory, the most bytes alive while `build_tensor` builds
    it). Random values are drawn as float32 and then made: a bool tensor holds its float32 draw (4 bytes an
    element) beside the bool one, a floating one its draw and the scaled copy (8 bytes), or the draw and the
    converted copy when that is wider (float64: 12); integers are drawn in their own dtype, `data` is read into
    it. A recorded stride copies the contiguous tensor into the strided one. Built for another device, the
    tensor keeps nothing here (its float32 draw is still made here)."""
    dtype = _dtype(str(meta.dtype))
    count, itemsize = math.prod(meta.shape), dtype.itemsize
    drawn = meta.data is None and (dtype == torch.bool or dtype.is_floating_point or dtype.is_complex)
    each = (4 + itemsize if dtype == torch.bool else max(8, 4 + itemsize)) if drawn else itemsize
    kept, peak = count * itemsize, count * each
    if meta.stride is not None and count and 0 not in meta.stride:
        storage = storage_elements(meta.shape, meta.stride) * itemsize
        if list(meta.stride) != _contiguous(meta.shape):  # else built as it is, no copy
            peak, kept = max(peak, kept + storage), storage
    return (kept if torch.device(device).type == "cpu" else 0), peak


def _contiguous(shape: list | tuple) -> list[int]:
    steps, step = [], 1
    for size in reversed(shape):
        steps.append(step)
        step *= max(int(size), 1)
    return steps[::-1]


def _size(count: int) -> str:
    return f"{count / 2**30:.2f} GiB" if count >= 2**30 else f"{count / 2**20:.0f} MiB"


def check_build_memory(what: str, metas: list[TensorMeta], device: str = "cpu") -> None:
    """Refuse, before anything is built, tensors whose building would take more than this machine's memory: the
    tensors built before each one stay while it is built, with its float32 draw (`build_bytes`)."""
    memory = _memory_bytes()
    if memory is None:
        return
    kept = peak = 0
    for meta in metas:
        check_size(meta.name, meta)
        keeps, building = build_bytes(meta, device)
        peak, kept = max(peak, kept + building), kept + keeps
    if peak > memory:
        raise SampleMemoryError(
            f"{what} would take about {_size(peak)} of memory to build ({_size(kept)} kept, the rest the float32 "
            f"values random tensors are drawn as), more than this machine's {_size(memory)}: extract it with "
            "mode='fake', which builds nothing."
        )


def build_tensor(
    meta: TensorMeta, device: str, generator: torch.Generator, index_limit: int | None = None
) -> torch.Tensor:
    check_build_memory(meta.name, [meta], device)
    tensor = _build_values(meta, device, generator, index_limit)
    if meta.stride is None or list(meta.stride) == list(tensor.stride()) or tensor.numel() == 0:
        return tensor
    if 0 in meta.stride:
        return tensor
    return torch.empty_strided(tensor.shape, list(meta.stride), dtype=tensor.dtype, device=tensor.device).copy_(tensor)


def _build_values(
    meta: TensorMeta, device: str, generator: torch.Generator, index_limit: int | None = None
) -> torch.Tensor:
    dtype = _dtype(meta.dtype)
    shape = list(meta.shape)
    if meta.data is not None:
        return torch.tensor(meta.data, dtype=dtype).reshape(shape).to(device)
    if dtype == torch.bool:
        return (torch.rand(shape, generator=generator) < 0.5).to(device)
    if dtype.is_floating_point or dtype.is_complex:
        mean = 0.0 if meta.mean is None else float(meta.mean)
        std = 1.0 if meta.std is None else float(meta.std)
        values = torch.randn(shape, generator=generator) * std + mean
        if meta.min_val is not None or meta.max_val is not None:
            values = values.clamp(meta.min_val, meta.max_val)
        return values.to(dtype).to(device)
    low = int(meta.min_val) if meta.min_val is not None and math.isfinite(meta.min_val) else 0
    high = int(meta.max_val) + 1 if meta.max_val is not None and math.isfinite(meta.max_val) else low + 2
    if index_limit is not None:
        high = min(high, index_limit)
        low = min(low, high - 1)
    return torch.randint(low, max(high, low + 1), shape, generator=generator, dtype=dtype).to(device)
