"""Which outputs of a traced graph alias (are, or are views of) one of its inputs and need a gradient:
AOT Autograd regenerates those outside its graphs, so their gradients would bypass the backward graph
(`CaptureSession._copy_outputs` returns copies instead). The torch.fx route reads torch's own answer; the
Dynamo route, and a torch that hands none over, compare fake values' storages.
"""

from __future__ import annotations

import torch
import torch.fx
from torch.multiprocessing.reductions import StorageWeakRef

from .compat import OutputType, TracingContext


def _storage(value: object) -> StorageWeakRef | None:
    return StorageWeakRef(value.untyped_storage()) if isinstance(value, torch.Tensor) else None


class AliasedOutputs(Exception):
    """Raised by the forward compiler on the torch.fx route: AOT Autograd found that the outputs at `indices`
    alias an input and need a gradient, so the graph is traced again with copies of them."""

    def __init__(self, indices: list[int]) -> None:
        super().__init__(indices)
        self.indices = indices


def outputs_aliasing_inputs(count: int) -> list[int] | None:
    """The outputs AOT Autograd's own metadata (`ViewAndMutationMeta.output_info`, in the tracing context it
    fills for its compilers) marks as an input or a view of one, needing a gradient; None where this torch
    hands no metadata over, or metadata for other outputs than the graph's `count` (tensor subclasses)."""
    metadata = getattr(TracingContext.try_get(), "fw_metadata", None)
    if metadata is None or len(metadata.output_info) != count:
        return None
    kinds = (OutputType.alias_of_input, OutputType.is_input)
    return [i for i, info in enumerate(metadata.output_info) if info.output_type in kinds and info.requires_grad]


def aliasing_outputs(gm: torch.fx.GraphModule, values: dict[torch.fx.Node, object]) -> list[int]:
    """The outputs whose value (`values`: each node's fake value) shares storage with an input's and needs a
    gradient: what AOT Autograd regenerates outside its graphs."""
    inputs = {_storage(values.get(n)) for n in gm.graph.nodes if n.op in ("placeholder", "get_attr")}
    inputs.discard(None)
    leaves = gm.graph.output_node().args[0]
    assert isinstance(leaves, (tuple, list))  # both routes hand AOT Autograd a flat tuple
    return [
        i
        for i, leaf in enumerate(leaves)
        if isinstance(value := values.get(leaf) if isinstance(leaf, torch.fx.Node) else None, torch.Tensor)
        and value.requires_grad
        and _storage(value) in inputs
    ]


def aliased_inputs(gm: torch.fx.GraphModule, values: dict[torch.fx.Node, object], indices: list[int]) -> dict[int, int]:
    """For each output at `indices` (`aliasing_outputs`), the position among the graph's placeholders of an input
    whose storage its value shares: in `torch.compile`'s run the output is a view of that input's memory."""
    placeholders = [_storage(values.get(n)) for n in gm.graph.nodes if n.op == "placeholder"]
    leaves = gm.graph.output_node().args[0]
    assert isinstance(leaves, (tuple, list))
    found = {}
    for i in indices:
        leaf = leaves[i]
        shared = _storage(values.get(leaf)) if isinstance(leaf, torch.fx.Node) else None
        if shared is not None and shared in placeholders:
            found[i] = placeholders.index(shared)
    return found
