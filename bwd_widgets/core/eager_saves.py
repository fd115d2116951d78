"""What eager autograd saves for backward outside every compiled region, read from the autograd graph a capture's
forward left.

Where Dynamo breaks the graph, the code between its regions runs eagerly, and where it skips a whole frame (a graph
break inside a loop) all of that frame's own ops do: eager autograd keeps what they save, torch.compile's run keeps it
too, and no partition holds it. After the capture's forward, and before any backward, the autograd graph holds every
saved value: a compiled region is one node (AOT Autograd's `CompiledFunction`), whose saved values are its
partition's; every other node's are eager autograd's. They are read there, not through a saved-tensor hook around the
forward: a hook would hide the user's own hooks from what Dynamo compiles, and fail a forward that turns hooks off
(`torch.func.grad`). Counted as torch.compile's own saves are counted: each storage once, the model's parameters and
buffers and the call's tensors left out (the model and the caller hold those anyway). Each storage carries the key
the capture's regions know it by, where a region took it in or handed it on: whether a region saves it too depends
on the partition shown, so the regions' count and this one meet in `core.trace.outside_regions`, at any budget.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from .compat import REGION_BACKWARD_NODE, storage_id
from .kinds import EagerStorage

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


def saved_by_eager(
    outputs: list[torch.Tensor],
    held: list[torch.Tensor],
    key_of: Callable[[torch.UntypedStorage], int | None],
    canonical: Callable[[torch.UntypedStorage], torch.UntypedStorage],
) -> list[EagerStorage]:
    """Each storage eager autograd saved for the backward of `outputs`, once, with its bytes and `key_of` it (the
    capture's key, None where no region took it in or handed it on); `held` (parameters, buffers, the call's
    tensors) left out. `canonical` gives the storage a torch.compile run has in its place (the capture's copy of an
    output that is a view of an input: `CaptureSession.canonical`). Read before any backward frees them."""
    held_keys = {key for t in held if (key := _storage_key(t)) is not None}
    by_eager: dict[int, EagerStorage] = {}
    seen: dict[int, object] = {}  # the nodes by id, kept alive while the walk runs
    stack = [t.grad_fn for t in outputs if t.grad_fn is not None]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen[id(node)] = node
        if type(node).__name__ != REGION_BACKWARD_NODE:  # a region's saves are its partition's
            for tensor in _saved_by(node):
                if _storage_key(tensor) is None:
                    continue
                storage = canonical(tensor.untyped_storage())
                key = storage_id(storage)
                if key not in held_keys and key not in by_eager:
                    by_eager[key] = EagerStorage(key_of(storage), int(storage.nbytes()))
        stack.extend(following for following, _ in node.next_functions if following is not None)
    return list(by_eager.values())


def _saved_by(node: object) -> Iterator[torch.Tensor]:
    """What one autograd node keeps for backward, as it keeps it, never unpacked: unpacking runs saved-tensor hooks
    (an eager checkpoint's would run its forward again, batch norm's statistics updated with it). A Python Function's
    (a compiled region's among them) `_raw_saved_tensors`, a built-in node's `_raw_saved_*`; what a hook packed into
    something other than a tensor is passed over."""
    names = ["_raw_saved_tensors"] if hasattr(node, "_raw_saved_tensors") else dir(node)
    for name in names:
        if not name.startswith("_raw_saved_"):
            continue
        try:
            value = getattr(node, name)
        except RuntimeError:  # freed, or no longer readable
            continue
        for saved in value if isinstance(value, (list, tuple)) else [value]:
            packed = getattr(saved, "data", None)  # the SavedTensor's own record: the tensor, or a hook's package
            if isinstance(packed, torch.Tensor):
                yield packed


_PYTHON_NUMBER_DTYPES = (torch.int64, torch.float64, torch.complex128, torch.bool)


def _storage_key(tensor: torch.Tensor) -> int | None:
    """The tensor's storage (fake ones included), or None for one with no elements, no plain storage (sparse), or
    one that is a Python number autograd wrapped (`x * 2` keeps the 2 as a 0-dim CPU tensor of Python's number
    type): autograd keeps that one without a saved-tensor hook seeing it, so torch.compile's count leaves it out.
    Python has no test for the wrap, so a 0-dim CPU tensor of those types that needs no gradient counts as one."""
    if not tensor.numel():
        return None
    if tensor.dim() == 0 and tensor.dtype in _PYTHON_NUMBER_DTYPES and tensor.device.type == "cpu":
        if not tensor.requires_grad:
            return None
    try:
        return storage_id(tensor.untyped_storage())
    except (RuntimeError, NotImplementedError):
        return None


def saved_outside_note(storage_bytes: list[int]) -> str:
    """What eager autograd kept outside every compiled region that no region of the partition shown keeps too."""
    tensors = f"{len(storage_bytes)} tensor{'s' if len(storage_bytes) != 1 else ''}"
    return (
        f"Outside every compiled region, eager autograd saved {sum(storage_bytes):,} B for backward in {tensors} that "
        "no region here saves too (read from the autograd graph the capture's forward left, each storage once): "
        "torch.compile's run keeps them beside each region's saved set, and no partition here shows them."
    )
