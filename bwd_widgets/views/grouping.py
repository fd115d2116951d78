"""Module groups: the module tree, which nodes a set of open modules shows, and the first views.

The kernel computes the module tree and the first views once, into the payload. Drilling down runs in
the browser (js/grouping.ts `visibleGraph`, `representative`, `visibleCount`); the functions of the same
names here are their twins, and `tests/test_contract.py` writes their answers on real payloads into the
contract fixture for `js/test/contract.test.ts` to check against the TypeScript ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, Literal, TypedDict, TypeVar, get_args

from typing_extensions import ReadOnly

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

GROUP_PREFIX = "group:"
FIRST_VIEW_LIMIT = 40
"""The most nodes a first view may draw before it is tried for readability."""
LABEL_UNITS = 11.5
"""Labels are 10 pt; with their line box a label is this many drawing units high."""
MIN_LABEL_PX = 9.5
"""Labels must be at least this many pixels high on screen for a drawing to count as readable."""
LABEL_FONT_UNITS = 10.0
"""Labels are drawn at this font size, in drawing units (views/dot.py and js/dot.ts write `fontsize=10`)."""
MIN_GLYPH_PX = 9.0
"""The smallest on-screen size of a label's glyphs (font size times the view's scale) that counts as readable:
`MIN_LABEL_PX` measures a label's line box, which would let the glyphs shrink to 8.3 px."""
MAX_SCALE = 2.0
"""A small drawing is enlarged to fill the pane, but no further than this (pixels per drawing unit)."""
MIN_SPAN = 0.66
"""A first view spans at least this share of the pane's width or height (a little over the 60% the tests
ask of the drawn nodes: the drawing has a margin around them)."""
TRY_ACROSS_BELOW = 40
"""Drawings of fewer nodes are also tried left to right, which suits a short chain in a wide pane."""


class Grouped(TypedDict):
    """What the grouping rules read of a backward node (a payload GraphNode has these and more)."""

    id: ReadOnly[str]
    module: ReadOnly[str]
    kind: ReadOnly[str]
    recomputed: ReadOnly[bool]


class ModuleRow(TypedDict):
    path: str
    """Dotted module path; "" is the model itself (its `direct` nodes are drawn at the top level)."""
    parent: str
    depth: int
    """1 for a top-level module; 0 for ""."""
    size: int
    """Backward nodes inside, nested modules included."""
    direct: int
    """Backward nodes whose own module it is."""
    saved_bytes: int
    """Saved activation bytes of this partition inside, nested modules included."""


class Views(TypedDict):
    """The graph pane's rules, computed once (this module): the browser draws what they say."""

    modules: list[ModuleRow]
    first: list[list[str]]
    """Open modules of each first view to try, most detailed first, down to all collapsed."""
    label_units: float
    """Height of a label line in drawing units (10 pt labels, 11.5 with their line box)."""
    min_label_px: float
    """A drawing is readable when its labels are at least this many pixels high on screen."""
    label_font_units: float
    """The labels' font size in drawing units."""
    min_glyph_px: float
    """...and when their glyphs (font size times scale) are at least this many pixels."""
    max_scale: float
    """A small drawing is enlarged to fill the pane no further than this many pixels per drawing unit."""
    min_span: float
    """A first view is good when readable and spanning at least this share of the pane's width or height."""
    try_across_below: int
    """A drawing of fewer visible nodes that is not good top to bottom is tried left to right too."""


N = TypeVar("N", bound=Grouped)


EdgeKind = Literal["saved", "recomputed", "gradient"]
"""What a drawn edge carries, when all the edges it stands for agree (`VisibleGraph.edge_kinds`)."""
EDGE_KINDS: tuple[EdgeKind, ...] = get_args(EdgeKind)


@dataclass
class VisibleNode(Generic[N]):
    """A drawn node: a backward node itself, or a collapsed module (`path`) standing for `size` nodes."""

    id: str
    cluster: str
    """The open module it is drawn inside ("" for the top level)."""
    node: N | None = None
    path: str | None = None
    size: int = 0


@dataclass
class VisibleGraph(Generic[N]):
    nodes: list[VisibleNode[N]]
    edges: list[tuple[str, str]]
    saved_only: set[tuple[str, str]] = field(default_factory=set)
    """Edges out of a collapsed module that carry only forward values, saved or recomputed (not ranked by)."""
    edge_kinds: dict[tuple[str, str], EdgeKind] = field(default_factory=dict)
    """What a drawn edge carries when all the edges it stands for agree: "saved" (a value saved in
    forward, read here), "recomputed" (forward values, some recomputed in backward, read here) or
    "gradient" (into a gradient output); the rest carry backward data flow."""


def ancestors(path: str) -> list[str]:
    """ "a.b.c" -> ["a", "a.b", "a.b.c"]; "" -> []."""
    parts = path.split(".") if path else []
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def parent_of(path: str) -> str:
    return path.rpartition(".")[0]


def module_tree(nodes: Sequence[Grouped], saved: Iterable[tuple[str, int]] = ()) -> list[ModuleRow]:
    """Every module path in order of first appearance ("" first), with its node counts and the saved
    activation bytes (`saved`: (module, bytes) pairs) inside it."""
    rows: dict[str, ModuleRow] = {"": ModuleRow(path="", parent="", depth=0, size=len(nodes), direct=0, saved_bytes=0)}
    for node in nodes:
        for path in ancestors(node["module"]):
            row = rows.setdefault(
                path,
                ModuleRow(
                    path=path, parent=parent_of(path), depth=len(ancestors(path)), size=0, direct=0, saved_bytes=0
                ),
            )
            row["size"] += 1
        rows[node["module"]]["direct"] += 1
    for module, count in saved:
        for path in ["", *ancestors(module)]:
            if path in rows:
                rows[path]["saved_bytes"] += count
    return list(rows.values())


def representative(node: Grouped, expanded: set[str]) -> str:
    """The visible id standing for a node: itself, or its outermost collapsed module."""
    for path in ancestors(node["module"]):
        if path not in expanded:
            return GROUP_PREFIX + path
    return node["id"]


def visible_count(tree: Sequence[ModuleRow], expanded: set[str], path: str = "") -> int:
    """How many nodes `visible_graph` would draw."""
    rows = {row["path"]: row for row in tree}
    children: dict[str, list[str]] = {}
    for row in tree:
        if row["path"]:
            children.setdefault(row["parent"], []).append(row["path"])

    def count(at: str) -> int:
        inner = (count(child) if child in expanded else 1 for child in children.get(at, []))
        return rows[at]["direct"] + sum(inner) if at in rows else 0

    return count(path)


def visible_graph(nodes: Sequence[N], edges: Iterable[Sequence[str]], expanded: set[str]) -> VisibleGraph[N]:
    """The nodes and merged edges drawn with `expanded` open; the rest collapsed into their modules."""
    sizes = {row["path"]: row["size"] for row in module_tree(nodes)}
    shown: dict[str, VisibleNode[N]] = {}
    owner: dict[str, str] = {}
    for node in nodes:
        visible = representative(node, expanded)
        owner[node["id"]] = visible
        if visible in shown:
            continue
        if visible == node["id"]:
            shown[visible] = VisibleNode(visible, node["module"], node=node)
        else:
            path = visible[len(GROUP_PREFIX) :]
            shown[visible] = VisibleNode(visible, parent_of(path), path=path, size=sizes.get(path, 0))
    saved = {n["id"] for n in nodes if n["kind"] == "saved"}
    forward_values = saved | {n["id"] for n in nodes if n["recomputed"]}
    gradients = {n["id"] for n in nodes if n["kind"] == "gradient"}
    carries: dict[tuple[str, str], bool] = {}
    reads_saved: dict[tuple[str, str], bool] = {}
    reads_forward: dict[tuple[str, str], bool] = {}
    into_gradient: dict[tuple[str, str], bool] = {}
    for source, target in edges:
        start, end = owner.get(source), owner.get(target)
        if start is None or end is None or start == end:
            continue
        key = (start, end)
        carries[key] = carries.get(key, True) and source in forward_values and start != source
        reads_saved[key] = reads_saved.get(key, True) and source in saved
        reads_forward[key] = reads_forward.get(key, True) and source in forward_values
        into_gradient[key] = into_gradient.get(key, True) and target in gradients
    kinds: dict[tuple[str, str], EdgeKind] = {key: "saved" for key, only in reads_saved.items() if only}
    kinds.update((key, "recomputed") for key, only in reads_forward.items() if only and key not in kinds)
    kinds.update((key, "gradient") for key, only in into_gradient.items() if only and key not in kinds)
    saved_only = {key for key, only in carries.items() if only}
    return VisibleGraph(list(shown.values()), list(carries), saved_only, kinds)


def first_views(tree: Sequence[ModuleRow], limit: int = FIRST_VIEW_LIMIT) -> list[list[str]]:
    """Modules open to depth d for each d whose view draws at most `limit` nodes, most detailed first,
    down to every module collapsed (the top-level modules, as Model Explorer opens a model). The graph
    pane and the static SVG draw the first of them that is readable."""
    deepest = max((row["depth"] for row in tree), default=0)
    views = []
    for depth in range(deepest, -1, -1):
        expanded = [row["path"] for row in tree if row["path"] and row["depth"] <= depth]
        if depth == 0 or visible_count(tree, set(expanded)) <= limit:
            views.append(expanded)
    return views


def view_rules(nodes: Sequence[Grouped], saved: Iterable[tuple[str, int]]) -> Views:
    """The payload's `views`: the module tree (`saved`: (module, saved activation bytes) pairs) and
    the first views, with the figures a drawing is fitted and judged by: the browser's (js/firstview.ts,
    js/panzoom.ts) and the static picture's (views/static.py) read them here, written once."""
    tree = module_tree(nodes, saved)
    return Views(
        modules=tree,
        first=first_views(tree),
        label_units=LABEL_UNITS,
        min_label_px=MIN_LABEL_PX,
        label_font_units=LABEL_FONT_UNITS,
        min_glyph_px=MIN_GLYPH_PX,
        max_scale=MAX_SCALE,
        min_span=MIN_SPAN,
        try_across_below=TRY_ACROSS_BELOW,
    )
