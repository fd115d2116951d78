"""Rich display the way IPython reaches it: a result that ends a cell (or is passed to `display`) shows itself
through `_ipython_display_`, which the Jupyter layer supplies.

This layer does not know the widget: the package's façade hands in a provider (the Jupyter layer's
`display_of`) when it is imported. Nothing is installed into IPython, so importing bwd_widgets changes no
formatter. The result shows itself rather than returning a bundle because a cell's result (an execute_result)
is the one output a front end never updates by display id: the picture under the widget has to be a display of
its own to follow the partition the widget shows (`jupyter/display.py`). Where the provider has nothing to show
(a terminal, a result its cell already drew), `_ipython_display_` is None, which IPython reads as absent: the
result's text, as `Out[n]`.
"""

from __future__ import annotations

from collections.abc import Callable

Provider = Callable[[object], Callable[[], object] | None]
"""Given a result: what shows it in this kernel (called once, when IPython displays it), or None (its text)."""

_provider: Provider | None = None


def set_provider(provider: Provider | None) -> None:
    """Who draws results that end a cell (None: nobody, text only)."""
    global _provider
    _provider = provider


class RichDisplay:
    """Results that show as the widget when they end a notebook cell."""

    @property
    def _ipython_display_(self) -> Callable[[], object] | None:
        """IPython's self-display hook, present only where the Jupyter layer shows this result (IPython's
        `get_real_method` skips an attribute that is not callable, so None leaves the text repr)."""
        return _provider(self) if _provider is not None else None


def in_kernel(shell: object) -> bool:
    """A Jupyter kernel (which can draw widgets), as opposed to a terminal IPython."""
    return shell is not None and getattr(shell, "kernel", None) is not None
