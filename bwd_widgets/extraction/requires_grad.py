"""Which inputs and parameters get a gradient: the user's choice, or GraphNet's rule for its samples."""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Callable, Iterator, Sequence
from typing import Literal

import torch

from ..core.errors import BwdWidgetsError

NO_GRAD_KEYWORDS = (
    "running_mean",
    "running_var",
    "num_batches_tracked",
    "mask",
    "indices",
    "position_ids",
    "anchor",
)
RULES = ("training", "floating")
"""The named rules for which inputs get a gradient (parameters keep their own `requires_grad` under both):
"training": each input as the user made it (a data batch made without `requires_grad` gets none, as in a
training step); "floating": every floating-point input (GraphNet's rule for its samples), the default before
the training rule, for a backward that starts from a loss, was."""
Rule = Literal["training", "floating"]
RequiresGrad = bool | dict[str, bool] | Callable[[str, torch.Tensor], bool] | Rule | None
"""None: "training" where the backward starts from a loss, "floating" otherwise; a rule by name; a bool for all;
{name: bool}; or callable(name, tensor)."""


def default_requires_grad(name: str, tensor: object) -> bool:
    """GraphNet's rule, for GraphNet samples: floating point, except statistics, masks and indices.

    Pass `requires_grad=bw.default_requires_grad` to apply it to a model of your own.
    """
    if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
        return False
    return not any(keyword in name for keyword in NO_GRAD_KEYWORDS)


def decide_requires_grad(
    requires_grad: RequiresGrad,
    graphnet_rule: bool,
    arg_names: list[str],
    inputs: Sequence[object],
    parameters: dict[str, torch.nn.Parameter],
    rule_names: dict[str, str],
    from_loss: bool = False,
) -> dict[str, bool]:
    """Which floating inputs and parameters get a gradient; unknown names in a dict are an error. `from_loss`:
    the backward starts from a loss, where the default is the training rule."""
    named = isinstance(requires_grad, str)
    if named and requires_grad not in RULES:
        raise BwdWidgetsError(
            f"requires_grad={requires_grad!r} is not a rule: the rules are {', '.join(map(repr, RULES))}; "
            "or pass True or False, {name: bool}, or callable(name, tensor)."
        )
    if not (requires_grad is None or named or isinstance(requires_grad, (bool, dict)) or callable(requires_grad)):
        raise BwdWidgetsError(
            f"requires_grad={requires_grad!r} is not a choice: pass None (the default rule), 'training' or "
            "'floating', True or False, {name: bool}, or callable(name, tensor)."
        )
    rule = requires_grad if named else ("training" if from_loss and not graphnet_rule else "floating")
    if isinstance(requires_grad, dict):
        known = set(arg_names) | set(parameters) | set(rule_names.values())
        unknown = [n for n in requires_grad if n not in known]
        if unknown:
            close = difflib.get_close_matches(unknown[0], sorted(known), n=3)
            hint = (
                f"did you mean {', '.join(repr(c) for c in close)}?"
                if close
                else f"known: {', '.join(sorted(known)[:8])}."
            )
            raise BwdWidgetsError(
                f"requires_grad names {unknown[0]!r}, which is neither an argument nor a parameter: {hint}"
            )

    def decide(name: str, tensor: object, default: bool) -> bool:
        if not isinstance(tensor, torch.Tensor) or not (tensor.is_floating_point() or tensor.is_complex()):
            return False
        rule_name = rule_names.get(name, name)
        if isinstance(requires_grad, dict):
            for candidate in (name, rule_name):
                if candidate in requires_grad:
                    return bool(requires_grad[candidate])
        elif isinstance(requires_grad, bool):
            return requires_grad
        elif callable(requires_grad) and not named:
            return bool(requires_grad(name, tensor))
        if rule == "training" and name not in parameters:
            return tensor.requires_grad
        if graphnet_rule:
            return default and default_requires_grad(rule_name, tensor)
        return default

    decided = {n: decide(n, v, True) for n, v in zip(arg_names, inputs) if isinstance(v, torch.Tensor)}
    decided.update({n: decide(n, p, p.requires_grad) for n, p in parameters.items()})
    return decided


def decided_from_loss(
    requires_grad: RequiresGrad,
    graphnet_rule: bool,
    decided: dict[str, bool],
    model: object,
    arg_names: list[str],
    inputs: Sequence[object],
    parameters: dict[str, torch.nn.Parameter],
    rule_names: dict[str, str],
) -> dict[str, bool] | None:
    """Where the user's choice leaves inputs to the default and the training rule would differ from `decided`:
    the decision if the backward starts from a loss, which only the capture finds out (the output is picked
    inside the trace). None where it would not differ, or would leave a module nothing to differentiate (a plain
    function's parameters are those it closes over, which the capture finds). A GraphNet sample keeps GraphNet's
    rule: its samples are written as GraphNet's own extractor writes them."""
    if graphnet_rule or not (requires_grad is None or isinstance(requires_grad, dict)):
        return None
    trained = decide_requires_grad(requires_grad, False, arg_names, inputs, parameters, rule_names, from_loss=True)
    alone = isinstance(model, torch.nn.Module) and not any(trained.values())
    return trained if trained != decided and not alone else None


def ruled_inputs(
    requires_grad: RequiresGrad, arg_names: list[str], inputs: Sequence[object], rule_names: dict[str, str]
) -> dict[str, torch.Tensor]:
    """The tensor inputs whose gradient a rule decides: those the user named no choice for."""

    def by_rule(name: str) -> bool:
        if requires_grad is None or isinstance(requires_grad, str):
            return True
        return (
            isinstance(requires_grad, dict) and name not in requires_grad and rule_names.get(name) not in requires_grad
        )

    return {n: v for n, v in zip(arg_names, inputs) if isinstance(v, torch.Tensor) and by_rule(n)}


def gradient_note(inputs: dict[str, torch.Tensor], decided: dict[str, bool], why: str) -> str | None:
    """Which inputs get a gradient by a rule (`inputs`: those the user named no choice for; `why` the rule's
    reason), and how to say otherwise: a training step's data gets none, so an input's gradient is worth a word."""
    made = [n for n, t in inputs.items() if decided.get(n) and t.requires_grad]
    given = [n for n, t in inputs.items() if decided.get(n) and not t.requires_grad]
    if not made and not given:
        return None
    parts = []
    if given:
        parts.append(f"{_listed(given)} {_get(given)} a gradient ({why}")
        parts[-1] += f"; requires_grad={{{', '.join(f'{n!r}: False' for n in given)}}}, or --requires-grad training "
        parts[-1] += "in the magic, gives a training step's data none)"
    if made:
        parts.append(f"{_listed(made)} {_get(made)} a gradient as made (requires_grad=True)")
    return "; ".join(parts) + "."


def _listed(names: list[str]) -> str:
    return ", ".join(names[:6]) + (f" and {len(names) - 6} more inputs" if len(names) > 6 else "")


def _get(names: list[str]) -> str:
    return "gets" if len(names) == 1 else "get"


@contextlib.contextmanager
def requires_grad_applied(parameters: dict[str, torch.nn.Parameter], decided: dict[str, bool]) -> Iterator[None]:
    """Parameters get the decided flags and no .grad for the run; flags and .grad come back after."""
    flags = {n: p.requires_grad for n, p in parameters.items()}
    grads = {n: p.grad for n, p in parameters.items()}
    try:
        for n, p in parameters.items():
            p.requires_grad_(decided[n])
            p.grad = None
        yield
    finally:
        for n, p in parameters.items():
            p.requires_grad_(flags[n])
            p.grad = grads[n]
