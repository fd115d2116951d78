"""Trace once, partition many: compare partitioners, sweep memory budgets and diff two partitions
(`compare.py`), with fake-mode work shared by forked workers (`forked.py`), and the advisor that picks a plan
for a memory target (`advisor/`).

Imports: `core`, `graphnet` and `extraction`.
"""

from .compare import (
    DEFAULT_BUDGETS,
    Comparison,
    Sweep,
    SweepPoint,
    compare,
    diff,
    flag_peaks,
    listed,
    row,
    sweep,
    torch_budget_ratio,
)

__all__ = [
    "DEFAULT_BUDGETS",
    "Comparison",
    "Sweep",
    "SweepPoint",
    "compare",
    "diff",
    "flag_peaks",
    "listed",
    "row",
    "sweep",
    "torch_budget_ratio",
]
