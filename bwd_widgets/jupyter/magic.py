"""`%load_ext bwd_widgets`, then `%bwd_extract model(x)` or `%%bwd_extract` over a cell."""

from __future__ import annotations

import ast
import builtins
import collections
import copy
import dataclasses
import dis
import inspect
import keyword
import re
import sys
import textwrap
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import torch
from IPython.core.error import UsageError
from IPython.core.magic import Magics, magics_class
from IPython.core.magic_arguments import parse_argstring

from ..core.errors import BwdWidgetsError, one_line
from ..core.kinds import BACKENDS, DEFAULT_BACKEND
from ..core.partitioners import partitioner_choices, resolve_for_backend
from ..extraction.extract import extract
from ..extraction.requires_grad import RULES, RequiresGrad
from .advising import model_source
from .progress import extracting_status
from .widget import BackwardGraphWidget, keep_as_text

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

    from IPython.core.interactiveshell import InteractiveShell

    from ..core.kinds import Mode
    from ..extraction.loaded_trace import TraceLoad
    from ..extraction.result import BackwardExtraction
    from .advising import ModelSource

if TYPE_CHECKING:
    # IPython's decorators as they behave: each returns the function it decorates. Its magic_arguments and
    # argument are unannotated, and its line_cell_magic reads `_F | Callable[[_F], _F]` (its `("name")` form too).
    _F = TypeVar("_F", bound=Callable[..., Any])

    class _Decorator(Protocol):
        def __call__(self, function: _F, /) -> _F: ...

    def magic_arguments() -> _Decorator: ...
    def argument(*args: Any, **kwargs: Any) -> _Decorator: ...
    def line_cell_magic(function: _F, /) -> _F: ...
else:
    from IPython.core.magic import line_cell_magic
    from IPython.core.magic_arguments import argument, magic_arguments


@magics_class
class BwdMagics(Magics):
    @magic_arguments()
    @argument("call", nargs="*", help="the forward call, e.g. model(x, y) (line magic only)")
    @argument(
        "--partitioner",
        default=None,
        help=f"one of {partitioner_choices()} (default: default; min_cut with --budget or --backend inductor)",
    )
    @argument("--budget", type=float, default=None, help="activation memory budget in [0, 1]; implies min_cut")
    @argument("--fake", action="store_true", help="fake mode: trace shapes only, run nothing")
    @argument(
        "--backend",
        default=DEFAULT_BACKEND,
        choices=BACKENDS,
        help="aot_eager (default): AOT Autograd's joint graph as traced; inductor: the partition torch.compile(model) "
        "makes, after Inductor's decompositions and joint-graph passes (min-cut only)",
    )
    @argument(
        "--trace",
        metavar="PATH",
        help="instead of a call: a TORCH_TRACE folder (or one of its logs) a torch.compile run wrote; shows each "
        "compiled region as the run partitioned it, headed by its rank and compile id, and returns them all "
        "(bw.load_trace's TraceLoad); nothing of the trace runs",
    )
    @argument("--save", metavar="DIR", help="also write train_forward/ and train_backward/ GraphNet samples under DIR")
    @argument("--name", help="name of the extraction and of the saved samples (default: the called name)")
    @argument("--no-display", action="store_true", help="return the extraction without showing the widget")
    @argument(
        "--fit",
        metavar="SIZE",
        help="then run bw.advise for this peak activation memory target (e.g. 24GB) and print its plans",
    )
    @argument(
        "--time",
        action="store_true",
        help="with --fit, also time one forward and backward of each Pareto plan on this machine (real mode)",
    )
    @argument(
        "--output",
        metavar="NAME",
        help="line magic: the part of the model's output the backward starts from, e.g. loss or logits "
        "(default: the loss if the output holds one, else all of it); cell magic: the variable holding "
        "the forward result (default: the last expression)",
    )
    @argument(
        "--requires-grad",
        metavar="WHICH",
        help="which inputs get a gradient: training (each as you made it: a data batch gets none), floating "
        "(every floating-point input), or NAME[,NAME...] (those inputs, the rest by the default); default: "
        "training where the backward starts from a loss, else floating",
    )
    @line_cell_magic
    def bwd_extract(self, line: str, cell: str | None = None) -> BackwardExtraction | TraceLoad:
        """Extract the backward graph of a forward call and show it.

        Examples::

            %load_ext bwd_widgets
            g = %bwd_extract model(x)
            %bwd_extract --partitioner min_cut --budget 0.3 model(x)
            %bwd_extract --backend inductor model(x)   (the partition torch.compile(model) makes)
            %bwd_extract --fake lm(input_ids=ids, labels=ids)   (keyword inputs, as transformers models take)
            %bwd_extract --output logits lm(**batch)
            %bwd_extract model(x) --fake --save out/ --name my_model   (options before or after the call)
            %bwd_extract --fake --fit 24GB lm(ids)   (then print bw.advise's plans for that target)
            %bwd_extract --fit 512MiB --time model(x)   (and each plan's step time on this machine)
            run = %bwd_extract --trace /tmp/run_trace   (each region a torch.compile run logged with TORCH_TRACE)

            %%bwd_extract --output loss
            h = encoder(x)
            loss = decoder(h).square().mean()

        Returns the BackwardExtraction, so `g = %bwd_extract model(x)` keeps it. The cell magic
        extracts the cell as a function of the tensors and modules it reads, and its code runs once as
        the notebook sees it (`_Sandbox`): in real mode the cell runs once for real after the trace, so
        the names it assigns exist afterwards; in fake mode the trace's one run is applied (what it
        printed, appended, counted, assigned under `global`) and no name it assigns is bound.
        """
        shell = _shell_of(self)
        call, args, partitioner = _read_options(self.bwd_extract, line, cell)
        if args.trace is not None:
            return _show_trace(shell, args)
        target = _fit_target(args.fit, args.time, args.fake)
        sandbox: _Sandbox | None = None
        if cell is None:
            model, inputs, keywords, called = _evaluate_call(call, shell.user_ns)
        else:
            model, inputs, sandbox = _cell_module(cell, shell.user_ns, args.output, args.fake)
            keywords, called = {}, "cell"
        mode: Mode = "fake" if args.fake else "real"
        output = args.output if cell is None else None
        options = {"model_kwargs": keywords, "output": output, "requires_grad": _requires_grad(args, cell and model)}
        options["backend"] = args.backend  # the advisor (--fit, the widget's) extracts its plans as this was
        try:
            with extracting_status(model, mode, args.name):
                extraction = extract(
                    model, *inputs, partitioner=partitioner, memory_budget=args.budget, mode=mode, name=args.name,
                    cache=sandbox is None or not args.fake, **options,  # type: ignore[arg-type]
                )  # fmt: skip
        except BwdWidgetsError as error:
            raise UsageError(str(error)) from None
        if cell is not None and sandbox is not None:
            _ran_once(shell, cell, sandbox, args.fake)
        if target is not None:
            _advise(model, inputs, target, mode, options, args.time)
        if args.save:
            _save(extraction, Path(args.save), args.name or _free_name(Path(args.save), called))
        if args.no_display:
            keep_as_text(extraction)
        else:
            _show(shell, extraction, model_source(model, tuple(inputs), options))
        return extraction


_NOT_WITH_TRACE = {
    "partitioner": "--partitioner",
    "budget": "--budget",
    "fake": "--fake",
    "backend": "--backend",
    "name": "--name",
    "fit": "--fit",
    "time": "--time",
    "output": "--output",
    "requires_grad": "--requires-grad",
}
"""What chooses, partitions or runs a model: a trace holds the partition its run made, and no model."""


def _refuse_with_trace(magic: object, args: argparse.Namespace, call: str, cell: str | None) -> None:
    """One UsageError sentence naming what cannot go with --trace: a forward call or cell, or the options that
    choose, partition or run a model."""
    if call or (cell is not None and cell.strip()):
        what = f"the call {call!r}" if call else "the cell's code"
        raise UsageError(f"--trace shows a run that already happened, so {what} has nothing to do: drop it")
    parser = getattr(magic, "parser", None)
    defaults = {dest: parser.get_default(dest) if parser is not None else None for dest in _NOT_WITH_TRACE}
    given = [flag for dest, flag in _NOT_WITH_TRACE.items() if getattr(args, dest) not in (None, defaults[dest])]
    if given:
        them = "it" if len(given) == 1 else "them"
        raise UsageError(
            f"--trace shows the partition its run made, so {', '.join(given)} cannot apply to it: drop {them}"
        )


SHOWN_REGIONS = 8
"""Regions `--trace` draws as widgets; past them a line each, from the trace's index (a long run compiles
hundreds, each built in about half a second and holding megabytes)."""


def _show_trace(shell: InteractiveShell, args: argparse.Namespace) -> TraceLoad:
    """`--trace PATH`: the regions the run compiled, each headed by its line (rank, compile id, backend, budget,
    what it saves) and drawn as its widget, the first `SHOWN_REGIONS` of them: a graph break's regions are parts
    of one step, and each rank's are its own, so the first does not stand for the others; past them, a line each
    and how to show one. `--no-display` prints the lines only. A region that could not be read is one
    sentence; a path without a trace is one UsageError sentence."""
    from ..extraction.loaded_trace import load_trace, region_line

    try:
        load = load_trace(args.trace)
    except BwdWidgetsError as error:
        raise UsageError(str(error)) from None
    from IPython.display import display

    shown = 0
    for index in range(min(len(load), SHOWN_REGIONS)):
        try:
            region = load[index]
        except BwdWidgetsError:
            continue  # its sentence is in load.refused, printed below
        print(region_line(region))
        shown += 1
        if not args.no_display:
            display(BackwardGraphWidget(region))
    rest = load.indexes[SHOWN_REGIONS:]
    if rest:
        names = ", ".join(index.label for index in rest[:20])
        more = f" and {len(rest) - 20} more" if len(rest) > 20 else ""
        print(
            f"{len(rest)} more regions, not drawn: {names}{more}; to draw one, keep what the magic returns "
            f"(load = %bwd_extract --trace ...) and call bw.show(load[{SHOWN_REGIONS}])."
        )
    if args.save:  # the regions past those drawn are built here, once each, so their refusals are known after
        for region in load:
            if not _save(region, Path(args.save), None):  # each region names its own samples
                break  # the same refusal for every region: said once
    for sentence in load.refused:
        print(f"not read: {sentence}")
    if not shown and not rest:
        print(f"bwd_extract: no region of {args.trace} could be read", file=sys.stderr)
    _drawn_once(shell, load)
    return load


def _shell_of(magics: Magics) -> InteractiveShell:
    """The shell the magic runs in; without one (the class used on its own) nothing can be shown."""
    if magics.shell is None:
        raise UsageError("%bwd_extract needs an IPython shell")
    return magics.shell


def _show(shell: InteractiveShell, extraction: BackwardExtraction, source: ModelSource) -> None:
    """The widget, with the advisor's box for a live model (`source`), as the magic's only output."""
    from IPython.display import display

    display(BackwardGraphWidget(extraction, source=source))
    _drawn_once(shell, extraction)


class _QuietFor:
    """`sys.displayhook` for the rest of a cell: an extraction the magic drew, returned as the cell's last value, is
    not shown again as `Out[n]: BackwardExtraction(...)` under its widget; `_`, `Out` and the cell's result still get
    it, as from IPython's hook. IPython's display trap puts its own hook back when the cell ends."""

    def __init__(self, hook: Any) -> None:
        self.hook, self.drawn = hook, list[object]()

    def __call__(self, value: object) -> None:
        if not any(value is drawn for drawn in self.drawn):
            self.hook(value)
            return
        self.drawn = [drawn for drawn in self.drawn if drawn is not value]  # once: a later `g` ending a cell shows
        self.hook.check_for_underscore()
        if not self.hook.quiet():
            self.hook.update_user_ns(value)
            self.hook.fill_exec_result(value)


def _drawn_once(shell: InteractiveShell, extraction: object) -> None:
    """The widget is the only output of a bare `%bwd_extract` line ending a cell; `g = %bwd_extract ...` still binds
    the extraction. Only a value the cell's code hands straight to the display hook is kept from it."""
    hook = sys.displayhook
    if not _printed_by_the_cell(shell):
        return
    if not isinstance(hook, _QuietFor):
        if hook is not shell.displayhook or not getattr(shell.display_trap, "is_active", False):
            return  # outside a cell IPython runs (a direct run_line_magic call), nothing is shown anyway
        hook = sys.displayhook = _QuietFor(hook)
    hook.drawn.append(extraction)


def _printed_by_the_cell(shell: InteractiveShell) -> bool:
    """Whether the cell's code hands the magic's value to the display hook: IPython compiles a cell's last
    expression in 'single' mode, whose next instruction after the call prints it (PRINT_EXPR; CALL_INTRINSIC_1
    INTRINSIC_PRINT from Python 3.12), where an assignment stores it and a line in the middle drops it."""
    frame = inspect.currentframe()
    while frame is not None and not (frame.f_globals is shell.user_ns and frame.f_code.co_name == "<module>"):
        frame = frame.f_back
    if frame is None:
        return False
    following = next((i for i in dis.get_instructions(frame.f_code) if i.offset > frame.f_lasti), None)
    return following is not None and (following.opname == "PRINT_EXPR" or following.argrepr == "INTRINSIC_PRINT")


def _ran_once(shell: InteractiveShell, cell: str, sandbox: _Sandbox, fake: bool) -> None:
    """The cell's one run, as the notebook sees it: in fake mode the trace's, applied from its sandbox (nothing
    runs for real); in real mode the cell itself, once, so the names it assigns exist afterwards."""
    if fake:
        sandbox.apply(shell.user_ns)
    else:
        shell.ex(cell)


def _read_options(magic: object, line: str, cell: str | None) -> tuple[str, argparse.Namespace, str | None]:
    """The forward call (line magic), the parsed options and the partitioner they name; bad options are
    one UsageError sentence."""
    call, options = _split_call(line, _options_with_values(magic)) if cell is None else ("", line)
    try:
        args = parse_argstring(magic, options)
    except SystemExit:
        raise UsageError("bad arguments to %bwd_extract: see %bwd_extract? for the usage") from None
    except ValueError as error:
        raise UsageError(f"could not read the options ({error}): close every quote") from None
    for option in ("partitioner", "save", "name", "output", "requires_grad", "trace"):  # IPython's split keeps quotes
        value = getattr(args, option)
        if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            setattr(args, option, value[1:-1])
    if args.call:
        where = "write one forward call, e.g. %bwd_extract --fake model(x)" if cell is None else "put it in the cell"
        raise UsageError(f"unexpected {' '.join(args.call)!r}: {where}")
    if args.trace is not None:
        _refuse_with_trace(magic, args, call, cell)
        return call, args, None
    partitioner = "min_cut" if args.budget is not None and args.partitioner is None else args.partitioner
    try:
        resolve_for_backend(partitioner, args.budget, args.backend)
    except BwdWidgetsError as error:
        raise UsageError(str(error)) from None
    if cell is None and not call:
        raise UsageError("give the forward call to extract, e.g. %bwd_extract model(x)")
    return call, args, partitioner


def _requires_grad(args: argparse.Namespace, cell: object) -> RequiresGrad:
    """`--requires-grad`: a rule by name, or the inputs named (comma-separated) get a gradient. Left out, a cell
    that trains parameters takes the training rule: it is the user's own step, and what its tensors need is how
    they made them (extract's own default would find out from the output by capturing twice, and a cell's code
    runs once); otherwise extract's default."""
    text: str | None = args.requires_grad
    if text is None and isinstance(cell, torch.nn.Module) and any(p.requires_grad for p in cell.parameters()):
        return "training"  # `cell`: the cell's module, for the cell magic
    if text is None or text in RULES:
        return text  # type: ignore[return-value]  # a rule's name, checked just above
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names or not all(n.isidentifier() or "." in n for n in names):
        raise UsageError(
            f"--requires-grad {text}: give training, floating, or the names of inputs to differentiate, e.g. x,y"
        )
    return dict.fromkeys(names, True)


def _fit_target(text: str | None, timed: bool = False, fake: bool = False) -> int | None:
    """`--fit 24GB` as bytes, read before anything runs; a bad size, or `--time` where it cannot time, is one
    UsageError sentence."""
    if timed and text is None:
        raise UsageError("--time times the plans of --fit: add a target, e.g. --fit 512MiB --time")
    if timed and fake:
        raise UsageError("--time runs each plan's real graphs, so it cannot be used with --fake: drop one of them")
    if text is None:
        return None
    from ..studio.advisor import parse_bytes

    try:
        return parse_bytes(text.strip("'\""))
    except BwdWidgetsError as error:
        raise UsageError(f"--fit: {error}") from None


def _advise(model: Callable, inputs: list, target: int, mode: Mode, options: dict, timed: bool) -> None:
    """`--fit`: the advisor's report, printed; a failure is one line on stderr and the extraction is kept."""
    from ..studio.advisor import advise

    try:
        advice = advise(
            model,
            *inputs,
            target=target,
            mode=mode,
            measure_time=timed,
            **options,
        )
    except BwdWidgetsError as error:
        print(f"bwd_extract: --fit: {error}", file=sys.stderr)
        return
    print(advice)


def _save(extraction: BackwardExtraction, out: Path, name: str | None) -> bool:
    """Write the samples (named `name`, else as the extraction names its own); a failure is one line on stderr
    (and False) and the extraction is still returned."""
    try:
        written = extraction.save_graphnet(out, name)
    except (BwdWidgetsError, OSError) as error:
        message = str(error) if isinstance(error, BwdWidgetsError) else one_line(error)
        print(f"bwd_extract: not saved: {message}", file=sys.stderr)
        return False
    print(f"saved {', '.join(str(path) for path in written.values())}")  # news, not an error: stdout
    return True


def _free_name(out: Path, called: str) -> str:
    """The called name, numbered when an earlier --save already used it: never replace a sample."""
    base = re.sub(r"[^\w.-]+", "_", called).strip("._") or "model"
    name, number = base, 1
    while (out / "train_backward" / name).exists() or (out / "train_forward" / name).exists():
        number += 1
        name = f"{base}_{number}"
    return name


def _split_call(line: str, takes_value: set[str]) -> tuple[str, str]:
    """`--fake model(x, -1) --budget 0.5` -> ("model(x, -1)", "--fake --budget 0.5").

    Options go before the call, as IPython's own magics take them (`%timeit -n 10 stmt`), or after it,
    as bwd_widgets 0.1 did. The line is read as words outside brackets and quotes, so the call may hold
    negative numbers, strings and spaces; an option in `takes_value` takes the next word as its value,
    and every other word belongs to the call."""
    call: list[str] = []
    options: list[str] = []
    pending_value = False
    for word in _top_level_words(line):
        if pending_value:
            options.append(word)
            pending_value = False
        elif word.startswith("-") and not word[1:2].isdigit():
            options.append(word)
            pending_value = word in takes_value
        else:
            call.append(word)
    return " ".join(call), " ".join(options)


def _top_level_words(line: str) -> list[str]:
    """Whitespace-separated words, where brackets and quotes keep their insides (spaces too) in one word."""
    words, current, depth, quote = [], "", 0, ""
    for i, char in enumerate(line):
        if quote:
            if char == quote and line[i - 1] != "\\":
                quote = ""
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char.isspace() and depth <= 0:
            if current:
                words.append(current)
            current = ""
            continue
        current += char
    if current:
        words.append(current)
    return words


def _options_with_values(magic: object) -> set[str]:
    """The option strings of the magic's argparse parser that take a value (`--budget`, not `--fake`)."""
    parser = getattr(magic, "parser", None)
    actions = getattr(parser, "_actions", [])
    return {name for action in actions if action.nargs != 0 for name in action.option_strings}


def _evaluate(node: ast.expr, namespace: dict) -> object:
    try:
        return eval(compile(ast.Expression(node), "<bwd_extract>", "eval"), namespace)
    except NameError as error:
        raise UsageError(f"{error}: define it in a cell before %bwd_extract") from None
    except Exception as error:  # noqa: BLE001 - the user's expression may raise anything: one UsageError
        raise UsageError(f"could not evaluate {ast.unparse(node)!r}: {one_line(error)}") from None


def _evaluate_call(text: str, namespace: dict) -> tuple[Callable, list, dict, str]:
    """The model, its positional and keyword inputs (`*xs` and `**batch` unpacked), and the called name."""
    try:
        tree = ast.parse(text.strip().removesuffix(";"), mode="eval")  # `;` quiets a cell's value in IPython
    except SyntaxError:
        raise UsageError(f"{text!r} is not a call: write it as model(x, y)") from None
    call = tree.body
    if not isinstance(call, ast.Call):
        raise UsageError(f"{text!r} is not a call: write it as model(x, y)")
    called = ast.unparse(call.func)
    model = _evaluate(call.func, namespace)
    if not callable(model):
        raise UsageError(f"{called} is a {type(model).__name__}, not a model: write the forward call, e.g. model(x)")
    args: list = []
    for positional in call.args:
        if isinstance(positional, ast.Starred):
            args.extend(_unpacked(positional.value, namespace, "*"))
        else:
            args.append(_evaluate(positional, namespace))
    kwargs: dict = {}
    for keyword_argument in call.keywords:
        if keyword_argument.arg is None:
            kwargs.update(_unpacked(keyword_argument.value, namespace, "**"))
        else:
            kwargs[keyword_argument.arg] = _evaluate(keyword_argument.value, namespace)
    return model, args, kwargs, called


def _unpacked(node: ast.expr, namespace: dict, star: str) -> Any:
    value: Any = _evaluate(node, namespace)
    try:
        return dict(value) if star == "**" else list(value)
    except (TypeError, ValueError):
        what = "a mapping" if star == "**" else "iterable"
        raise UsageError(f"{star}{ast.unparse(node)} is a {type(value).__name__}, not {what}") from None


_COPIED = (list, dict, set, collections.deque, bytearray, types.SimpleNamespace)
"""What the sandbox copies (one level deep) among the notebook's objects a cell reads: what a cell appends to,
counts in or sets an attribute of. Other objects are shared with the trace, as are the containers' elements."""
_MISSING = object()


@dataclasses.dataclass
class _Sandbox:
    """The globals the traced cell runs in instead of the notebook's namespace: a copy of it, where each list,
    dict or set the cell reads is a copy too and `print` only records; what the cell does to them never reaches
    the notebook unless `apply` (fake mode) puts the trace's one run there."""

    names: dict[str, Any]
    copies: dict[str, tuple[Any, Any]]  # name -> (the notebook's object, the sandbox's copy of it)
    declared: set[str]  # names the cell declares `global`: those it may rebind in the sandbox
    printed: list[tuple[tuple, dict]]

    @classmethod
    def of(cls, namespace: dict, read: set[str], declared: set[str], keep_prints: bool) -> _Sandbox:
        names = dict(namespace)
        copies = {}
        for name in read | declared:
            value = namespace.get(name, _MISSING)
            if isinstance(value, _COPIED) and not isinstance(value, torch.nn.Module):
                try:
                    twin = copy.copy(value)
                except Exception:  # noqa: BLE001 - a container that will not copy is shared with the trace
                    continue
                names[name], copies[name] = twin, (value, twin)
        printed: list[tuple[tuple, dict]] = []

        def recorded_print(*args: object, **kwargs: object) -> None:
            if keep_prints:  # a constant to Dynamo: real mode's trace records nothing, so no tensor leaves its graph
                printed.append((args, kwargs))

        # a module name nothing can import: Dynamo then reads these globals as the frame's own
        names.update(print=recorded_print, __name__="bwd_widgets_cell")
        return cls(names, copies, declared, printed)

    def apply(self, namespace: dict) -> None:
        """Put the trace's run in the notebook: the containers' new contents, the globals the cell rebound, and
        what it printed, in that order."""
        for original, twin in self.copies.values():
            _refill(original, twin)
        for name in self.declared:
            value = self.names.get(name, _MISSING)
            if value is _MISSING:
                namespace.pop(name, None)
            elif value is not self.copies.get(name, (None, _MISSING))[1]:
                namespace[name] = value
        for args, kwargs in self.printed:
            print(*args, **kwargs)


def _refill(original: Any, twin: Any) -> None:
    """The notebook's object gets the copy's contents in place, so every reference to it sees them: a list's
    items, a dict's entries (each set by key: a Counter's `update` would add), a set's, an object's attributes."""
    if isinstance(original, types.SimpleNamespace):
        original, twin = vars(original), vars(twin)
    if isinstance(original, (list, bytearray)):
        original[:] = twin
        return
    original.clear()
    if isinstance(original, dict):
        for key, value in twin.items():
            original[key] = value
    elif isinstance(original, collections.deque):
        original.extend(twin)
    else:
        original.update(twin)


def _cell_tree(cell: str, output: str | None) -> ast.Module:
    """The cell, parsed, ending in a `return` of its forward result."""
    try:
        tree = ast.parse(cell)
    except SyntaxError as error:
        raise UsageError(f"the cell has a syntax error: {error.msg} (line {error.lineno})") from None
    if not tree.body:
        raise UsageError("the cell is empty: write the forward computation in it")
    _refuse_generators(tree)
    if output and output not in _assigned(tree):
        raise UsageError(f"--output {output}: the cell never assigns {output}")
    if output:
        tree.body.append(ast.Return(ast.Name(output, ast.Load())))
    elif isinstance(tree.body[-1], ast.Expr):
        tree.body[-1] = ast.Return(tree.body[-1].value)
    else:
        raise UsageError("end the cell with the forward result as an expression, or name it with --output VAR")
    return tree


def _assigned(tree: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _read(tree: ast.AST) -> list[str]:
    """Names the cell reads, in order: a `counter += 1` reads `counter` before it assigns it."""
    read: list[str] = []
    for node in ast.walk(tree):
        target = node.target if isinstance(node, ast.AugAssign) else node
        if isinstance(target, ast.Name) and (isinstance(target.ctx, ast.Load) or target is not node):
            if target.id not in read:
                read.append(target.id)
    return read


def _cell_module(cell: str, namespace: dict, output: str | None, fake: bool) -> tuple[torch.nn.Module, list, _Sandbox]:
    """The cell as a module: its forward takes the tensors the cell reads, and the modules it reads
    are registered as submodules, so their parameters get gradients too. Its globals are a `_Sandbox`."""
    tree = _cell_tree(cell, output)
    declared = {name for node in ast.walk(tree) if isinstance(node, ast.Global) for name in node.names}
    loaded = [n for n in _read(tree) if n in namespace and not hasattr(builtins, n) and n not in declared]
    sandbox = _Sandbox.of(namespace, set(loaded), declared, keep_prints=fake)
    values = sandbox.names
    tensors = [n for n in loaded if isinstance(values[n], torch.Tensor) and not keyword.iskeyword(n)]
    modules = {n: values[n] for n in loaded if isinstance(values[n], torch.nn.Module)}
    # Names read, then assigned (`counter += 1`) start from the notebook's value; the trace never rebinds the notebook's
    assigned = _assigned(tree)
    rebound = {n: values[n] for n in loaded if n in assigned and n not in tensors and n not in modules}
    # fake mode: a keyword-only marker keeps the cell off the torch.fx route, whose failed try would be a run
    keywords = [*rebound, *(["bwd_widgets_fake_cell=True"] if fake else [])]
    body = textwrap.indent(ast.unparse(ast.Module(tree.body, type_ignores=[])), "    ")
    parameters = ", ".join(["self", *tensors] + (["*", *keywords] if keywords else []))
    scope: dict = {}
    exec(compile(f"def forward({parameters}):\n{body}\n", "<%%bwd_extract cell>", "exec"), values, scope)
    scope["forward"].__kwdefaults__ = {**rebound, **(scope["forward"].__kwdefaults__ or {})} if keywords else None
    cell_module = type("Cell", (torch.nn.Module,), {"forward": scope["forward"]})()
    for name, module in modules.items():
        if not hasattr(torch.nn.Module, name):
            cell_module.add_module(name, module)
    return cell_module, [values[n] for n in tensors], sandbox


def _refuse_generators(tree: ast.Module) -> None:
    """`await` and `yield` at the cell's top level make no forward computation: say so, not a SyntaxError."""
    nested = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Await, ast.AsyncFor, ast.AsyncWith)):
            raise UsageError(
                "the cell awaits: %%bwd_extract traces a plain computation; run the await in a cell before"
            )
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            raise UsageError(
                "the cell yields: %%bwd_extract traces a computation that returns its result; drop the yield"
            )
        if not isinstance(node, nested):
            pending.extend(ast.iter_child_nodes(node))


def load(shell: InteractiveShell) -> None:
    shell.register_magics(BwdMagics)


def unload(shell: InteractiveShell) -> None:
    magics = shell.magics_manager.magics
    magics["line"].pop("bwd_extract", None)
    magics["cell"].pop("bwd_extract", None)
