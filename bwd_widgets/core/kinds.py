"""The closed sets of words that cross layers and processes, as `Literal` types the type checker holds.

A value outside one of these is a bug, not a user's choice: user input is checked against the tuples
(`MODES`...) where it arrives, with a sentence naming the choices.
"""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True)
class RegionStorages:
    """The storages each run of one compiled region took in from the forward and handed on, as keys the capture's
    regions share: what counting saved memory across regions needs, as `torch.compile`'s run keeps it (each storage
    once, each run of a region its own). A region after the first takes values the forward made (an earlier
    region's output, eager code's result): saving one keeps it alive, where the model's tensors and the call's are
    held anyway. A region loaded from files, or the torch.fx route's one region, has one run and made nothing."""

    made: tuple[dict[int, tuple[int, int]], ...] = ({},)
    """Per run: primal index -> (storage key, storage bytes), for each primal the forward made."""
    handed_on: tuple[dict[str, int], ...] = ({},)
    """Per run: forward value name (a storage's root in the region's graphs) -> storage key, for each value the
    region's forward returned: a later region may take and save the same storage."""

    @property
    def runs(self) -> int:
        """How often the capture's forward ran this region (a frame Dynamo compiled once, called for every block)."""
        return len(self.made)

    def kept(self, run: int, ref: StorageRef | None, one_run: int) -> tuple[int | None, int]:
        """The storage a saved value keeps alive in `run`, from its `SavedTensor.storage_ref`: its key (None where
        no other region can hold it) and its bytes: an input's storage where the forward made it in that run (none
        where the model or the caller held it then), else `one_run` (the value's `activation_bytes`)."""
        if ref is None:
            return None, one_run
        where, what = ref
        if where == "output":
            return self.handed_on[run].get(str(what)), one_run
        made = self.made[run].get(int(what))
        return (None, 0) if made is None else made


StorageRef = tuple[Literal["input", "output"], "int | str"]
"""Where a saved value's storage comes from in its region's run: ("input", primal index) for an input the forward
made, ("output", value name) for a value the region hands on (`RegionStorages.kept` reads it per run)."""


class EagerStorage(NamedTuple):
    """A storage eager autograd saved outside every compiled region in the capture's forward (`core/eager_saves.py`)."""

    key: int | None
    """The key the capture's regions know the storage by (`RegionStorages`), where a region took it in or handed it
    on; None where none did, so no region can save it."""
    nbytes: int


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
