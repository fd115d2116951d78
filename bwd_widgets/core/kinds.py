"""The closed sets of words that cross layers and processes, as `Literal` types the type checker holds.

A value outside one of these is a bug, not a user's choice: user input is checked against the tuples
(`MODES`...) where it arrives, with a sentence naming the choices.
"""

from __future__ import annotations

from typing import Literal, NamedTuple, get_args

Mode = Literal["real", "fake"]
"""real: forward and backward run, real values kept; fake: shapes only, under FakeTensorMode."""
MODES: tuple[Mode, ...] = get_args(Mode)

Backend = Literal["aot_eager", "inductor"]
"""Whose partition a capture shows. aot_eager: AOT Autograd's joint graph as it traces it, split by the partitioner
chosen (what `torch.compile(model, backend="aot_eager")` does with min-cut). inductor: the joint graph after
Inductor's pre-grad passes, decompositions and joint-graph passes, split by min-cut, as `torch.compile(model)`
(Inductor, the default backend) partitions it."""
BACKENDS: tuple[Backend, ...] = get_args(Backend)
DEFAULT_BACKEND: Backend = "aot_eager"
"""The backend every entry point (`extract`, the magic, the command line, a batch) uses unless told, and the one
a batch output whose settings name none was made by."""

InputKind = Literal["parameter", "buffer", "input"]
"""What a forward primal is."""


class InputSource(NamedTuple):
    """What a forward primal is: kind, human name, and the key autograd's grads use."""

    kind: InputKind
    name: str
    """`bn.weight`, or the argument name."""
    key: str
    """The argument name (inputs) or qualified parameter name, as in `autograd_gradients`."""
    aliases: tuple[str, ...] = ()
    """The other qualified names of the same tensor (tied weights, a module shared at two paths)."""


SavedKind = Literal["activation", "parameter", "buffer", "input", "symint"]
"""What a value saved for backward is: computed in forward, a forward input, or a symbolic size."""
SAVED_KINDS: tuple[SavedKind, ...] = get_args(SavedKind)

NodeKind = Literal["saved", "tangent", "gradient", "op"]
"""What a backward node is: a value saved in forward, a tangent (the gradient flowing in), an op
whose output is an input's gradient, or any other op."""
NODE_KINDS: tuple[NodeKind, ...] = get_args(NodeKind)

TANGENT_PREFIX = "tangents_"
"""AOT Autograd names the backward's incoming-gradient placeholders `tangents_<i>`."""


def is_tangent(name: str) -> bool:
    """Whether a backward placeholder is a tangent (torch's own naming), not a saved value."""
    return name.startswith(TANGENT_PREFIX)
