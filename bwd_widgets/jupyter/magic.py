"""`%load_ext bwd_widgets`, then `%bwd_extract model(x)` or `%%bwd_extract` over a cell."""

from __future__ import annotations

import ast
import builtins
import keyword
import re
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import torch
from IPython.core.error import UsageError
from IPython.core.magic import Magics, magics_class
from IPython.core.magic_arguments import parse_argstring

from ..core.errors import BwdWidgetsError, one_line
from ..core.partitioners import partitioner_names, resolve_partitioner
from ..extraction.extract import extract
from .advising import model_source
from .progress import extracting_status
from .widget import BackwardGraphWidget, keep_as_text

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

    from IPython.core.interactiveshell import InteractiveShell

    from ..core.kinds import Mode
    from ..extraction.result import BackwardExtraction

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
    @argument("--partitioner", default="default", help=f"one of {', '.join(partitioner_names())} (default: default)")
    @argument("--budget", type=float, default=None, help="activation memory budget in [0, 1]; implies min_cut")
    @argument("--fake", action="store_true", help="fake mode: trace shapes only, run nothing")
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
    @line_cell_magic
    def bwd_extract(self, line: str, cell: str | None = None) -> BackwardExtraction:
        """Extract the backward graph of a forward call and show it.

        Examples::

            %load_ext bwd_widgets
            g = %bwd_extract model(x)
            %bwd_extract --partitioner min_cut --budget 0.3 model(x)
            %bwd_extract --fake lm(input_ids=ids, labels=ids)   (keyword inputs, as transformers models take)
            %bwd_extract --output logits lm(**batch)
            %bwd_extract model(x) --fake --save out/ --name my_model   (options before or after the call)
            %bwd_extract --fake --fit 24GB lm(ids)   (then print bw.advise's plans for that target)
            %bwd_extract --fit 512MiB --time model(x)   (and each plan's step time on this machine)

            %%bwd_extract --output loss
            h = encoder(x)
            loss = decoder(h).square().mean()

        Returns the BackwardExtraction, so `g = %bwd_extract model(x)` keeps it. The cell magic
        extracts the cell as a function of the tensors and modules it reads, then runs the cell
        once more so that the names it assigns exist afterwards.
        """
        shell = self.shell
        if shell is None:
            raise UsageError("%bwd_extract needs an IPython shell")
        call, args, partitioner = _read_options(self.bwd_extract, line, cell)
        target = _fit_target(args.fit, args.time, args.fake)
        keywords: dict = {}
        if cell is None:
            model, inputs, keywords, called = _evaluate_call(call, shell.user_ns)
        else:
            model, inputs = _cell_module(cell, shell.user_ns, args.output)
            called = "cell"
        mode: Mode = "fake" if args.fake else "real"
        output = args.output if cell is None else None
        try:
            with extracting_status(model, mode, args.name):
                extraction = extract(
                    model, *inputs, model_kwargs=keywords, output=output, partitioner=partitioner,
                    memory_budget=args.budget, mode=mode, name=args.name,
                )  # fmt: skip
        except BwdWidgetsError as error:
            raise UsageError(str(error)) from None
        if cell is not None and not args.fake:
            shell.ex(cell)  # the names the cell assigns exist afterwards, as if it had run
        if target is not None:
            _advise(model, inputs, target, mode, keywords, output, args.time)
        if args.save:
            _save(extraction, Path(args.save), args.name or _free_name(Path(args.save), called))
        if args.no_display:
            keep_as_text(extraction)
        else:
            from IPython.display import display

            source = model_source(model, tuple(inputs), {"model_kwargs": keywords, "output": output})
            display(BackwardGraphWidget(extraction, source=source))
        return extraction


def _read_options(magic: object, line: str, cell: str | None) -> tuple[str, argparse.Namespace, str]:
    """The forward call (line magic), the parsed options and the partitioner they name; bad options are
    one UsageError sentence."""
    call, options = _split_call(line, _options_with_values(magic)) if cell is None else ("", line)
    try:
        args = parse_argstring(magic, options)
    except SystemExit:
        raise UsageError("bad arguments to %bwd_extract: see %bwd_extract? for the usage") from None
    except ValueError as error:
        raise UsageError(f"could not read the options ({error}): close every quote") from None
    for option in ("partitioner", "save", "name", "output"):  # IPython's split keeps the quotes
        value = getattr(args, option)
        if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            setattr(args, option, value[1:-1])
    if args.call:
        where = "write one forward call, e.g. %bwd_extract --fake model(x)" if cell is None else "put it in the cell"
        raise UsageError(f"unexpected {' '.join(args.call)!r}: {where}")
    partitioner = "min_cut" if args.budget is not None and args.partitioner == "default" else args.partitioner
    try:
        resolve_partitioner(partitioner, args.budget)
    except BwdWidgetsError as error:
        raise UsageError(str(error)) from None
    if cell is None and not call:
        raise UsageError("give the forward call to extract, e.g. %bwd_extract model(x)")
    return call, args, partitioner


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


def _advise(
    model: Callable, inputs: list, target: int, mode: Mode, keywords: dict, output: str | None, timed: bool
) -> None:
    """`--fit`: the advisor's report, printed; a failure is one line on stderr and the extraction is kept."""
    from ..studio.advisor import advise

    try:
        advice = advise(
            model,
            *inputs,
            target=target,
            mode=mode,
            model_kwargs=keywords,
            output=output,
            measure_time=timed,
        )
    except BwdWidgetsError as error:
        print(f"bwd_extract: --fit: {error}", file=sys.stderr)
        return
    print(advice)


def _save(extraction: BackwardExtraction, out: Path, name: str) -> None:
    """Write the samples; a failure is one line on stderr and the extraction is still returned."""
    try:
        written = extraction.save_graphnet(out, name)
    except (BwdWidgetsError, OSError) as error:
        message = str(error) if isinstance(error, BwdWidgetsError) else one_line(error)
        print(f"bwd_extract: not saved: {message}", file=sys.stderr)
        return
    print(f"saved {', '.join(str(path) for path in written.values())}", file=sys.stderr)


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
        tree = ast.parse(text.strip(), mode="eval")
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


def _cell_module(cell: str, namespace: dict, output: str | None) -> tuple[torch.nn.Module, list]:
    """The cell as a module: its forward takes the tensors the cell reads, and the modules it reads
    are registered as submodules, so their parameters get gradients too."""
    try:
        tree = ast.parse(cell)
    except SyntaxError as error:
        raise UsageError(f"the cell has a syntax error: {error.msg} (line {error.lineno})") from None
    if not tree.body:
        raise UsageError("the cell is empty: write the forward computation in it")
    _refuse_generators(tree)
    assigned = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    if output and output not in assigned:
        raise UsageError(f"--output {output}: the cell never assigns {output}")
    if output:
        tree.body.append(ast.Return(ast.Name(output, ast.Load())))
    elif isinstance(tree.body[-1], ast.Expr):
        tree.body[-1] = ast.Return(tree.body[-1].value)
    else:
        raise UsageError("end the cell with the forward result as an expression, or name it with --output VAR")
    loaded = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in loaded:
            if node.id in namespace and not hasattr(builtins, node.id):
                loaded.append(node.id)
    tensors = [n for n in loaded if isinstance(namespace[n], torch.Tensor) and not keyword.iskeyword(n)]
    modules = {n: namespace[n] for n in loaded if isinstance(namespace[n], torch.nn.Module)}
    # Names the cell reads and then assigns (`counter += 1`) start from their value in the notebook, as
    # they would at top level; the extraction never changes the notebook's own (the cell runs once after).
    rebound = {n: namespace[n] for n in loaded if n in assigned and n not in tensors and n not in modules}
    body = textwrap.indent(ast.unparse(ast.Module(tree.body, type_ignores=[])), "    ")
    parameters = ", ".join(["self", *tensors] + (["*", *rebound] if rebound else []))
    scope: dict = {}
    exec(compile(f"def forward({parameters}):\n{body}\n", "<%%bwd_extract cell>", "exec"), namespace, scope)
    scope["forward"].__kwdefaults__ = rebound or None
    cell_module = type("Cell", (torch.nn.Module,), {"forward": scope["forward"]})()
    for name, module in modules.items():
        if not hasattr(torch.nn.Module, name):
            cell_module.add_module(name, module)
    return cell_module, [namespace[n] for n in tensors]


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
