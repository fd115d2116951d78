"""What the analyses read of a partition, as a Protocol: the analyses (`analysis`, `memory`, `nodes`) sit below
`trace.py`, which builds each `Partition` and caches their results on it, so they name the partition's shape here
instead of importing the class that imports them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch.fx

    from .decisions import Decisions
    from .kinds import InputSource, RegionStorages
    from .partitioners import Partitioner


class PartitionView(Protocol):
    """A trace split into forward and backward by one partitioner: `trace.Partition` is the one implementation."""

    @property
    def partitioner(self) -> Partitioner: ...

    @property
    def index(self) -> int:
        """Which of the trace's compiled regions this is."""

    @property
    def inputs(self) -> list[InputSource]: ...

    @property
    def storages(self) -> RegionStorages:
        """Which storages the region's run took in from the forward and handed on (`kinds.RegionStorages`)."""

    @property
    def joint(self) -> torch.fx.GraphModule: ...

    @property
    def forward(self) -> torch.fx.GraphModule: ...

    @property
    def backward(self) -> torch.fx.GraphModule: ...

    @property
    def backward_with_nones(self) -> torch.fx.GraphModule: ...

    @property
    def backward_code(self) -> str: ...

    @property
    def decisions(self) -> Decisions: ...

    @property
    def recomputed(self) -> list[tuple[str, str]]: ...
