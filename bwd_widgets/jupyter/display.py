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

The picture follows the widget. It is published under a display id, and each partition the widget shows
(partitioner, budget, sweep point, plan, compiled region) redraws it once the widget pauses and sends it as an
update of that id (`BackwardGraphWidget.follow_picture`): the front end puts the update in the output's place,
so a saved notebook shows the partition its author left on screen. The widget's own output keeps the SVG of the
partition it was displayed with: updating it would make the front end draw the widget again from scratch.

The results' own `_repr_mimebundle_` (from `display_hook.RichDisplay`) asks `widget_bundle`, which the
package's façade hands to the hook; nothing is registered with IPython. It publishes the widget and
returns the picture, with the result's own text, as the cell's result. That picture does not follow:
JupyterLab updates by display id only a display_data output, never a cell's execute_result, and IPython sends
an execute_result (with text: an `Out[n]`) for any value that ends a cell unless the value displays itself.
`display_following` is that self-display (the widget, then a picture that follows, no result), for a
`_ipython_display_` on the results to call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..extraction.display_hook import in_kernel
from ..studio.compare import Sweep

if TYPE_CHECKING:
    from .widget import BackwardGraphWidget


def _published_widget(obj: object) -> BackwardGraphWidget | None:
    """In a kernel: publish the widget for `obj` (a placeholder first, which becomes it) with `obj`'s text, and
    return it; None outside a kernel, if this cell already drew it, or for an empty sweep."""
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
    return widget


def widget_bundle(obj: object) -> tuple[dict, dict] | None:
    """In a kernel: publish the widget for `obj`, and return the static picture that follows it, with
    `obj`'s own text; None (plain text) outside a kernel, or if this cell already drew it."""
    widget = _published_widget(obj)
    return None if widget is None else (widget.picture_bundle(text=repr(obj)), {})


def display_following(obj: object) -> BackwardGraphWidget | None:
    """In a kernel: publish the widget for `obj`, then its picture under a display id that follows the partition
    the widget shows (with `obj`'s text), and return the widget; None (nothing published) where `widget_bundle`
    would answer None."""
    from IPython.display import display

    widget = _published_widget(obj)
    if widget is None:
        return None
    handle = display(widget.picture_bundle(text=repr(obj)), raw=True, display_id=True)
    if handle is not None:
        widget.follow_picture(handle, text=repr(obj))
    return widget
