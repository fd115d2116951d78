"""Which inputs and parameters get a gradient: the user's choice, or GraphNet's rule for its samples."""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Callable, Iterator, Sequence

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
RequiresGrad = bool | dict[str, bool] | Callable[[str, torch.Tensor], bool] | None
"""None: floating-point inputs, parameters as they are; a bool for all; {name: bool}; or callable(name, tensor)."""


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
) -> dict[str, bool]:
    """Which floating inputs and parameters get a gradient; unknown names in a dict are an error."""
    if not (requires_grad is None or isinstance(requires_grad, (bool, dict)) or callable(requires_grad)):
        raise BwdWidgetsError(
            f"requires_grad={requires_grad!r} is not a choice: pass None (the default rule), True or False, "
            "{name: bool}, or callable(name, tensor)."
        )
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
        elif callable(requires_grad):
            return bool(requires_grad(name, tensor))
        elif isinstance(requires_grad, bool):
            return requires_grad
        if graphnet_rule:
            return default and default_requires_grad(rule_name, tensor)
        return default

    decided = {n: decide(n, v, True) for n, v in zip(arg_names, inputs) if isinstance(v, torch.Tensor)}
    decided.update({n: decide(n, p, p.requires_grad) for n, p in parameters.items()})
    return decided


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
