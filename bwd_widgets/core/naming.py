"""Human names for graph inputs and module paths (`primals_3` -> `bn.weight`)."""

from __future__ import annotations

import ast
import functools
import inspect
import os
import re
import sysconfig
from typing import TYPE_CHECKING

import torch
from torch.multiprocessing.reductions import StorageWeakRef

if TYPE_CHECKING:
    from collections.abc import Callable

    from .kinds import InputKind

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_USER_FACING = {os.path.join(_PACKAGE_DIR, "examples", "__init__.py")}  # the example models: user code


def is_library_file(path: str) -> bool:
    """Torch's files and this package's (its example models excepted): not where a model's code is.

    Other installed libraries are: a transformers model's lines are in `modeling_*.py` under
    site-packages, and this package itself may be installed there (its examples still count as user code).
    """
    if path.startswith("<frozen"):
        return True
    path = os.path.abspath(path) if not path.startswith("<") else path
    return path.startswith(_TORCH_DIR) or (path.startswith(_PACKAGE_DIR) and path not in _USER_FACING)


_PYTHON_DIRS = tuple({os.path.abspath(sysconfig.get_paths()[key]) + os.sep for key in ("stdlib", "platstdlib")})


def is_python_file(path: str) -> bool:
    """A file of Python's own library (`logging`, `warnings`), by where it lies: not one installed beside it in a
    `site-packages` folder, whatever its module's name."""
    path = os.path.abspath(path) if not path.startswith("<") else path
    parts = path.split(os.sep)
    return path.startswith(_PYTHON_DIRS) and "site-packages" not in parts and "dist-packages" not in parts


_FLAT_SEGMENT = re.compile(r"_(modules|parameters|buffers)_")
_KIND: dict[str, InputKind] = {"parameters": "parameter", "buffers": "buffer", "modules": "input"}


def parse_flat_name(name: str) -> tuple[InputKind, str]:
    """Read Dynamo's flat argument names, as GraphNet samples keep them.

    `L_self_modules_bn_parameters_weight_` -> ("parameter", "bn.weight"),
    `L_x_` -> ("input", "x"). Anything else is an input named as it is.
    """
    core = name[2:] if name[:2] in ("L_", "l_") else name
    core = core[:-1] if core.endswith("_") and core != "_" else core
    if core.startswith("self_"):
        parts = _FLAT_SEGMENT.split(core[4:])
        if len(parts) >= 3 and parts[0] == "":
            return _KIND[parts[-2]], ".".join(parts[2::2])
    return "input", core


_DOTTED = re.compile(r"L\['(\w*)'\]((?:\.\w+)*)")
_CONTAINERS = {"_modules": "modules", "_parameters": "parameters", "_buffers": "buffers"}


def _segments(expression: str) -> list[tuple[str, str]] | None:
    """Read a Dynamo source expression such as `getattr(L['self'], 'a b')._parameters['weight']`.

    Returns (container, name) pairs: container is `local`, `modules`, `parameters`, `buffers`,
    `attr` or `item`. Names are Python literals there, so any character survives.
    """
    dotted = _DOTTED.fullmatch(expression)
    if dotted:  # `L['self'].blocks.0.1`: digits after dots are not Python, but plain to read
        return [("local", dotted.group(1))] + [("attr", part) for part in dotted.group(2).split(".")[1:]]
    try:
        tree = ast.parse(expression, mode="eval").body
    except SyntaxError:
        return None
    segments: list[tuple[str, str]] = []

    def walk(node: ast.expr) -> bool:
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            key = str(node.slice.value)
            if isinstance(node.value, ast.Name) and node.value.id in ("L", "G"):
                segments.append(("local" if node.value.id == "L" else "global", key))
                return True
            if isinstance(node.value, ast.Attribute) and node.value.attr in _CONTAINERS:
                if not walk(node.value.value):
                    return False
                segments.append((_CONTAINERS[node.value.attr], key))
                return True
            if not walk(node.value):
                return False
            segments.append(("item", key))
            return True
        if isinstance(node, ast.Attribute):
            if not walk(node.value):
                return False
            segments.append(("attr", node.attr))
            return True
        is_getattr = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
        if is_getattr and isinstance(node, ast.Call) and len(node.args) == 2 and isinstance(node.args[1], ast.Constant):
            if not walk(node.args[0]):
                return False
            segments.append(("attr", str(node.args[1].value)))
            return True
        return False

    return segments if walk(tree) and segments and segments[0][0] in ("local", "global") else None


def parse_source_name(source_name: str) -> tuple[InputKind, str]:
    """Read a Dynamo source such as `L['self']._modules['l1']._parameters['weight']`."""
    segments = _segments(source_name)
    if segments is None:
        return "input", source_name
    if len(segments) == 1:
        return "input", segments[0][1]
    kind = _KIND.get(segments[-1][0], "input")
    start = 0 if segments[0][0] == "global" else 1  # a global module keeps its own name: `model.fc.weight`
    return kind, ".".join(name for _, name in segments[start:])


def module_path(nn_module_stack: dict | None) -> str | None:
    """The innermost module of an fx `nn_module_stack`, as a dotted path."""
    if not nn_module_stack:
        return None
    path = list(nn_module_stack.values())[-1][0]
    return _module_of(path) if isinstance(path, str) else None


@functools.lru_cache(maxsize=4096)
def _module_of(path: str) -> str | None:
    """`module_path` of one stack entry's path, parsed once: every op of a module carries the same path, and each
    partition of a trace reads them all again (a sweep's every point)."""
    segments = _segments(re.sub(r"\.(\d+)(?=\.|\[|$)", r"[\1]", path))  # `blocks.0.forward...`: parse `[0]`
    if segments is None:
        return path or None
    return ".".join(name for _, name in _through_bound_methods(segments[1:])) or None


_CALL_PARTS = {("attr", "args"), ("attr", "func"), ("attr", "keywords")}


def _through_bound_methods(segments: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """A module reached through one of its own methods, `blocks.0.forward.__self__` or, once its forward is
    wrapped in `functools.partial(checkpoint, block.forward)`, `blocks.0.forward.args[0].__self__`: the
    module is `blocks.0`."""
    kept: list[tuple[str, str]] = []
    for segment in segments:
        if segment != ("attr", "__self__"):
            kept.append(segment)
            continue
        while kept and (kept[-1][0] == "item" or kept[-1] in _CALL_PARTS):
            kept.pop()
        if kept:
            kept.pop()  # the method's name
    return kept


def source_line(stack_trace: str | None) -> str | None:
    """`file.py:12: code` for the innermost frame of an fx stack trace outside torch and this package."""
    if not stack_trace:
        return None
    lines = [line for line in stack_trace.strip().splitlines() if line.strip()]
    for i in range(len(lines) - 1, -1, -1):
        frame = re.match(r'\s*File "([^"]+)", line (\d+)', lines[i])
        if frame and not is_library_file(frame.group(1)):
            code = lines[i + 1].strip() if i + 1 < len(lines) and not lines[i + 1].lstrip().startswith("File ") else ""
            return f"{frame.group(1)}:{frame.group(2)}: {code}".rstrip(": ")
    return None


class TensorNames:
    """The qualified names of a module's parameters and buffers, by tensor identity.

    A tensor reached by several names (tied weights, a module shared at two paths) is named by the first
    name `named_parameters()` gives it, as `dict(model.named_parameters())` and autograd's gradients do;
    the others are its aliases. The table holds the tensors, so their identities stay valid while it lives.
    """

    def __init__(self, module: torch.nn.Module | None) -> None:
        self._names: dict[int, tuple[InputKind, list[str]]] = {}
        self._tensors: list[torch.Tensor] = []
        if module is None:
            return
        named: list[tuple[InputKind, str, torch.Tensor | None]] = [
            ("parameter", n, t) for n, t in module.named_parameters(remove_duplicate=False)
        ]
        named += [("buffer", n, t) for n, t in module.named_buffers(remove_duplicate=False)]
        for kind, name, tensor in named:
            if tensor is None:
                continue
            entry = self._names.get(id(tensor))
            if entry is None:
                self._names[id(tensor)] = (kind, [name])
                self._tensors.append(tensor)
            elif name not in entry[1]:
                entry[1].append(name)

    def lookup(self, value: object) -> tuple[InputKind, str, tuple[str, ...]] | None:
        """(kind, first qualified name, the other names) of a module's tensor; None for anything else."""
        entry = self._names.get(id(value)) if isinstance(value, torch.Tensor) else None
        if entry is None:
            return None
        kind, names = entry
        return kind, names[0], tuple(names[1:])

    def tied(self) -> set[int]:
        """Identities of the tensors reached by more than one name."""
        return {key for key, (_, names) in self._names.items() if len(names) > 1}


def data_key(tensor: torch.Tensor) -> tuple | None:
    """What memory a tensor shows, and how: equal for an alias covering exactly the same elements."""
    try:
        storage = StorageWeakRef(tensor.untyped_storage())
    except RuntimeError:  # no storage to speak of (a sparse or nested tensor)
        return None
    return ("data", storage.cdata, tensor.storage_offset(), tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype)


def nested_argument(source_name: str) -> str | None:
    """`args[i]` for `L['args'][i]` of a frame other than the call's own (a decorator's `wrapper(*args)`
    compiled on its own after a graph break): a value handed in, not the model's argument i."""
    positional = re.fullmatch(r"L\['args'\]\[(\d+)\]", source_name)
    return f"args[{positional.group(1)}]" if positional else None


def wrapper_argument(source_name: str, signature: list[str]) -> str | None:
    """The argument `L['args'][i]` or `L['kwargs']['name']` is: positional ones by the signature (as
    the extraction names them, `input_i` past its end), keyword ones by their own name."""
    keyword = re.fullmatch(r"L\['kwargs'\]\['(\w+)'\]", source_name)
    if keyword:
        return keyword.group(1)
    positional = re.fullmatch(r"L\['args'\]\[(\d+)\]", source_name)
    if positional is None:
        return None
    index = int(positional.group(1))
    return signature[index] if index < len(signature) else f"input_{index}"


def signature_names(fn: Callable) -> list[str]:
    """Names of the positional parameters of fn (or of a module's forward)."""
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    try:
        parameters = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
