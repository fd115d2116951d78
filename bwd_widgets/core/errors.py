"""Every error class bwd_widgets raises, in one place: each carries one sentence saying what is wrong
and what to do, and each also inherits the built-in it resembles, so that a user's `except ValueError`
(bad input) or `except RuntimeError` (torch or a worker failed) catches it as it would Python's own."""


class BwdWidgetsError(Exception):
    """Base class for every user-facing error raised by bwd_widgets."""


class NothingRequiresGradError(BwdWidgetsError, ValueError):
    """No input or parameter would get a gradient: there is no backward to show."""


class NoDifferentiableOutputError(BwdWidgetsError, ValueError):
    """No output is a differentiable tensor: there is no backward to show."""


class SampleError(BwdWidgetsError, ValueError):
    """A GraphNet sample folder is incomplete or its code cannot be loaded."""


class TensorTooLargeError(SampleError):
    """A tensor meta whose element count, or byte count, is past int64: torch cannot even describe such a tensor,
    so no device holds it, real or fake."""


class SampleMemoryError(SampleError):
    """Building a sample's inputs would take more memory than this machine has (fake mode builds nothing)."""


class PartitionerError(BwdWidgetsError, ValueError):
    """An unknown partitioner name, a budget outside [0, 1], or a partition_fn of the wrong shape."""


class ExtractionFailed(BwdWidgetsError, RuntimeError):
    """Tracing or partitioning failed inside torch; the message names the cause."""


class CallError(BwdWidgetsError, TypeError):
    """The inputs do not fit the model's forward: a keyword it does not take, a missing argument."""


class OutputChoiceError(BwdWidgetsError, ValueError):
    """`output=` names a part the model's output does not have."""


class BatchError(BwdWidgetsError, ValueError):
    """A batch that cannot start: bad sample paths, names that collide, a summary that is not ours."""


class OutputError(BwdWidgetsError, ValueError):
    """An output name or folder that would escape the output folder or touch what bwd_widgets did not write."""


class TraceError(BwdWidgetsError, ValueError):
    """A path that holds no TORCH_TRACE log, or what a loaded trace cannot give (`bw.load_trace`)."""


class SnapshotError(BwdWidgetsError, ValueError):
    """A file that is not a plain CUDA memory snapshot (`bw.load_memory_snapshot`): cut short, not a pickle
    torch wrote, or one that names a global or builds an object, which could run code if unpickled."""


class ValidationError(BwdWidgetsError, RuntimeError):
    """A written sample that GraphNet's validation steps reject."""


class SamplePassError(BwdWidgetsError, ValueError):
    """A sample pass config that cannot work, or a sample the pass could not extract."""


class AdviceError(BwdWidgetsError, ValueError):
    """`bw.advise`: a memory target or an advisor option that cannot be read."""


class MeasureNeedsRealModeError(BwdWidgetsError, ValueError):
    """`g.measure()` on a fake-mode extraction: it has no real values to run."""


class FrontEndNotBuiltError(BwdWidgetsError, RuntimeError):
    """The widget's front end (`bwd_widgets/static/widget.js` and `widget.css`, made by `npm run build`) is missing:
    the widget and `bw.to_html` need it; extracting and the other views do not."""


class NotForFx(Exception):
    """Internal, never shown: the fx route could not keep this model's meaning (hooks, checkpoints,
    grad-mode changes...), so the capture goes through Dynamo instead."""


def one_line(error: BaseException, limit: int = 300) -> str:
    """`Type: first line of the message`, for summaries, notes and wrapped errors."""
    lines = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    return text[:limit]


_WRAPPERS = ("when making fake tensor call", "Dynamo failed to run", "backend='", "While executing")


def raised_by_us(error: BaseException) -> BwdWidgetsError | None:
    """Our own error inside torch's wrappers (a partitioner failing mid-capture says so itself), if any."""
    current: BaseException | None = error
    seen = set()
    while current is not None and id(current) not in seen:
        if isinstance(current, BwdWidgetsError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def describe_failure(error: BaseException) -> str:
    """The cause a user can act on, in one line: the innermost error torch wrapped, and where in the
    user's code it happened (torch's own wrappers say only "RuntimeError when making fake tensor call")."""
    chain, seen = [], set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append(current)
        current = current.__cause__ or current.__context__
    meaningful = [e for e in chain if str(e).strip() and not any(w in str(e).splitlines()[0] for w in _WRAPPERS)]
    cause = meaningful[-1] if meaningful else chain[-1]
    text = one_line(cause, limit=240)
    where = _user_location(chain)
    return f"{text} (at {where})" if where else text


def _user_location(chain: list[BaseException]) -> str | None:
    """The last frame outside torch and this package: where the user's code was when it failed."""
    import re
    import traceback

    from .naming import is_library_file

    for error in chain:
        found = re.findall(r'File "([^"]+)", line (\d+), in \w+\n\s+(.+)', str(error))
        user = [f for f in found if not is_library_file(f[0])]
        if user:
            path, line, code = user[-1]
            return f"{path}:{line}: {code.strip()}"
    for error in reversed(chain):
        frames = [f for f in traceback.extract_tb(error.__traceback__) if not is_library_file(f.filename)]
        if frames:
            frame = frames[-1]
            return f"{frame.filename}:{frame.lineno}: {(frame.line or '').strip()}"
    return None
