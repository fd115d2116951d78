"""Rich display: in a Jupyter kernel, an extraction, a comparison or a sweep that ends a cell shows as
the widget; in a terminal it stays text.

A widget shows as two outputs. The first is the widget itself, with a static SVG for GitHub and
nbviewer and an empty HTML part, so that a front end without the widget shows nothing there. The
second is a static picture as sanitizer-safe HTML (the headline numbers, the first view of the graph,
the memory timeline, the largest saved values: `views/html.py` `fallback_html`). JupyterLab renders a
widget output whose model is gone (a restarted kernel, a notebook opened the next day) as "Error
displaying widget: model not found" and never falls back to another part of that output, so the
picture has to be an output of its own; a style rule in it (kept only in a trusted notebook, where the
widget can run) hides whichever of the two is not drawn. An untrusted notebook drops the rule and
shows the picture.

The results' own `_repr_mimebundle_` (from `display_hook.RichDisplay`) asks `widget_bundle`, which the
package's façade hands to the hook; nothing is registered with IPython. It publishes the widget and
returns the picture, with the result's own text, as the cell's result.
"""

from __future__ import annotations

from ..extraction.display_hook import in_kernel
from ..studio.compare import Sweep


def widget_bundle(obj: object) -> tuple[dict, dict] | None:
    """In a kernel: publish the widget for `obj`, and return the static picture that follows it, with
    `obj`'s own text; None (plain text) outside a kernel, or if this cell already drew it."""
    from IPython import get_ipython

    if not in_kernel(get_ipython()):
        return None
    from .widget import drawn_in_this_cell, show

    if drawn_in_this_cell(obj):
        return None
    if isinstance(obj, Sweep) and not obj.points:
        return None
    from IPython.display import display

    from .progress import placeholder

    # building a big model's widget takes seconds: a placeholder says so, then becomes the widget
    title = f"Building the view of {getattr(obj, 'model_name', None) or type(obj).__name__}"
    handle = display({"text/plain": f"{title}\u2026"}, raw=True, display_id=True)
    with placeholder(handle, title):
        widget = show(obj)
        data, metadata = widget._repr_mimebundle_()
    if handle is None:
        widget.publish(text=repr(obj))
    else:
        handle.update({**data, "text/plain": repr(obj)}, metadata=metadata, raw=True)
    return widget.picture_bundle(text=repr(obj)), {}
