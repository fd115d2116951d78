"""What eager autograd saves for backward outside every compiled region while a capture's forward runs.

Where Dynamo breaks the graph, the code between its regions runs eagerly, and where it skips a whole frame (a graph
break inside a loop) all of that frame's own ops do: eager autograd keeps what they save, torch.compile's run keeps it
too, and no partition holds it. A `saved_tensors_hooks` pack hook around the capture's forward sees every tensor
handed to autograd; a pack made while a compiled region runs (its autograd Function saving its partition's values)
is the region's, any other is eager autograd's. Counted as torch.compile's own saves are counted: each storage once,
the model's parameters and buffers and the call's tensors left out (the model and the caller hold those anyway), and
a storage a region saves too counted with the region.
"""

from __future__ import annotations

import contextlib
import functools
from typing import TYPE_CHECKING, Any

import torch

from .compat import storage_id

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


class SavedOutsideRegions:
    """One capture's count: `counting()` around its forward, each compiled region's callable `inside`."""

    def __init__(self, held: list[torch.Tensor]) -> None:
        self._held = {storage_id(t.untyped_storage()) for t in held if t.numel()}
        self._depth = 0
        self._regions: set[int] = set()
        self._eager: dict[int, int] = {}

    @property
    def storage_bytes(self) -> list[int]:
        """The bytes of each storage eager autograd saved and no region saved too, in the order packed."""
        return [size for key, size in self._eager.items() if key not in self._regions]

    def inside(self, compiled: Callable[..., Any]) -> Callable[..., Any]:
        """A compiled region's callable, its saves marked as the region's (its attributes, Dynamo's `_boxed_call`
        among them, kept)."""

        @functools.wraps(compiled)
        def region(*args: Any, **kwargs: Any) -> Any:
            self._depth += 1
            try:
                return compiled(*args, **kwargs)
            finally:
                self._depth -= 1

        return region

    @contextlib.contextmanager
    def counting(self) -> Iterator[None]:
        """Count the forward run in the block (the hook is this thread's only, as autograd's hooks are)."""
        with torch.autograd.graph.saved_tensors_hooks(self._pack, _unchanged):
            yield

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        if tensor.numel():
            storage = tensor.untyped_storage()
            key = storage_id(storage)
            if key not in self._held:
                if self._depth:
                    self._regions.add(key)
                else:
                    self._eager.setdefault(key, storage.nbytes())
        return tensor


def _unchanged(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


def saved_outside_note(storage_bytes: list[int]) -> str:
    """What eager autograd kept outside every compiled region, counted as the capture's forward ran."""
    tensors = f"{len(storage_bytes)} tensor{'s' if len(storage_bytes) != 1 else ''}"
    return (
        f"Outside every compiled region, eager autograd saved {sum(storage_bytes):,} B for backward in {tensors} as "
        "the forward ran (counted by a saved-tensor hook, each storage once): torch.compile's run keeps them beside "
        "each region's saved set, and no partition here shows them."
    )
