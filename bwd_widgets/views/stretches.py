"""A long series thinned to a few points a stretch, keeping what a chart must show (its peaks): the payload's
timelines and the SVG charts' lines."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence


def _stretches(length: int, count: int) -> list[range]:
    """`count` equal stretches of `range(length)` (one per index when it is shorter)."""
    if length <= count:
        return [range(i, i + 1) for i in range(length)]
    bounds = [round(i * length / count) for i in range(count + 1)]
    return [range(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def stretch_maxima(values: Sequence[float], count: int) -> list[int]:
    """Indices of the highest value in each of `count` equal stretches (all indices when fewer): the
    payload's timelines, whose peak must survive."""
    return [max(s, key=lambda i: (values[i], -i)) for s in _stretches(len(values), count)]


def stretch_extremes(values: Sequence[float], count: int) -> list[int]:
    """Indices of the lowest and the highest value in each of `count` equal stretches, in order: the
    SVG charts' lines, whose shape and every peak must survive."""
    kept: list[int] = []
    for s in _stretches(len(values), count):
        low, high = min(s, key=lambda i: (values[i], i)), max(s, key=lambda i: (values[i], -i))
        kept += sorted({low, high})
    return kept
