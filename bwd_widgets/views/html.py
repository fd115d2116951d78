"""A single self-contained HTML file with the viewer: no kernel, no network."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

from ..extraction import BackwardExtraction
from .dot import existing_folder_for
from .payload import STATE_DEFAULTS, WidgetState, graph_payload

STATIC = Path(__file__).resolve().parents[1] / "static"

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
    page = PAGE.format(
        title=html.escape(f"backward graph of {extraction.model_name}"),
        css=(STATIC / "widget.css").read_text(),
        data=_script_safe(json.dumps(html_state(extraction, graph_index))),
        esm=base64.b64encode((STATIC / "widget.js").read_bytes()).decode(),
    )
    path.write_text(page)
    return path
