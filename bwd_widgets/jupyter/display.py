"""Rich display: in a Jupyter kernel, an extraction, a comparison or a sweep that ends a cell shows as
the widget (with a static SVG beside it for GitHub and nbviewer); in a terminal it stays text.

The results' own `_repr_mimebundle_` (from `display_hook.RichDisplay`) asks `widget_bundle`, which the
package's façade hands to the hook; nothing is registered with IPython.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..studio import Sweep

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell


def widget_bundle(obj: object) -> tuple[dict, dict] | None:
    """The widget's (data, metadata) for `obj`, with `obj`'s own text; None (plain text) outside a kernel,
    or if this cell already drew it."""
    from IPython import get_ipython

    if not in_kernel(get_ipython()):
        return None
    from .widget import drawn_in_this_cell, show

    if drawn_in_this_cell(obj):
        return None
    if isinstance(obj, Sweep) and not obj.points:
        return None
    data, metadata = show(obj)._repr_mimebundle_()
    return {**data, "text/plain": repr(obj)}, metadata


def in_kernel(shell: InteractiveShell | None) -> bool:
    """A Jupyter kernel (which can draw widgets), as opposed to a terminal IPython."""
    return shell is not None and getattr(shell, "kernel", None) is not None
