"""One registry of named partitioners: the API, the widget's selector, the magic and the CLI all read it."""

from __future__ import annotations

import contextlib
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import PartitionerError
from .kinds import BACKENDS, Backend

PartitionFn = Callable[..., Any]
"""`partition_fn(joint_gm, joint_inputs, *, num_fwd_outputs, **kwargs) -> (forward_gm, backward_gm)`."""


@dataclass(frozen=True)
class RegisteredPartitioner:
    """A partitioner users can name: how to get its function, and what the UI says of it."""

    name: str
    load: Callable[[], PartitionFn]
    takes_budget: bool
    description: str
    aliases: tuple[str, ...] = ()
    why_saved: str | None = None
    """How an activation it saves is explained: "default", "min_cut", or None (named generically)."""


@dataclass(frozen=True)
class Partitioner:
    """A resolved choice: what to call, and under which memory budget."""

    name: str
    partition_fn: PartitionFn
    memory_budget: float | None = None
    why_saved: str | None = None

    @property
    def label(self) -> str:
        """`default`, `min_cut`, or `min_cut budget 0.5`."""
        return self.name if self.memory_budget is None else f"{self.name} budget {self.memory_budget:g}"

    def config(self) -> contextlib.AbstractContextManager:
        """Patch torch's budget for the duration of one call only, never globally."""
        if self.memory_budget is None:
            return contextlib.nullcontext()
        from .compat import functorch_config

        patched: contextlib.AbstractContextManager = functorch_config.patch(
            activation_memory_budget=float(self.memory_budget)
        )
        return patched


_REGISTRY: dict[str, RegisteredPartitioner] = {}


def register_partitioner(
    name: str,
    load: Callable[[], PartitionFn],
    *,
    takes_budget: bool = False,
    description: str = "",
    aliases: tuple[str, ...] = (),
    why_saved: str | None = None,
) -> RegisteredPartitioner:
    """Make `name` usable everywhere a partitioner is chosen (API, widget, magic, CLI)."""
    if not isinstance(name, str) or not name:
        raise PartitionerError(f"a partitioner's name must be non-empty text, got {name!r}.")
    if not callable(load):
        raise PartitionerError(
            f"register_partitioner({name!r}, load): load must be a function returning the partition_fn, "
            f"got {type(load).__name__}."
        )
    entry = RegisteredPartitioner(name, load, takes_budget, description, tuple(aliases), why_saved)
    _REGISTRY[name] = entry
    return entry


def registered_partitioners() -> list[RegisteredPartitioner]:
    return list(_REGISTRY.values())


def partitioner_names() -> list[str]:
    return list(_REGISTRY)


def partitioner_choices() -> str:
    """Every name a user may type, for help texts: `default, min_cut (also min-cut, mincut)`. An alias runs its
    partitioner under its own name (the result, the widget and a batch's settings say `min_cut`), so the help
    shows which name each alias stands for rather than letting a typed `mincut` work unexplained."""
    return ", ".join(e.name + (f" (also {', '.join(e.aliases)})" if e.aliases else "") for e in _REGISTRY.values())


def _lookup(name: str) -> RegisteredPartitioner | None:
    for entry in _REGISTRY.values():
        if name == entry.name or name in entry.aliases:
            return entry
    return None


def check_budget(budget: object) -> float:
    if isinstance(budget, bool) or not isinstance(budget, numbers.Real) or not 0.0 <= float(budget) <= 1.0:
        raise PartitionerError(
            f"memory budget {budget!r} is outside [0, 1]: use 0 to recompute all it can, 1 to save freely."
        )
    return float(budget)


def resolve_partitioner(partitioner: object = "default", memory_budget: float | None = None) -> Partitioner:
    """Accept a registered name, a budget in [0, 1] (min-cut), a resolved Partitioner, or any partition_fn."""
    if memory_budget is not None:
        memory_budget = check_budget(memory_budget)
    if isinstance(partitioner, Partitioner):
        return partitioner
    if isinstance(partitioner, numbers.Real) and not isinstance(partitioner, bool):
        entry = _REGISTRY["min_cut"]
        return Partitioner(entry.name, entry.load(), check_budget(partitioner), entry.why_saved)
    if callable(partitioner):
        name = getattr(partitioner, "__name__", type(partitioner).__name__)
        return Partitioner(name, partitioner, memory_budget)
    found = _lookup("default" if partitioner is None else str(partitioner))
    if found is None:
        raise PartitionerError(
            f"unknown partitioner {partitioner!r}: use one of {', '.join(partitioner_names())}, "
            "a memory budget in [0, 1], or a partition function."
        )
    if memory_budget is not None and not found.takes_budget:
        budgeted = " or ".join(repr(e.name) for e in _REGISTRY.values() if e.takes_budget)
        raise PartitionerError(f"a memory budget needs a partitioner that takes one: pass partitioner={budgeted}.")
    return Partitioner(found.name, found.load(), memory_budget, found.why_saved)


INDUCTOR_SPLITS_WITH = "min_cut"
"""Inductor's `partition_fn` runs its joint-graph passes, then `min_cut_rematerialization_partition` (torch offers
no other split without a `custom_partitioner_fn` of one's own): a capture by backend="inductor" is split by min-cut,
at any memory budget, and by nothing else."""


def allowed_on(backend: Backend, partitioner: Partitioner | RegisteredPartitioner) -> bool:
    """Whether a capture by `backend` may be split with `partitioner` and still be that backend's partition."""
    if backend == "aot_eager":
        return True
    if partitioner.name == INDUCTOR_SPLITS_WITH:
        return True
    return isinstance(partitioner, Partitioner) and partitioner.partition_fn is _REGISTRY[INDUCTOR_SPLITS_WITH].load()


def check_allowed_on(backend: Backend, partitioner: Partitioner) -> None:
    """One sentence where `partitioner` is not one `backend` splits with (`allowed_on`)."""
    if not allowed_on(backend, partitioner):
        raise PartitionerError(
            f"this is Inductor's joint graph (backend='inductor'), which torch.compile splits with min-cut only, so "
            f"the {partitioner.name} partitioner would show a partition torch never makes: choose 'min_cut' or a "
            "memory budget, or extract with backend='aot_eager' to compare other partitioners."
        )


def resolve_for_backend(partitioner: object, memory_budget: float | None, backend: Backend) -> Partitioner:
    """`resolve_partitioner`, where a capture by `backend` may be split with it; None is the backend's own
    default ("default" after aot_eager, min-cut after Inductor)."""
    if backend not in BACKENDS:
        raise PartitionerError(f"unknown backend {backend!r}: use {' or '.join(map(repr, BACKENDS))}.")
    if partitioner is None and backend == "inductor":
        partitioner = INDUCTOR_SPLITS_WITH
    resolved = resolve_partitioner(partitioner, memory_budget)
    check_allowed_on(backend, resolved)
    return resolved


def _default_partition() -> PartitionFn:
    from .compat import default_partition

    return default_partition


def _min_cut_partition() -> PartitionFn:
    from .compat import min_cut_rematerialization_partition

    return min_cut_rematerialization_partition


register_partitioner(
    "default",
    _default_partition,
    description="saves every forward value backward reads; recomputes only what checkpoint tags ask for",
    why_saved="default",
)
register_partitioner(
    "min_cut",
    _min_cut_partition,
    takes_budget=True,
    aliases=("min-cut", "mincut"),
    description="min-cut rematerialization: recomputes cheap ops to save less; a memory budget trades more",
    why_saved="min_cut",
)
