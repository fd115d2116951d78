"""Rich display the way the ecosystem expects it: results carry `_repr_mimebundle_`, which IPython calls
on whatever ends a cell, and the Jupyter layer supplies what it returns.

This layer does not know the widget: the package's façade hands in a provider (the Jupyter layer's
`widget_bundle`) when it is imported. Nothing is installed into IPython, so importing bwd_widgets
changes no formatter; outside a kernel the provider returns None and IPython shows the text repr.
"""

from __future__ import annotations

from collections.abc import Callable

MimeBundle = tuple[dict, dict]
Provider = Callable[[object], MimeBundle | None]

_provider: Provider | None = None


def set_provider(provider: Provider | None) -> None:
    """Who draws results that end a cell (None: nobody, text only)."""
    global _provider
    _provider = provider


class RichDisplay:
    """Results that show as the widget when they end a notebook cell."""

    def _repr_mimebundle_(self, include: object = None, exclude: object = None) -> MimeBundle | None:
        return _provider(self) if _provider is not None else None


def in_kernel(shell: object) -> bool:
    """A Jupyter kernel (which can draw widgets), as opposed to a terminal IPython."""
    return shell is not None and getattr(shell, "kernel", None) is not None
