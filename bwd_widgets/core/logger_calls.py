"""Logger calls in a model's forward. Dynamo cannot trace one: `torch.compile(model)` breaks the graph there unless
`torch._dynamo.config.ignore_logging_functions` names the method (transformers warns once about its loss type
so). A capture traces past them on either route, keeping the whole forward in one graph, and keeps where each
call was, for the note that says where torch.compile's graph breaks and which setting makes it match."""

from __future__ import annotations

import functools
import linecache
import logging
import sys
import types
from typing import TYPE_CHECKING, Any

from .compat import TracingContext, dynamo_config

if TYPE_CHECKING:
    from collections.abc import Callable

    from .trace_window import TraceWindow


_STANDARD = ("debug", "info", "warning", "warn", "error", "exception", "critical", "fatal", "log")
"""The methods logging itself gives a Logger (each takes `stacklevel`)."""


def logger_methods() -> dict[str, Callable[..., object]]:
    """`logging.Logger`'s methods that log, by name, with those that libraries add to it (transformers' `warning_once`,
    `info_once`, `warning_advice`)."""
    return {
        name: method
        for name, method in vars(logging.Logger).items()
        if callable(method) and (name in _STANDARD or name.endswith(("_once", "_advice")))
    }


def skipped_in_a_capture() -> set[object]:
    """The `ignore_logging_functions` a capture's Dynamo trace reads: the user's own setting and
    `logger_methods()`, so the trace goes past every logger call (the trace cache's guard check reads it too)."""
    return set(dynamo_config.ignore_logging_functions) | set(logger_methods().values())


class LoggerCalls:
    """One capture's logger calls. `ignored` is the `ignore_logging_functions` Dynamo reads for the capture's own
    trace (the user's setting and `logger_methods()`); `fx_patches` note the calls torch.fx's trace makes; `where`
    keeps the line of each call to a method the user's setting does not name (where torch.compile breaks the
    graph and the capture does not), with the method's name, in the order traced."""

    def __init__(self) -> None:
        own = set(dynamo_config.ignore_logging_functions)
        self._own = frozenset(own)
        self._methods = logger_methods()
        self._added = frozenset(set(self._methods.values()) - own)
        self.where: dict[str, str] = {}
        self.ignored = _Ignored(skipped_in_a_capture(), self)

    def seen(self, method: object, filename: str, line: int) -> None:
        """A call to `method` at `filename:line`, noted where the user's setting lets torch.compile break there."""
        if method in self._added:
            code = linecache.getline(filename, line).strip()
            self.where.setdefault(f"{filename}:{line} (`{code}`)", getattr(method, "__name__", "a logger method"))

    def fx_patches(self, window: TraceWindow) -> list[tuple[object, str, Callable[..., object]]]:
        """`logging.Logger`'s methods, each calling the method as before, noting the call where the model's code
        makes it in torch.fx's trace (`window`), and refusing the trace where Python's own `logging` makes it
        (`Logger.fatal`, a `LoggerAdapter`: Dynamo breaks the graph at those whatever the setting, and so does
        Dynamo's route); a method's own call of another (`warning_once` calls `warning`) is its caller's."""
        depth = [0]

        def noting(name: str, method: Callable[..., object]) -> Callable[..., object]:
            @functools.wraps(method)
            def call(logger: logging.Logger, *args: Any, **kwargs: Any) -> object:
                if name in _STANDARD:  # the record names the line that called, past this frame
                    kwargs["stacklevel"] = kwargs.get("stacklevel", 1) + 1
                caller = sys._getframe(1)  # noqa: SLF001 - whose code called the logger
                who = window.caller(caller) if not depth[0] else ""
                if who == "python":
                    window.refuse(f"a logger call from Python's logging ({caller.f_code.co_name})")
                if who == "model" and types.MethodType(method, logger) not in self._own:  # a setting for one logger
                    self.seen(method, caller.f_code.co_filename, caller.f_lineno)
                depth[0] += 1
                try:
                    return method(logger, *args, **kwargs)
                finally:
                    depth[0] -= 1

            return call

        return [(logging.Logger, name, noting(name, method)) for name, method in self._methods.items()]

    def setting(self) -> dict[str, object]:
        """The `ignore_logging_functions` under which torch.compile traces past the calls noted, as this capture did
        (the user's own setting and the methods noted); empty where none was noted."""
        if not self.where:
            return {}
        names = set(self.where.values())
        noted = {method for name, method in self._methods.items() if name in names}
        return {"ignore_logging_functions": set(self._own) | noted}

    def note(self) -> str | None:
        """Where torch.compile breaks the graph and this capture did not, and the setting that makes it match."""
        if not self.where:
            return None
        lines = " and ".join(self.where)
        methods = ", ".join(f"Logger.{name}" for name in dict.fromkeys(self.where.values()))
        return (
            f"torch.compile would break the graph at {lines}: Dynamo cannot trace a call to {methods} unless "
            "torch._dynamo.config.ignore_logging_functions names the method, and then drops the call. This capture "
            "traced past it and left your setting as it was, so what torch.compile saves around that line can "
            "differ from what is shown; with the method in that setting (or `logger.<method>` for one logger), "
            "torch.compile does not break there, and does not log it."
        )


class _Ignored(set):
    """The set Dynamo asks, call by call, whether to skip a logger call (`method in ignore_set`, 2.13.0 to
    2.15.0): a yes for a method the user's own setting does not name is noted at the line Dynamo is tracing. (An
    unbound call, `logging.Logger.warning(logger, ...)`, Dynamo matches by iterating the set: not noted.)"""

    def __init__(self, methods: set[object], calls: LoggerCalls) -> None:
        super().__init__(methods)
        self._calls = calls

    def __contains__(self, value: object) -> bool:
        if not set.__contains__(self, value):
            return False
        frames = TracingContext.extract_stack()
        if frames:
            self._calls.seen(value, frames[-1].filename, frames[-1].lineno or 0)
        return True

    def __reduce__(self) -> tuple:
        """A copy (Dynamo deep-copies its settings to log them) is the plain set of methods, noting nothing."""
        return set, (set(self),)
