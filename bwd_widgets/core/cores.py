"""How many cores this process may run on: the batch's default number of workers and the studio's spare ones."""

from __future__ import annotations

import os


def cores() -> int:
    """Cores this process may use: its CPU affinity where the platform has one (a container or `taskset` may
    allow fewer than the machine has), else every core."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
