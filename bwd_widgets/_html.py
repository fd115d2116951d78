"""A single self-contained HTML file with the viewer: no kernel, no network."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

from ._graph_data import graph_payload

STATIC = Path(__file__).parent / "static"

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title><style>{css}</style></head>
<body>
<div id="bwd-app"></div>
<script type="application/json" id="bwd-data">{data}</script>
<script type="text/plain" id="bwd-esm">{esm}</script>
<script type="module">
const bytes = Uint8Array.from(atob(document.getElementById("bwd-esm").textContent), (c) => c.charCodeAt(0));
const url = URL.createObjectURL(new Blob([bytes], {{ type: "text/javascript" }}));
const {{ render }} = await import(url);
const state = JSON.parse(document.getElementById("bwd-data").textContent);
const handlers = {{}};
const model = {{
  get: (name) => state[name],
  set: (name, value) => {{ state[name] = value; (handlers["change:" + name] || []).forEach((f) => f()); }},
  save_changes: () => {{}},
  on: (event, callback) => {{ (handlers[event] = handlers[event] || []).push(callback); }},
}};
render({{ model, el: document.getElementById("bwd-app") }});
</script>
</body></html>
"""


def _script_safe(text: str) -> str:
    """JSON inside <script>: `</` and `<!--` cannot end or comment the element."""
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def html_state(extraction, graph_index: int = 0) -> dict:
    return {
        "data": graph_payload(extraction, graph_index),
        "selected": "",
        "partitioner": extraction.partitioner,
        "memory_budget": extraction.memory_budget if extraction.memory_budget is not None else 1.0,
        "graph_index": graph_index,
        "busy": False,
        "error": "",
        "previous": {},
        "can_rerun": False,
        "comparison_rows": [],
        "compare_index": -1,
        "sweep_points": [],
        "sweep_index": -1,
        "sweep_progress": "",
    }


def write_html(extraction, path, graph_index: int = 0) -> Path:
    path = Path(path)
    page = PAGE.format(
        title=html.escape(f"backward graph of {extraction.model_name}"),
        css=(STATIC / "widget.css").read_text(),
        data=_script_safe(json.dumps(html_state(extraction, graph_index))),
        esm=base64.b64encode((STATIC / "widget.js").read_bytes()).decode(),
    )
    path.write_text(page)
    return path
