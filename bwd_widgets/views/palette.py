"""The one palette of the graph's kinds: the widget's colours (js/widget.css) as a picture without CSS draws them.

js/widget.css colours each kind of node and edge from JupyterLab's theme variables, with these colours as
their fallbacks, and tints a node's fill by mixing its colour over the background (`color-mix(in srgb, warn
26%, bg)`). A static picture (views/dot.py: `bw.to_dot`, `bw.save_svg`, the saved notebook's SVG) has no
theme: it draws the same mixes over a white background, computed here from the same figures.
`tests/test_palette.py` reads js/widget.css and checks every kind's colour here is what its CSS rule gives
with the fallbacks, so the two cannot drift apart.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .grouping import EdgeKind

BACKGROUND = "#ffffff"
"""`--bwd-bg`'s fallback (JupyterLab's `--jp-layout-color0`)."""
WARN = "#f57c00"
"""`--bwd-warn`'s fallback: saved values."""
BRAND = "#1976d2"
"""`--bwd-brand`'s fallback: tangents."""
GOOD = "#388e3c"
"""`--bwd-good`'s fallback: gradients."""
INFO = "#0097a7"
"""`--bwd-info`'s fallback: modules drawn as one box."""
VIOLET = "#8e24aa"
"""`--bwd-accent-violet`: recomputed values."""
TINT = 26
"""`--bwd-tint`: the percentage of a kind's colour in the fill of a saved, tangent or gradient node."""
SOFT_TINT = 18
"""The percentage in the fill of a recomputed node and of a module."""


def mix(colour: str, percent: float, over: str = BACKGROUND) -> str:
    """CSS `color-mix(in srgb, colour percent%, over)`: each channel mixed, then rounded half up to a byte."""
    share = percent / 100
    channels = (int(colour[i : i + 2], 16) * share + int(over[i : i + 2], 16) * (1 - share) for i in (1, 3, 5))
    return "#" + "".join(f"{math.floor(c + 0.5):02x}" for c in channels)


NODE_FILLS = {
    "saved": mix(WARN, TINT),
    "tangent": mix(BRAND, TINT),
    "gradient": mix(GOOD, TINT),
    "op": BACKGROUND,
    "recomputed": mix(VIOLET, SOFT_TINT),
    "group": mix(INFO, SOFT_TINT),
}
"""Node fills by `views/dot.py` `node_kind`: js/widget.css's `.bwd-kind-<kind>` (the legend) and the drawn
node's rule, over a white background."""
EDGE_COLOURS: dict[EdgeKind, str] = {"saved": WARN, "recomputed": VIOLET, "gradient": GOOD}
"""Edge colours by `grouping.EDGE_KINDS`: js/widget.css's `g.edge.e-<kind>` strokes."""
