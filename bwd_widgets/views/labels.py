"""Where a chart's point labels go: inside the plot, clear of the points, of each other and of the axis
numbers, at widths a sans-serif font draws (the browser test measures the real glyphs)."""

from __future__ import annotations

LABEL_SIZE = 10
"""Point labels' font size."""

NARROW = set(".,:;' il|()[]")
"""Characters about half as wide as the rest in a sans-serif font (digits are all as wide as a letter)."""


def _text_width(text: str, size: float) -> float:
    """About how wide `text` is drawn at font size `size` in a sans-serif font: 0.64 em a character, as wide
    as DejaVu Sans (the usual sans-serif on Linux) draws letters and digits; wider than Arial, never narrower."""
    return sum(0.32 if ch in NARROW else 0.64 for ch in text) * size


def placed_labels(
    dots: list[tuple[float, float]], labels: list[str], bounds: tuple[float, float, float, float]
) -> list[tuple[float, float, str]]:
    """Where each dot's label goes (x, baseline y, text-anchor): the first spot around its dot (right, left,
    centred; just above or below, then further) that stays inside `bounds` (left, top, right, bottom) and
    clear of every dot and of the labels placed before it; when none is clear, the first that stays inside.
    Lower dots go first."""
    taken = [(x - 5, y - 5, x + 5, y + 5) for x, y in dots]  # the dots themselves

    def box(x: float, y: float, anchor: str, text: str) -> tuple[float, float, float, float]:
        wide = _text_width(text, LABEL_SIZE)
        left = x - wide if anchor == "end" else x - wide / 2 if anchor == "middle" else x
        return (left, y - LABEL_SIZE, left + wide, y + 3)

    def clear(b: tuple[float, float, float, float], others: list) -> bool:
        return all(b[2] <= o[0] or o[2] <= b[0] or b[3] <= o[1] or o[3] <= b[1] for o in others)

    placed: dict[int, tuple[float, float, str]] = {}
    for i in sorted(range(len(dots)), key=lambda i: (-dots[i][1], dots[i][0])):
        (x, y), text = dots[i], labels[i]
        options = [
            (x + dx, y + dy, anchor)
            for dy in (-6, 14, -20, 28, -34)
            for dx, anchor in ((7, "start"), (-7, "end"), (0, "middle"))
        ]
        inside = [o for o in options if _within(box(*o, text), bounds)]
        own = [t for j, t in enumerate(taken) if j != i]
        chosen = next((o for o in inside if clear(box(*o, text), own)), inside[0] if inside else options[0])
        placed[i] = chosen
        taken.append(box(*chosen, text))
    return [placed[i] for i in range(len(dots))]


def _within(b: tuple[float, float, float, float], bounds: tuple[float, float, float, float]) -> bool:
    return bounds[0] <= b[0] and b[2] <= bounds[2] and bounds[1] <= b[1] and b[3] <= bounds[3]
