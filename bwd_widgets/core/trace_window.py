"""torch.fx's trace as the functions it patches for the whole process see it (`core/fx_route.py` patches them,
`core/logger_calls.py` notes through them): which calls are the model's own."""

from __future__ import annotations

import functools
import sys
import threading
from typing import TYPE_CHECKING, Any, NoReturn

from .errors import NotForFx
from .naming import is_library_file, is_python_file

if TYPE_CHECKING:
    import types
    from collections.abc import Callable


class TraceWindow:
    """torch.fx's trace, as the functions it patches for the whole process see it: its thread, whether it is still
    on (a reference to a patched function taken while it traced may be called later), and what it refused (kept
    even where the model's code catches the refusal)."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.open = True
        self.refused: list[str] = []

    def tracing(self) -> bool:
        """Whether a call made now is the trace's: in its thread, while it runs."""
        return self.open and threading.get_ident() == self.thread

    def caller(self, frame: types.FrameType) -> str:
        """Whose code made a call a patched function received (`frame`): "model" (the model's, in this trace),
        "python" (Python's own library, in this trace: `Logger.fatal` calls `critical`), or "" (torch's or this
        package's code, another thread, or no trace on)."""
        if not self.tracing() or is_library_file(frame.f_code.co_filename):
            return ""
        return "python" if is_python_file(frame.f_code.co_filename) else "model"

    def refuse(self, what: str) -> NoReturn:
        """Refuse the trace for `what`: recorded first, so a refusal the model's own code catches still counts."""
        self.refused.append(what)
        raise NotForFx(what)

    def refusing(self, what: str, original: Callable[..., Any], *, models_frame: int | None = None) -> Callable:
        """`original`, refusing the trace for `what` when the trace calls it: any code in it (None: torch's
        `checkpoint_sequential` calls `checkpoint`), or where the model's own code made the call, `models_frame`
        frames above the one that called `original` (0: that one, as for `print`; 1: its caller, for what a wrapper
        of torch's calls first on the model's behalf). Any other call (another thread, a reference kept past the
        trace) is `original`'s, unchanged."""

        @functools.wraps(original)
        def refusing(*args: Any, **kwargs: Any) -> Any:
            if self.tracing() and (
                models_frame is None or self.caller(sys._getframe(models_frame + 1)) == "model"  # noqa: SLF001
            ):
                self.refuse(what)
            return original(*args, **kwargs)

        return refusing
