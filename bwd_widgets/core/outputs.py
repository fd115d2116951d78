"""Which outputs of a model get a backward, and the call that hands the model its inputs by name.

A model's output may be any pytree: a tensor, tuples, dicts, dataclasses, a transformers
`ModelOutput` (a dict subclass holding `loss`, `logits`, caches, hidden states). The backward starts
from the differentiable tensors of the chosen part of it: `output=` picks that part; by default the
loss when the output holds one (what training differentiates), else every differentiable output.
"""

from __future__ import annotations

import dataclasses
import inspect
import keyword
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any

import torch

from .compat import keyless_pytree_node, pytree
from .errors import CallError, NoDifferentiableOutputError, OutputChoiceError

OutputChoice = str | int | Callable[[Any], Any] | None
"""`None`: the loss if the output holds one, else all; a key, attribute or index; or callable(output)."""


def pick_output(outputs: Any, output: OutputChoice) -> Any:
    """The part of a model's output the backward starts from (traced: it runs inside the compiled call)."""
    if output is None:
        loss = _entry(outputs, "loss")
        return outputs if loss is None else loss
    if callable(output):
        return output(outputs)
    picked = _entry(outputs, output)
    if picked is None:
        raise OutputChoiceError(
            f"output={output!r}: the model's output ({type(outputs).__name__}) has no {output!r} "
            f"(it has {', '.join(output_keys(outputs)) or 'no named parts'}): pick one of those, or pass a callable."
        )
    return picked


def _entry(outputs: Any, key: str | int) -> Any:
    if isinstance(key, int) and isinstance(outputs, (tuple, list)) and -len(outputs) <= key < len(outputs):
        return outputs[key]
    if isinstance(key, str):
        if isinstance(outputs, Mapping):
            return outputs.get(key)
        if dataclasses.is_dataclass(outputs) and not isinstance(outputs, type):
            return getattr(outputs, key, None)
    return None


def output_keys(outputs: Any) -> list[str]:
    """Top-level names (or indices) of a model's output, for messages."""
    if isinstance(outputs, Mapping):
        return [str(k) for k, v in outputs.items() if v is not None]
    if dataclasses.is_dataclass(outputs) and not isinstance(outputs, type):
        return [f.name for f in dataclasses.fields(outputs) if getattr(outputs, f.name) is not None]
    if isinstance(outputs, (tuple, list)):
        return [str(i) for i in range(len(outputs))]
    return []


def _path_name(path: tuple) -> str:
    """`loss` for a top-level key, pytree's own key text (`[0][1]`, `logits.x`) otherwise."""
    if len(path) == 1 and isinstance(path[0], pytree.MappingKey):
        return str(path[0].key)
    return pytree.keystr(path).lstrip(".")


def differentiable_leaves(outputs: Any) -> list[tuple[str, torch.Tensor]]:
    """(path, tensor) for each tensor of the output that requires grad: `loss`, `logits`, `[0][1]`.

    Key paths are pytree's own, except through a node registered without a keys function (diffusers'
    `BaseOutput`, whose classes register only flatten and unflatten): pytree refuses a path through one, so
    such a node is opened here, by its keys when it is a mapping, by its fields when a dataclass."""
    leaves: list[tuple[str, torch.Tensor]] = []
    for path, leaf in pytree.tree_flatten_with_path(_keyed(outputs), is_leaf=keyless_pytree_node)[0]:
        name = _path_name(path)
        if keyless_pytree_node(leaf) or (dataclasses.is_dataclass(leaf) and not isinstance(leaf, type)):
            leaves.extend((_joined(name, sub), t) for sub, t in differentiable_leaves(leaf))
        elif isinstance(leaf, torch.Tensor) and leaf.requires_grad:
            leaves.append((name or "output", leaf))
    return leaves


def _keyed(outputs: Any) -> Any:
    """`outputs` as a tree pytree can name every path of: a dataclass (that is no mapping) or a node without a
    keys function becomes a dict of its fields or keys, or the list of its leaves."""
    if isinstance(outputs, Mapping) and keyless_pytree_node(outputs):
        return dict(outputs)
    if dataclasses.is_dataclass(outputs) and not isinstance(outputs, type) and not isinstance(outputs, Mapping):
        return {f.name: getattr(outputs, f.name) for f in dataclasses.fields(outputs)}
    if keyless_pytree_node(outputs):
        return pytree.tree_leaves(outputs)
    return outputs


def _joined(name: str, sub: str) -> str:
    return f"{name}{sub}" if sub.startswith("[") or not name else f"{name}.{sub}"


def differentiable_outputs(outputs: Any) -> list[torch.Tensor]:
    tensors = [t for _, t in differentiable_leaves(outputs)]
    if not tensors:
        raise NoDifferentiableOutputError(
            "no output is a differentiable tensor: return a floating-point tensor computed "
            "from an input or parameter that requires grad, or pick one with output=."
        )
    return tensors


def starts_from_loss(value: Any) -> bool:
    """Whether the backward starts from a loss: one differentiable output of one element, the only kind
    `loss.backward()` takes without a gradient (torch: "grad can be implicitly created only for scalar outputs")."""
    leaves = differentiable_leaves(value)
    return len(leaves) == 1 and leaves[0][1].numel() == 1


@dataclasses.dataclass(frozen=True)
class Picked:
    """What `selecting`'s wrapper returns: the picked output, and what the whole output held."""

    value: Any
    keys: tuple[str, ...]
    """Top-level names of the model's whole output."""
    loss_by_default: bool
    """The loss was picked because no `output=` was given."""


def picked_output(outputs: Any, output: OutputChoice) -> tuple[Any, tuple[str, ...], bool]:
    """`pick_output` with what a note needs (a tuple: Dynamo hands plain tuples of constants back)."""
    value = pick_output(outputs, output)
    return value, tuple(output_keys(outputs)), output is None and value is not outputs


def outputs_note(picked: Picked, output: OutputChoice) -> str | None:
    """Which outputs got tangents, in words, where the output holds more than one part."""
    names = [name for name, _ in differentiable_leaves(picked.value)]
    shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    others = ", ".join(k for k in picked.keys if k != "loss")
    if picked.loss_by_default:
        return f"the backward starts from the model's loss, as training does; output= picks another part ({others})."
    if output is None:
        return (
            f"the backward starts from every differentiable output ({shown}); output= picks one."
            if len(names) > 1
            else None
        )
    parts = "" if names == ["output"] else f": {shown}"
    return f"the backward starts from output={_described(output)}{parts}."


def _described(output: OutputChoice) -> str:
    return getattr(output, "__name__", repr(output)) if callable(output) else repr(output)


def bind_inputs(model: Callable, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
    """Check the inputs against the forward's signature; keyword inputs that only fill the leading
    positional parameters become positional (so torch.fx, and GraphNet's argument order, still apply)."""
    target = model.forward if isinstance(model, torch.nn.Module) else model
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return args, kwargs
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as error:
        raise CallError(f"the inputs do not fit {_name(model)}'s forward: {error}.") from None
    if not kwargs:
        return args, kwargs
    positional = [p for p in signature.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    given = list(bound.arguments)
    if given == [p.name for p in positional[: len(given)]]:
        return tuple(bound.arguments.values()), {}
    return args, kwargs


def _name(model: Callable) -> str:
    return type(model).__name__ if isinstance(model, torch.nn.Module) else getattr(model, "__name__", "the model")


def selecting(model: Callable, output: OutputChoice) -> Callable:
    """`model` with `pick_output` applied to its result, keeping the forward's own signature.

    Dynamo names graph inputs by the compiled frame's locals: a wrapper with the forward's parameter
    names (and `self` for a module, called through `Module.__call__` so hooks still run) gives the same
    names, `L['self']._modules[...]` and `L['input_ids']`, as compiling the model itself."""
    target = model.forward if isinstance(model, torch.nn.Module) else model
    try:
        parameters = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        parameters = [inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL)]
        parameters.append(inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD))
    names = [p.name for p in parameters]
    if any(not n.isidentifier() or keyword.iskeyword(n) or n.startswith("_bw_") for n in names) or "self" in names:
        parameters = [inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL)]
        parameters.append(inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD))
    namespace: dict[str, Any] = {}
    declared, passed = _source_parameters(parameters, namespace)
    receiver = "self, " if isinstance(model, torch.nn.Module) else ""
    called = "_bw_call(self, " if isinstance(model, torch.nn.Module) else "_bw_model("
    source = (
        f"def _bw_factory(_bw_pick, _bw_output, _bw_call, _bw_model):\n"
        f"    def forward({receiver}{declared}):\n"
        f"        return _bw_pick({called}{passed}), _bw_output)\n"
        f"    return forward\n"
    )
    # A file name of ours, not `<...>`: Dynamo skips frames of code from no file, and would start its
    # trace inside torch's Module.__call__ instead.
    exec(compile(source, __file__, "exec"), namespace)
    inner = namespace["_bw_factory"](picked_output, output, torch.nn.Module.__call__, model)
    function: types.FunctionType = inner
    home = getattr(target, "__globals__", None)
    if isinstance(home, dict) and home.get("__name__") not in sys.modules:
        # Dynamo reads an inlined function's globals by importing its module; a module loaded from a
        # file (GraphNet samples are) may not be importable, so the wrapper shares its globals instead.
        function = types.FunctionType(inner.__code__, home, "forward", inner.__defaults__, inner.__closure__)
        function.__kwdefaults__ = inner.__kwdefaults__
    return function.__get__(model) if isinstance(model, torch.nn.Module) else function


def _source_parameters(parameters: list[inspect.Parameter], namespace: dict[str, Any]) -> tuple[str, str]:
    """The parameter list and the pass-through arguments of a wrapper with these parameters."""
    declared, passed, star = [], [], False
    for i, p in enumerate(parameters):
        default = ""
        if p.default is not p.empty:
            namespace[f"_bw_default_{i}"] = p.default
            default = f"=_bw_default_{i}"
        if p.kind == p.VAR_POSITIONAL:
            declared.append(f"*{p.name}")
            passed.append(f"*{p.name}")
            star = True
        elif p.kind == p.VAR_KEYWORD:
            declared.append(f"**{p.name}")
            passed.append(f"**{p.name}")
        elif p.kind == p.KEYWORD_ONLY:
            if not star:
                declared.append("*")
                star = True
            declared.append(f"{p.name}{default}")
            passed.append(f"{p.name}={p.name}")
        else:
            declared.append(f"{p.name}{default}")
            passed.append(p.name if p.kind == p.POSITIONAL_ONLY else f"{p.name}={p.name}")
    positional_only = [i for i, p in enumerate(parameters) if p.kind == p.POSITIONAL_ONLY]
    if positional_only:
        declared.insert(positional_only[-1] + 1, "/")
    return ", ".join(declared), ", ".join(passed)
