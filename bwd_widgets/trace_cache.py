"""The trace cache: an nn.Module extracted again with the same state, inputs and settings reuses its
joint graph instead of tracing again.

The key holds values for plain data and identities for everything else, so that a change to either
misses the cache.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import OrderedDict

import torch

from .core.analysis import random_ops
from .core.compat import pytree
from .core.kinds import Mode
from .core.trace import Partition
from .extraction import BackwardExtraction

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


_SIMPLE = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.Size)


def _tensor_key(t: torch.Tensor) -> tuple:
    return (id(t), t._version, tuple(t.shape), t.dtype, t.device.type, t.requires_grad)


def _value_key(value: object, depth: int = 0) -> object:
    """Values for plain data, identities for everything else: a change to either misses the cache."""
    if isinstance(value, torch.Tensor):
        return _tensor_key(value)
    if isinstance(value, _SIMPLE):
        return (type(value).__name__, str(value) if isinstance(value, (torch.dtype, torch.device)) else value)
    if isinstance(value, (list, tuple)) and depth < 3:
        return (type(value).__name__, tuple(_value_key(v, depth + 1) for v in value))
    if isinstance(value, dict) and depth < 3:
        return ("dict", tuple((str(k), _value_key(v, depth + 1)) for k, v in value.items()))
    return (type(value).__name__, id(value))


def _globals_key(function: object) -> tuple:
    """The globals a forward reads by name (a constant changed between calls misses the cache)."""
    code = getattr(function, "__code__", None)
    namespace = getattr(function, "__globals__", {})
    if code is None:
        return ()
    return tuple((n, _value_key(namespace[n])) for n in code.co_names if n in namespace)


def _module_key(module: torch.nn.Module) -> tuple:
    entries = []
    for path, sub in module.named_modules(remove_duplicate=False):
        attributes = tuple(
            (k, _value_key(v)) for k, v in vars(sub).items() if k not in ("_parameters", "_buffers", "_modules")
        )
        cls = type(sub)
        class_data = tuple(
            (k, _value_key(v)) for k, v in vars(cls).items() if isinstance(v, _SIMPLE) and not k.startswith("__")
        )
        entries.append((path, id(sub), cls, attributes, class_data, _globals_key(cls.forward)))
    tensors = list(module.named_parameters(remove_duplicate=False)) + list(module.named_buffers(remove_duplicate=False))
    return (tuple(entries), tuple((n, _tensor_key(t)) for n, t in tensors))


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
    session_state = (
        torch.is_autocast_enabled("cpu"),
        torch.get_autocast_dtype("cpu"),
        torch.is_autocast_enabled("cuda"),
        torch.get_autocast_dtype("cuda"),
        torch.get_default_dtype(),
        torch.are_deterministic_algorithms_enabled(),
    )
    return (
        id(model),
        _module_key(model),
        str(spec),
        tuple(_value_key(v) for v in leaves),
        tuple(sorted(decided.items())),
        mode,
        capture_scalars,
        session_state,
    )


def rng_digest() -> str:
    return hashlib.sha1(torch.get_rng_state().numpy().tobytes()).hexdigest()


def _draws_random_numbers(partition: Partition) -> bool:
    graph = partition.trace.joint
    return bool(random_ops(graph, {n.name for n in graph.graph.nodes}))
