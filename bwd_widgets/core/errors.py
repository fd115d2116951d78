"""Typed errors: each carries one sentence saying what is wrong and what to do."""


class BwdWidgetsError(Exception):
    """Base class for every user-facing error raised by bwd_widgets."""


class NothingRequiresGradError(BwdWidgetsError):
    pass


class NoDifferentiableOutputError(BwdWidgetsError):
    pass


class SampleError(BwdWidgetsError):
    """A GraphNet sample folder is incomplete or its code cannot be loaded."""


class PartitionerError(BwdWidgetsError):
    pass


class ExtractionFailed(BwdWidgetsError):
    """Tracing or partitioning failed inside torch; the message names the cause."""


def one_line(error: BaseException, limit: int = 300) -> str:
    """`Type: first line of the message`, for summaries, notes and wrapped errors."""
    lines = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    return text[:limit]
