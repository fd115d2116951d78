"""A single self-contained HTML file with the viewer: no kernel, no network; and the static picture a
notebook output keeps beside the widget, as HTML every front end shows (`fallback_html`)."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.errors import FrontEndNotBuiltError
from ..core.text import visible
from ..core.units import format_bytes
from .dot import existing_folder_for, short_dtype
from .images import image_html
from .payload import STATE_DEFAULTS, GraphData, WidgetState, graph_payload
from .static import MAX_BYTES, Drawing, headline

if TYPE_CHECKING:
    from ..extraction.result import BackwardExtraction

STATIC = Path(__file__).resolve().parents[1] / "static"


def front_end() -> tuple[Path, Path]:
    """The built front end, its script and its style sheet; FrontEndNotBuiltError in one sentence where a source
    checkout has not built it yet (anywidget would say only `File not found`)."""
    script, style = STATIC / "widget.js", STATIC / "widget.css"
    for path in (script, style):
        if not path.is_file():
            raise FrontEndNotBuiltError(
                f"the widget's front end is not built (bwd_widgets/static/{path.name} is missing): run `npm run build` "
                "in the project, or install the package with pip, which builds it."
            )
    return script, style


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title><style>{css}</style></head>
<body>
<div id="bwd-app"></div>
<script type="application/json" id="bwd-data">{data}</script>
<script type="text/plain" id="bwd-esm">{esm}</script>
<script type="module">
const bytes = Uint8Array.from(atob(document.getElementById("bwd-esm").textContent), (c) => c.charCodeAt(0));
const url = URL.createObjectURL(new Blob([bytes], {{ type: "text/javascript" }}));
const widget = (await import(url)).default;
const state = JSON.parse(document.getElementById("bwd-data").textContent);
const handlers = {{}};
const model = {{
  get: (name) => state[name],
  set: (name, value) => {{ state[name] = value; (handlers["change:" + name] || []).forEach((f) => f()); }},
  save_changes: () => {{}},
  on: (event, callback) => {{ (handlers[event] = handlers[event] || []).push(callback); }},
  off: (event, callback) => {{ handlers[event] = (handlers[event] || []).filter((f) => f !== callback); }},
}};
const experimental = {{ invoke: async () => {{ throw new Error("no kernel in a static page"); }} }};
widget.render({{ model, el: document.getElementById("bwd-app"), experimental }});
</script>
</body></html>
"""


def _script_safe(text: str) -> str:
    """JSON inside <script>: `</` and `<!--` cannot end or comment the element."""
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def html_state(extraction: BackwardExtraction, graph_index: int = 0) -> WidgetState:
    """The widget's state for a page with no kernel: nothing can be partitioned again."""
    state = WidgetState(**STATE_DEFAULTS, data=graph_payload(extraction, graph_index))
    state["partitioner"] = extraction.partitioner
    state["memory_budget"] = 1.0 if extraction.memory_budget is None else extraction.memory_budget
    state["graph_index"] = graph_index
    state["can_rerun"] = False
    return state


def to_html(extraction: BackwardExtraction, path: str | Path, graph_index: int = 0) -> Path:
    """One self-contained HTML file with the same viewer: no kernel, no network."""
    path = existing_folder_for(path)
    script, style = front_end()
    page = PAGE.format(
        title=html.escape(f"backward graph of {extraction.model_name}"),
        css=style.read_text(),
        data=_script_safe(json.dumps(html_state(extraction, graph_index))),
        esm=base64.b64encode(script.read_bytes()).decode(),
    )
    path.write_text(page)
    return path


# --- the static fallback a notebook output keeps beside the widget -------------------------------------

STATIC_CLASS = "bwd-static"
TOP_SAVED = 10
LEFT = ' style="text-align: left;"'
NOWRAP = ' style="text-align: left; white-space: nowrap;"'
STATIC_STYLE = f"""<style>
.jp-OutputArea-child:has(.bwd-root) + .jp-OutputArea-child:has(.{STATIC_CLASS}) {{ display: none; }}
.jp-OutputArea-child:not(:has(.bwd-root)):has(+ .jp-OutputArea-child .{STATIC_CLASS}) {{ display: none; }}
</style>"""
"""In a trusted notebook (the only place a `<style>` survives the sanitizer): while the widget output just
before this picture is drawn, the picture is hidden; while it is not (loading, or "model not found" after
the kernel restarted), the widget's output is hidden and the picture shows."""


def _text(value: object) -> str:
    return html.escape(visible(value), quote=True)


def saved_table(data: GraphData, top: int = TOP_SAVED) -> str:
    """The largest saved values as an HTML table of text, in the widget's words: what each is (`kind_label`), how
    big, what it adds on top of the forward inputs, made where, and what torch says of it."""
    rows = sorted(data["saved"], key=lambda r: (-r["activation_bytes"], -r["bytes"], r["name"]))
    columns = ("saved value", "kind", "shape", "bytes", "adds", "made by", "module", "torch says")
    head = "".join(f"<th{LEFT}>{h}</th>" for h in columns)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td{NOWRAP if i in (2, 3, 4) else LEFT}>{_text(cell)}</td>"
            for i, cell in enumerate(
                (
                    row["name"] + (f" ({row['source']})" if row["source"] and row["source"] != row["name"] else ""),
                    row["kind_label"],
                    f"[{', '.join(map(str, row['shape']))}] {short_dtype(row['dtype'])}",
                    format_bytes(row["bytes"]),
                    format_bytes(row["activation_bytes"]),
                    row["producer"],
                    row["module"],
                    row["torch_reason"] or "\u2014",
                )
            )
        )
        + "</tr>"
        for row in rows[:top]
    )
    more = f"<p>{len(rows) - top} more saved values in the widget.</p>" if len(rows) > top else ""
    title = f"<p><strong>The {min(top, len(rows))} largest of {len(rows)} saved values</strong></p>"
    return f"{title}<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{more}"


def fallback_html(data: GraphData, drawing: Drawing | None, timeline_svg: str) -> str:
    """The no-JavaScript picture of a widget as sanitizer-safe HTML: the headline numbers, the first view
    of the graph, the memory timeline and the largest saved values. Every word from the kernel is
    escaped text; the pictures are <img> with alt text."""
    lines = headline(data)
    parts = [f"<p><strong>{_text(lines[0])}</strong></p>", *(f"<p>{_text(line)}</p>" for line in lines[1:])]
    pictures = []
    if drawing is not None and len(drawing.svg.encode()) <= MAX_BYTES:
        shown = data["partition"]
        alt = (
            f"Backward graph of {data['model']} as the widget first shows it: {shown['backward_nodes']} backward "
            f"nodes, {shown['saved']} saved values; saved values amber, gradient outputs green."
        )
        pictures.append(image_html(drawing.svg, alt, drawing.width))
    peak = data["run"]["memory"]["peak"]
    alt = (
        f"Activation memory over one training step of {data['model']}, forward then backward: peak "
        f"{format_bytes(peak['live_bytes'])} after {peak['node']} ({peak['phase']})."
    )
    pictures.append(image_html(timeline_svg, alt))
    parts.append(
        f'<div style="display: flex; flex-wrap: wrap; gap: 16px; align-items: flex-start;">{"".join(pictures)}</div>'
    )
    parts.append(saved_table(data))
    parts.append(
        "<p><em>A static picture: the interactive widget draws here while the notebook's kernel runs.</em></p>"
    )
    return f'<div class="{STATIC_CLASS}">{"".join(parts)}</div>{STATIC_STYLE}'
