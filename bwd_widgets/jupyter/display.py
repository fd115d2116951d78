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

The picture is published under a display id and follows the partition the widget shows, so that a saved
notebook shows where its author left the widget: a front end updates by display id a display_data output,
never a cell's execute_result, so a result that ends a cell displays itself (`display_hook.RichDisplay`'s
`_ipython_display_`, answered by `display_of`): the widget, then the picture, and no `Out[n]`.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from ..extraction.display_hook import in_kernel
from ..studio.compare import Sweep

if TYPE_CHECKING:
    from collections.abc import Callable

    from .widget import BackwardGraphWidget


def _published_widget(obj: object) -> BackwardGraphWidget | None:
    """In a kernel: publish the widget for `obj` (a placeholder first, which becomes it) with `obj`'s text, and
    return it; None outside a kernel, if this cell already drew it, or for an empty sweep."""
    if display_of(obj) is None:
        return None
    from IPython.display import display

    from .progress import placeholder
    from .widget import show

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


def display_of(obj: object) -> Callable[[], object] | None:
    """How `obj` shows when it ends a cell in a kernel (`display_following`), or None: outside a kernel, if this
    cell already drew it, or for an empty sweep (IPython then shows its text)."""
    from IPython import get_ipython

    if not in_kernel(get_ipython()) or (isinstance(obj, Sweep) and not obj.points):
        return None
    from .widget import drawn_in_this_cell

    return None if drawn_in_this_cell(obj) else functools.partial(display_following, obj)


def display_following(obj: object) -> BackwardGraphWidget | None:
    """In a kernel: publish the widget for `obj`, then its picture under a display id that follows the partition
    the widget shows (with `obj`'s text), and return the widget; None (nothing published) where `display_of`
    answers None."""
    from IPython.display import display

    widget = _published_widget(obj)
    if widget is None:
        return None
    handle = display(widget.picture_bundle(text=repr(obj)), raw=True, display_id=True)
    if handle is not None:
        widget.follow_picture(handle, text=repr(obj))
    return widget
