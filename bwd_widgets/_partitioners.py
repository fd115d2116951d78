"""Turn a user's partitioner choice into a partition function and the config it needs."""

from __future__ import annotations

import contextlib
import numbers
from dataclasses import dataclass
from typing import Callable

from ._errors import PartitionerError

PARTITIONER_NAMES = ("default", "min_cut")


@dataclass(frozen=True)
class Partitioner:
    """A resolved partitioner: what to call, and under which memory budget."""

    name: str
    partition_fn: Callable
    memory_budget: float | None = None

    @property
    def label(self) -> str:
        if self.memory_budget is None:
            return self.name
        return f"{self.name}(budget={self.memory_budget:g})"

    def config(self):
        """Patch torch's budget for the duration of one call only, never globally."""
        if self.memory_budget is None:
            return contextlib.nullcontext()
        import torch._functorch.config as functorch_config

        return functorch_config.patch(activation_memory_budget=float(self.memory_budget))


def _check_budget(budget) -> float:
    if isinstance(budget, bool) or not isinstance(budget, numbers.Real) or not 0.0 <= float(budget) <= 1.0:
        raise PartitionerError(
            f"memory budget {budget!r} is outside [0, 1]: use 0 to recompute all it can, 1 to save freely."
        )
    return float(budget)


def resolve_partitioner(partitioner="default", memory_budget=None) -> Partitioner:
    """Accept "default", "min_cut", a budget in [0, 1] (min-cut), or any partition_fn."""
    from functorch.compile import default_partition, min_cut_rematerialization_partition

    if memory_budget is not None:
        memory_budget = _check_budget(memory_budget)
    if isinstance(partitioner, Partitioner):
        return partitioner
    if isinstance(partitioner, numbers.Real) and not isinstance(partitioner, bool):
        return Partitioner("min_cut", min_cut_rematerialization_partition, _check_budget(partitioner))
    if callable(partitioner):
        name = getattr(partitioner, "__name__", type(partitioner).__name__)
        return Partitioner(name, partitioner, memory_budget)
    if partitioner in ("default", None):
        if memory_budget is not None:
            raise PartitionerError(
                "a memory budget needs the min-cut partitioner: pass partitioner='min_cut'."
            )
        return Partitioner("default", default_partition)
    if partitioner in ("min_cut", "min-cut", "mincut"):
        return Partitioner("min_cut", min_cut_rematerialization_partition, memory_budget)
    raise PartitionerError(
        f"unknown partitioner {partitioner!r}: use one of {', '.join(PARTITIONER_NAMES)}, "
        "a memory budget in [0, 1], or a partition function."
    )
