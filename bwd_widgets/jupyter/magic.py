"""`%load_ext bwd_widgets`, then `%bwd_extract model(x)` or `%%bwd_extract` over a cell."""

from __future__ import annotations

import ast
import textwrap

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from ..core.errors import BwdWidgetsError
from ..core.partitioners import partitioner_names
from ..extractor import extract
from .widget import BackwardGraphWidget


@magics_class
class BwdMagics(Magics):
    @magic_arguments()
    @argument("call", nargs="*", help="the forward call, e.g. model(x, y) (line magic only)")
    @argument("--partitioner", default="default", help=f"one of {', '.join(partitioner_names())} (default: default)")
    @argument("--budget", type=float, default=None, help="activation memory budget in [0, 1]; implies min_cut")
    @argument("--fake", action="store_true", help="fake mode: trace shapes only, run nothing")
    @argument("--save", metavar="DIR", help="also write train_forward/ and train_backward/ GraphNet samples under DIR")
    @argument("--name", help="name of the extraction and of the saved samples (default: the model's class)")
    @argument("--no-display", action="store_true", help="return the extraction without showing the widget")
    @argument(
        "--output",
        metavar="VAR",
        help="cell magic: the variable holding the forward result (default: the last expression)",
    )
    @line_cell_magic
    def bwd_extract(self, line, cell=None):
        """Extract the backward graph of a forward call and show it.

        Examples::

            %load_ext bwd_widgets
            g = %bwd_extract model(x)
            %bwd_extract model(x) --partitioner min_cut --budget 0.3
            %bwd_extract model(x) --fake --save out/ --name my_model

            %%bwd_extract --output loss
            h = encoder(x)
            loss = decoder(h).square().mean()

        Returns the BackwardExtraction, so `g = %bwd_extract model(x)` keeps it.
        """
        try:
            args = parse_argstring(self.bwd_extract, line)
        except SystemExit:
            raise UsageError("bad arguments to %bwd_extract: see %bwd_extract? for the usage") from None
        namespace = self.shell.user_ns
        if cell is None:
            if not args.call:
                raise UsageError("give the forward call to extract, e.g. %bwd_extract model(x)")
            if args.output:
                raise UsageError("--output is for the cell magic %%bwd_extract")
            model, inputs = _evaluate_call(" ".join(args.call), namespace)
        else:
            if args.call:
                raise UsageError(f"%%bwd_extract takes options only; put {' '.join(args.call)!r} in the cell")
            model, inputs = _cell_function(cell, namespace, args.output)
        partitioner = "min_cut" if args.budget is not None and args.partitioner == "default" else args.partitioner
        try:
            extraction = extract(
                model,
                *inputs,
                partitioner=partitioner,
                memory_budget=args.budget,
                mode="fake" if args.fake else "real",
                name=args.name,
            )
            if args.save:
                extraction.save_graphnet(args.save, args.name or extraction.model_name)
        except BwdWidgetsError as error:
            raise UsageError(str(error)) from None
        if not args.no_display:
            from IPython.display import display

            display(BackwardGraphWidget(extraction))
        return extraction


def _evaluate(node, namespace):
    try:
        return eval(compile(ast.Expression(node), "<bwd_extract>", "eval"), namespace)
    except NameError as error:
        raise UsageError(f"{error}: define it in a cell before %bwd_extract") from None
    except Exception as error:
        raise UsageError(f"could not evaluate {ast.unparse(node)!r}: {type(error).__name__}: {error}") from None


def _evaluate_call(text, namespace):
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise UsageError(f"{text!r} is not a call: write it as model(x, y)") from None
    call = tree.body
    if not isinstance(call, ast.Call):
        raise UsageError(f"{text!r} is not a call: write it as model(x, y)")
    if call.keywords or any(isinstance(a, ast.Starred) for a in call.args):
        raise UsageError("pass the inputs positionally, e.g. model(x, y)")
    return _evaluate(call.func, namespace), [_evaluate(a, namespace) for a in call.args]


def _cell_function(cell, namespace, output):
    """The cell as a function of the tensors it reads, returning its forward result."""
    import torch

    try:
        tree = ast.parse(cell)
    except SyntaxError as error:
        raise UsageError(f"the cell has a syntax error: {error.msg} (line {error.lineno})") from None
    if not tree.body:
        raise UsageError("the cell is empty: write the forward computation in it")
    if output:
        tree.body.append(ast.Return(ast.Name(output, ast.Load())))
    elif isinstance(tree.body[-1], ast.Expr):
        tree.body[-1] = ast.Return(tree.body[-1].value)
    else:
        raise UsageError("end the cell with the forward result as an expression, or name it with --output VAR")
    assigned = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    read = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Name)
            and isinstance(node.ctx, ast.Load)
            and node.id not in assigned
            and node.id not in read
        ):
            if isinstance(namespace.get(node.id), torch.Tensor):
                read.append(node.id)
    if output and output not in assigned:
        raise UsageError(f"--output {output}: the cell never assigns {output}")
    body = textwrap.indent(ast.unparse(ast.Module(tree.body, type_ignores=[])), "    ")
    source = f"def bwd_extract_cell({', '.join(read)}):\n{body}\n"
    scope = {}
    exec(compile(source, "<%%bwd_extract cell>", "exec"), namespace, scope)
    return scope["bwd_extract_cell"], [namespace[name] for name in read]


def load(shell: InteractiveShell) -> None:
    shell.register_magics(BwdMagics)


def unload(shell: InteractiveShell) -> None:
    magics = shell.magics_manager.magics
    magics["line"].pop("bwd_extract", None)
    magics["cell"].pop("bwd_extract", None)
