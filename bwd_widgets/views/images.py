"""SVG pictures inside HTML that every notebook front end shows, trusted or not."""

from __future__ import annotations

import base64
import html
import re

from ..core.text import visible


def image_html(svg: str, alt: str, width: float | None = None) -> str:
    """An SVG as an <img> with alt text, at its own width or the page's, whichever is less. A data URL:
    JupyterLab's sanitizer keeps it in an untrusted notebook (an inline <svg> it removes, and it shows
    no image/svg+xml output there), and an SVG loaded as an image runs no script."""
    own = re.search(r'<svg[^>]*?\swidth="([\d.]+)(?:pt|px)?"', svg)
    width = width if width is not None else float(own.group(1)) if own else None
    size = f' width="{width:.0f}"' if width is not None else ""
    url = "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode()
    return (
        f'<img src="{url}" alt="{html.escape(visible(alt), quote=True)}"{size} style="max-width: 100%; height: auto;">'
    )
