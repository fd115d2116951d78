"""The trace cache: an nn.Module extracted again with the same state, inputs and settings reuses its
joint graph instead of tracing again.

The key is a fingerprint of everything a fresh trace could read: the model's modules, their classes and
the code their methods reach (globals, closure cells, nested functions, attributes of imported modules),
plain objects by value (config objects, dicts, partials), tensors by identity, shape, version and, in
real mode, their bytes (`p.data.mul_(2)` bumps no version counter), and torch's global settings. Where
the fingerprint cannot be made cheaply (too deep, too large, a tensor subclass), the call is not cached:
a stale graph is worse than a second trace.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import sys
import types
from collections import OrderedDict
from typing import TYPE_CHECKING

import torch

from ..core.analysis import random_ops
from ..core.compat import dynamo_config, functorch_config, pytree, tensor_version
from .result import BackwardExtraction

if TYPE_CHECKING:
    from ..core.kinds import Mode
    from ..core.trace import Partition

TRACE_CACHE_SIZE = 2
TraceKey = tuple


@dataclasses.dataclass
class _Kept:
    """A trace kept for the next call with the same model, inputs and mode."""

    extraction: BackwardExtraction
    rng_digest: str | None
    """Set when the graph draws random numbers: a hit also needs the same generator state."""
    model: object
    """Held so that the ids in the key stay taken."""
    inputs: tuple


_traces: OrderedDict[tuple, _Kept] = OrderedDict()


def kept_extraction(key: TraceKey | None) -> BackwardExtraction | None:
    """The extraction kept under `key`, if its random state (when it draws random numbers) still matches."""
    kept = _traces.get(key) if key is not None else None
    if key is None or kept is None or kept.rng_digest not in (None, rng_digest()):
        return None
    _traces.move_to_end(key)
    return kept.extraction


def keep(key: TraceKey, extraction: BackwardExtraction, digest: str, model: object, inputs: tuple) -> None:
    """Keep `extraction` under `key`; `digest` (the generator state before it ran) matters only when its
    graphs draw random numbers."""
    random = any(_draws_random_numbers(p) for p in extraction.partitions)
    _traces[key] = _Kept(extraction, digest if random else None, model, inputs)
    while len(_traces) > TRACE_CACHE_SIZE:
        _traces.popitem(last=False)


def clear_trace_cache() -> None:
    """Forget kept traces (they hold the model, its inputs and, in real mode, its real values)."""
    _traces.clear()


def trace_key(
    model: object, example_inputs: tuple, decided: dict[str, bool], mode: Mode, capture_scalars: bool
) -> TraceKey | None:
    """What makes two calls trace the same joint graph; None where that cannot be told cheaply.

    Only nn.Modules are kept: a plain function's behaviour hangs on whatever it reads.
    """
    if not isinstance(model, torch.nn.Module):
        return None
    leaves, spec = pytree.tree_flatten(list(example_inputs))
    if any(isinstance(v, torch.Tensor) and v.is_inference() for v in leaves):
        return None  # inference tensors keep no version counter: an in-place change could not be seen
    fingerprint = _Fingerprint(values=mode == "real")
    try:
        state = (fingerprint.module(model), str(spec), fingerprint.each(leaves, 0))
    except (_NotKeyable, RecursionError):
        return None
    return (id(model), state, tuple(sorted(decided.items())), mode, capture_scalars, _torch_settings())


def _torch_settings() -> tuple:
    """torch's global settings a trace reads: autocast, default dtype, determinism, which attention and
    matmul kernels are allowed (each changes the ops recorded), and Dynamo's and AOT Autograd's configs."""
    backends = torch.backends
    return (
        torch.is_autocast_enabled("cpu"),
        torch.get_autocast_dtype("cpu"),
        torch.is_autocast_enabled("cuda"),
        torch.get_autocast_dtype("cuda"),
        torch.get_default_dtype(),
        torch.are_deterministic_algorithms_enabled(),
        torch.get_float32_matmul_precision(),
        backends.cuda.flash_sdp_enabled(),
        backends.cuda.mem_efficient_sdp_enabled(),
        backends.cuda.math_sdp_enabled(),
        backends.cuda.cudnn_sdp_enabled(),
        backends.cuda.matmul.allow_tf32,
        backends.cudnn.enabled,
        backends.cudnn.allow_tf32,
        backends.mkldnn.enabled,
        dynamo_config.get_hash(),
        functorch_config.get_hash(),
    )


class _NotKeyable(Exception):
    """Something a trace may read that the fingerprint cannot take cheaply: the call is not cached."""


_SIMPLE = (type(None), bool, int, float, complex, str, bytes, range, slice, type(...), torch.Size, torch.dtype)
_OPAQUE = (
    types.ModuleType,
    types.BuiltinFunctionType,
    types.BuiltinMethodType,
    types.MethodWrapperType,
    types.WrapperDescriptorType,
    types.MethodDescriptorType,
    types.GetSetDescriptorType,
    types.MemberDescriptorType,
    logging.Logger,  # Dynamo skips logging calls while it traces (extractor._logging_methods)
    torch.device,
    torch.layout,
    torch.memory_format,
    torch.finfo,
    torch.iinfo,
)
"""Values keyed by identity: immutable, or read by no trace."""
_MAX_DEPTH = 24
_MAX_VALUES = 200_000


class _Fingerprint:
    """One key's walk: values for plain data, identities for what cannot change, and the code a trace
    can reach from each module's forward, each object walked once (shared objects and cycles are keyed
    where first met)."""

    def __init__(self, values: bool) -> None:
        self.values = values
        """Real mode: tensors are keyed by their bytes too (real values are kept and compared)."""
        self.seen: dict[object, object] = {}
        """Objects already keyed, held so that no id is reused while the walk goes on."""
        self.count = 0

    def value(self, value: object, depth: int = 0, owner: type | None = None) -> object:
        """`depth` counts data nesting; `owner` is the module class whose methods the code may call on
        `self` (names the code reads are looked up there too)."""
        self.count += 1
        if depth > _MAX_DEPTH or self.count > _MAX_VALUES:
            raise _NotKeyable("too deep or too large to fingerprint")
        if isinstance(value, torch.Tensor):
            return self.tensor(value)
        if isinstance(value, _SIMPLE):
            return (type(value).__name__, str(value) if isinstance(value, torch.dtype) else value)
        if isinstance(value, _OPAQUE) or value is torch.nn.Module:
            return ("id", id(value))
        code_like = isinstance(value, (types.FunctionType, types.MethodType, staticmethod, classmethod, property))
        mark = (id(value), id(owner)) if code_like else id(value)
        if mark in self.seen:
            return ("seen", id(value))
        self.seen[mark] = value
        deeper = depth + 1
        if isinstance(value, torch.nn.Module):
            return self.module(value)
        if isinstance(value, (list, tuple)):
            return (type(value).__name__, self.each(value, deeper))
        if isinstance(value, (set, frozenset)):
            return (type(value).__name__, frozenset(self.each(tuple(value), deeper)))
        if isinstance(value, dict):
            return (type(value).__name__, self.mapping(value, deeper))
        if isinstance(value, types.FunctionType):
            return self.function(value, owner)
        if isinstance(value, types.MethodType):
            return ("method", self.value(value.__func__, deeper, owner), self.value(value.__self__, deeper))
        if isinstance(value, functools.partial):
            return ("partial", self.each((value.func, value.args, value.keywords), deeper))
        if isinstance(value, (staticmethod, classmethod)):
            return (type(value).__name__, self.value(value.__func__, deeper, owner))
        if isinstance(value, property):
            return ("property", self.value(value.fget, deeper, owner), self.value(value.fset, deeper, owner))
        if isinstance(value, type):
            return self.cls(value, deeper)
        return self.instance(value, deeper)

    def each(self, values: tuple | list, depth: int) -> tuple:
        """Values gathered into a tuple made for the walk (never registered as seen: its id is reused)."""
        return tuple(self.value(v, depth) for v in values)

    def mapping(self, values: dict, depth: int) -> tuple:
        return tuple((self.value(k, depth), self.value(v, depth)) for k, v in values.items())

    def tensor(self, t: torch.Tensor) -> tuple:
        if type(t) not in (torch.Tensor, torch.nn.Parameter, torch.nn.Buffer) or t.layout != torch.strided:
            raise _NotKeyable("a tensor subclass or a sparse tensor")
        key = (id(t), tensor_version(t), tuple(t.shape), t.stride(), t.dtype, t.device.type, t.requires_grad)
        if not self.values or t.device.type == "meta":
            return key
        data = t.detach().resolve_conj().resolve_neg().contiguous().reshape(-1).view(torch.uint8).cpu()
        return (*key, t.data_ptr(), hashlib.sha1(data.numpy().data).hexdigest())

    def module(self, module: torch.nn.Module) -> tuple:
        """Every submodule (its attributes, hooks, class and the code its forward reaches), then every
        parameter and buffer."""
        entries = []
        for path, sub in module.named_modules(remove_duplicate=False):
            self.seen[id(sub)] = sub
            attributes = {k: v for k, v in vars(sub).items() if k not in ("_parameters", "_buffers", "_modules")}
            cls = type(sub)
            forward = None if "forward" in attributes else self.value(cls.forward, 0, cls)
            entries.append((path, id(sub), self.mapping(attributes, 1), self.value(cls), forward))
        named = [*module.named_parameters(remove_duplicate=False), *module.named_buffers(remove_duplicate=False)]
        return (tuple(entries), tuple((n, self.tensor(t)) for n, t in named))

    def cls(self, cls: type, depth: int) -> tuple:
        """A class by its identity and the attributes (not methods) it and its bases define: an inherited
        constant, a tuple of dims. torch's own module classes by the identity of each member, so a
        patched `nn.Linear.forward` misses the cache; methods a trace calls are walked where the code
        names them."""
        if issubclass(cls, torch.nn.Module) and not _walked(cls):
            return ("class", id(cls), tuple(id(v) for v in vars(cls).values()))
        return ("class", id(cls), tuple((k, self.value(v, depth)) for k, v in _class_data(cls)))

    def function(self, function: types.FunctionType, owner: type | None) -> tuple:
        """A function by its code and everything that code reads: its defaults, closure cells, the
        globals it names (and attributes of imported modules it names), methods of `owner` it names,
        and nested code (comprehensions, lambdas); torch's and Python's own functions by identity."""
        if not _walked(function):
            return ("function", id(function))
        cells = []
        for cell in function.__closure__ or ():
            try:
                cells.append(self.value(cell.cell_contents, 0, owner))
            except ValueError:  # a cell not yet filled
                cells.append(("empty",))
        defaults = self.each((function.__defaults__, function.__kwdefaults__), 0)
        wrapped = self.value(getattr(function, "__wrapped__", None), 0, owner)
        reads = self.code(function.__code__, function.__globals__, owner)
        return ("function", id(function), id(function.__code__), defaults, tuple(cells), reads, wrapped)

    def code(self, code: types.CodeType, namespace: dict, owner: type | None) -> tuple:
        names = code.co_names
        reads = []
        for name in names:
            if name in namespace:
                found = namespace[name]
                reads.append((name, self.value(found, 0, owner)))
                if isinstance(found, (types.ModuleType, type)):
                    reads.append((name, self.attributes(found, names, owner)))
            if owner is not None:
                defined = [vars(k)[name] for k in owner.__mro__ if _walked(k) and name in vars(k)]
                reads.extend((name, self.value(v, 0, owner)) for v in defined)
        nested = tuple(self.code(c, namespace, owner) for c in code.co_consts if isinstance(c, types.CodeType))
        return (tuple(reads), nested)

    def attributes(self, holder: object, names: tuple, owner: type | None, levels: int = 3) -> tuple:
        """Attributes of an imported module or a class that the code names (`F.gelu`,
        `torch.nn.functional.gelu`, `Helper.scale`)."""
        found = []
        for name in names:
            attribute = vars(holder).get(name)
            if attribute is None:
                continue
            found.append((name, self.value(attribute, 0, owner)))
            if isinstance(attribute, (types.ModuleType, type)) and levels > 1:
                found.append((name, self.attributes(attribute, names, owner, levels - 1)))
        return tuple(found)

    def instance(self, value: object, depth: int) -> tuple:
        """A plain object by value: its class and its own attributes (a config dataclass, a
        SimpleNamespace, a module-level settings object)."""
        state = getattr(value, "__dict__", None)
        slots = [s for c in type(value).__mro__ for s in getattr(c, "__slots__", ()) if hasattr(value, s)]
        if state is None and not slots:
            return ("object", id(value))  # written in C: what it holds is not Python's to read
        own = self.mapping(state or {}, depth)
        return (
            "object",
            self.value(type(value), depth),
            own,
            tuple((s, self.value(getattr(value, s), depth)) for s in slots),
        )


def _walked(owner: object) -> bool:
    """Code and classes outside torch and Python's standard library are walked; torch's and Python's own
    are keyed by identity: patching one replaces it where it is looked up, which the walk sees."""
    module = getattr(owner, "__module__", None) or ""
    top = module.partition(".")[0]
    return top != "torch" and top not in sys.stdlib_module_names


def _class_data(cls: type) -> list[tuple[str, object]]:
    """Attributes (not methods) a class and its bases define outside torch and the standard library."""
    data = []
    for klass in cls.__mro__:
        if not _walked(klass):
            continue
        for k, v in vars(klass).items():
            if not k.startswith("__") and not callable(v) and not isinstance(v, (property, staticmethod, classmethod)):
                data.append((k, v))
    return data


def rng_digest() -> str:
    return hashlib.sha1(torch.get_rng_state().numpy().tobytes()).hexdigest()


def _draws_random_numbers(partition: Partition) -> bool:
    graph = partition.trace.joint
    return bool(random_ops(graph, {n.name for n in graph.graph.nodes}))
