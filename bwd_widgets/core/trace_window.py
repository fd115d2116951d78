"""torch.fx's trace as the functions it patches for the whole process see it (`core/fx_route.py` patches them,
`core/logger_calls.py` notes through them): which calls are the model's own."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, NoReturn

from .errors import NotForFx
from .naming import is_library_file, is_python_file

if TYPE_CHECKING:
    import types


class TraceWindow:
    """torch.fx's trace, as the functions it patches for the whole process see it: its thread, whether it is still
    on (a reference to a patched function taken while it traced may be called later), and what it refused (kept
    even where the model's code catches the refusal)."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.open = True
        self.refused: list[str] = []

    def caller(self, frame: types.FrameType) -> str:
        """Whose code made a call a patched function received (`frame`): "model" (the model's, in this trace),
        "python" (Python's own library, in this trace: `Logger.fatal` calls `critical`), or "" (torch's or this
        package's code, another thread, or no trace on)."""
        if not self.open or threading.get_ident() != self.thread or is_library_file(frame.f_code.co_filename):
            return ""
        return "python" if is_python_file(frame.f_code.co_filename) else "model"

    def refuse(self, what: str) -> NoReturn:
        self.refused.append(what)
        raise NotForFx(what)
