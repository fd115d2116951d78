"""One palette: every colour the static picture gives a node or an edge (views/dot.py, from views/palette.py)
is the colour js/widget.css gives the same kind, with the CSS's fallbacks for JupyterLab's theme variables
and its mixes over the background worked out here."""

import re
from pathlib import Path

import pytest

from bwd_widgets.views import dot, palette
from bwd_widgets.views.grouping import EDGE_KINDS

CSS = (Path(__file__).resolve().parents[1] / "js" / "widget.css").read_text()

DRAWN_NODE = {
    "saved": "g.bwd-node-saved",
    "tangent": "g.bwd-node-tangent",
    "gradient": "g.bwd-node-gradient",
    "op": "g.node",
    "recomputed": "g.k-recomputed",
    "group": "g.bwd-group",
}
"""The class js/panes/graph_parts.ts (`bwd-node-<kind>`, `bwd-group`) or js/dot.ts (`k-<kind>`) gives a drawn
node of each kind; an op is drawn by the rule for every node."""


def _rules(css: str) -> dict[str, dict[str, str]]:
    """Each selector's declarations (a selector list is split; nested blocks such as @media are read flat)."""
    rules: dict[str, dict[str, str]] = {}
    for selectors, body in re.findall(r"([^{}]+)\{([^{}]*)\}", re.sub(r"/\*.*?\*/", "", css, flags=re.S)):
        declarations = dict(
            (name.strip(), value.strip()) for name, value in re.findall(r"([\w-]+)\s*:\s*([^;]+)", body)
        )
        for selector in selectors.split(","):
            rules.setdefault(" ".join(selector.split()), {}).update(declarations)
    return rules


RULES = _rules(CSS)
PROPERTIES = RULES[".bwd-root"]


def _arguments(text: str) -> list[str]:
    """The comma-separated arguments of a CSS function, commas inside nested calls kept."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    return [*parts, text[start:].strip()]


def _hex(text: str) -> str:
    digits = text.lstrip("#").lower()
    return "#" + ("".join(c * 2 for c in digits) if len(digits) == 3 else digits)


def resolve(value: str) -> str:
    """A CSS colour or percentage as the widget shows it outside JupyterLab: custom properties read from the
    `.bwd-root` rule, a theme variable by its fallback, `color-mix(in srgb, ...)` mixed."""
    value = value.strip()
    if value.startswith("var("):
        name, *fallback = _arguments(value[4:-1])
        if name in PROPERTIES:
            return resolve(PROPERTIES[name])
        assert fallback, f"{name} is not set and has no fallback"
        return resolve(fallback[0])
    if value.startswith("color-mix("):
        space, first, second = _arguments(value[len("color-mix(") : -1])
        assert space == "in srgb", value
        colour, percent = first.rsplit(" ", 1)
        return palette.mix(resolve(colour), float(resolve(percent).rstrip("%")), resolve(second))
    return _hex(value) if value.startswith("#") else value


def _css(selector: str, prop: str) -> str:
    assert selector in RULES and prop in RULES[selector], f"js/widget.css has no {prop} for {selector}"
    return resolve(RULES[selector][prop])


def test_the_mix_is_css_color_mix_in_srgb():
    assert palette.mix("#f57c00", 26) == "#fcddbd"  # (245, 124, 0) at 26% over white
    assert palette.mix("#000000", 50, "#ffffff") == "#808080"  # 127.5 rounds up
    assert resolve("color-mix(in srgb, var(--bwd-warn) var(--bwd-tint), var(--bwd-bg))") == "#fcddbd"


@pytest.mark.parametrize("kind", sorted(dot.COLOURS))
def test_every_node_kind_is_filled_as_the_widget_fills_it(kind):
    assert kind in DRAWN_NODE, f"no widget.css rule is known to draw a {kind!r} node"
    legend = _css(f".bwd-kind-{kind}", "background")
    drawn = _css(f".bwd-svg {DRAWN_NODE[kind]} > path", "fill")
    assert dot.COLOURS[kind] == legend == drawn, kind


@pytest.mark.parametrize("kind", sorted(EDGE_KINDS))
def test_every_edge_kind_is_drawn_in_the_widgets_colour(kind):
    assert kind in dot.EDGE_COLOURS, f"the static picture has no colour for {kind!r} edges"
    assert dot.EDGE_COLOURS[kind] == _css(f".bwd-svg g.edge.e-{kind} > path", "stroke"), kind
    assert dot.EDGE_COLOURS[kind] == _css(f".bwd-svg g.edge.e-{kind} > polygon", "fill"), kind
