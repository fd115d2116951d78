"""The result of an extraction: data and numbers only. Views reach it through `bw.show`, `bw.to_html`, ..."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from ..core import memory
from ..core.eager_saves import saved_outside_note
from ..core.kinds import Backend, EagerStorage, Mode
from ..core.measure import MeasuredMemory
from ..core.measure import measure as measure_partitions
from ..core.partitioners import resolve_for_backend
from ..core.trace import TORCH_WORK, Partition, outside_regions, saved_storages
from ..graphnet.writer import Layout, save_extraction
from .display_hook import RichDisplay

if TYPE_CHECKING:
    from pathlib import Path

    from ..core.analysis import GradientOutput, SavedTensor, TensorInfo


def _count_nodes(gm: torch.fx.GraphModule) -> int:
    """Placeholders and ops; not fx's `output` node, which the widget does not draw either."""
    return sum(1 for node in gm.graph.nodes if node.op != "output")


@dataclass(eq=False)
class BackwardExtraction(RichDisplay):
    """Everything captured for one model, one partitioner, one mode.

    A model with graph breaks has several partitions (one per compiled region), in execution order;
    the `forward`, `backward` and `joint` shortcuts give the first.
    """

    partitions: list[Partition]
    mode: Mode
    model_name: str
    seconds: float = 0.0
    autograd_gradients: dict[str, torch.Tensor] = field(default_factory=dict)
    """Gradients eager autograd computed (real mode), by argument or qualified parameter name."""
    requires_grad: dict[str, bool] = field(default_factory=dict)
    """Which inputs and parameters were given a gradient, as decided."""
    eager_storages: tuple[EagerStorage, ...] = ()
    """Each storage eager autograd saved for backward outside every compiled region as the capture's forward ran
    (code Dynamo ran eagerly: between graph breaks, a frame it skipped), once, with the key the regions know it by:
    torch.compile's run keeps them too (`core/eager_saves.py`). `saved_outside_regions` is those no partition shown
    saves too."""
    torch_compile_settings: dict[str, object] = field(default_factory=dict)
    """The `torch._dynamo.config` settings, beside your own, under which `torch.compile` makes the graphs shown:
    those the capture set for its own trace (`allow_rnn`, `capture_scalar_outputs` where a graph keeps an `.item()`
    inside...) and the `ignore_logging_functions` that skips the logger calls it traced past, each named in a note.
    `with torch._dynamo.config.patch(**e.torch_compile_settings):` compiles the model as shown; empty where your
    settings do already."""
    measured: MeasuredMemory | None = field(default=None, init=False, repr=False)
    """The last `measure()` (None until then; `rerun` starts unmeasured): `bw.show` draws it over the prediction."""

    def rerun(self, partitioner: object = None, memory_budget: float | None = None) -> BackwardExtraction:
        """The same model and inputs under another partitioner: each trace is partitioned again, not traced. None:
        the backend's own default ("default" after aot_eager, min-cut after Inductor); a partitioner the backend
        never splits with is refused in one sentence (`core.partitioners.allowed_on`)."""
        resolved = resolve_for_backend(partitioner, memory_budget, self.backend)
        started = time.perf_counter()
        with TORCH_WORK:  # a partition made in a thread waits for a capture, and the other way round
            partitions = [p.trace.partition(resolved) for p in self.partitions]
        return dataclasses.replace(self, partitions=partitions, seconds=time.perf_counter() - started)

    @property
    def partitioner(self) -> str:
        return self.partitions[0].partitioner.name

    @property
    def backend(self) -> Backend:
        """Whose partition this is: "aot_eager" (AOT Autograd's joint graph as traced) or "inductor" (the joint
        graph after Inductor's passes, as `torch.compile(model)` partitions it)."""
        return self.partitions[0].trace.backend

    @property
    def partitions_again(self) -> bool:
        """Whether `rerun` can partition this joint graph again (the widget's partitioner, budget and sweep
        controls act only then); a region loaded from a trace keeps the partition its run made."""
        return True

    @property
    def memory_budget(self) -> float | None:
        return self.partitions[0].partitioner.memory_budget

    @property
    def label(self) -> str:
        """`default`, `min_cut`, or `min_cut budget 0.5`."""
        return self.partitions[0].partitioner.label

    @property
    def notes(self) -> list[str]:
        """Anything worth knowing, one sentence each (a failed real backward run, a replay that failed)."""
        notes = [n for p in self.partitions for n in p.trace.notes + p.notes]
        if outside_eagerly := self.saved_outside_regions:
            notes.append(saved_outside_note(list(outside_eagerly)))
        outside = self.gradients_outside_graphs
        if outside:
            shown = ", ".join(outside[:4]) + (f" and {len(outside) - 4} more" if len(outside) > 4 else "")
            notes.append(
                f"the gradients of {shown} come from code that ran outside every compiled region (eagerly, "
                "between graph breaks): no backward graph here holds them."
            )
        return notes

    @property
    def gradients_outside_graphs(self) -> list[str]:
        """Inputs and parameters autograd gave a gradient (real mode) that no backward graph computes."""
        inside = {g.key for p in self.partitions for g in p.gradients}
        return [key for key in self.autograd_gradients if key not in inside]

    @property
    def forward(self) -> torch.fx.GraphModule:
        return self.partitions[0].forward

    @property
    def backward(self) -> torch.fx.GraphModule:
        return self.partitions[0].backward

    @property
    def joint(self) -> torch.fx.GraphModule:
        return self.partitions[0].joint

    @property
    def backward_code(self) -> str:
        return self.partitions[0].backward_code

    @property
    def forward_code(self) -> str:
        return self.partitions[0].forward_code

    @property
    def saved_tensors(self) -> list[SavedTensor]:
        return [s for p in self.partitions for s in p.saved_tensors]

    @property
    def tangents(self) -> list[TensorInfo]:
        return [t for p in self.partitions for t in p.tangents]

    @property
    def gradients(self) -> list[GradientOutput]:
        return [d for p in self.partitions for d in p.gradients]

    @property
    def recomputed(self) -> list[tuple[str, str]]:
        return [r for p in self.partitions for r in p.recomputed]

    @property
    def backward_flops(self) -> int:
        return sum(p.backward_flops for p in self.partitions)

    @property
    def recompute_flops(self) -> int:
        return sum(p.recompute_flops for p in self.partitions)

    @property
    def saved_storage_bytes(self) -> list[int]:
        """The bytes of each storage the compiled regions keep for backward beyond the model's tensors and the
        call's: each once across regions, once per run of a region the forward ran more than once
        (`core.trace.saved_storages`). What a `torch.compile` run keeps in its regions; `saved_outside_regions` is
        what eager autograd keeps between them."""
        return [nbytes for _, nbytes in saved_storages(self.partitions)]

    @property
    def saved_outside_regions(self) -> tuple[int, ...]:
        """The bytes of each storage eager autograd saved outside every compiled region and no region here saves
        too (`core.trace.outside_regions`): read at the capture, true of every partition made again from it. With
        `saved_storage_bytes`, everything a `torch.compile` run keeps for backward."""
        return tuple(outside_regions(self.partitions, self.eager_storages))

    @property
    def saved_activation_bytes(self) -> int:
        """The sum of `saved_storage_bytes`; for one region run once, its partition's `saved_activation_bytes`."""
        return sum(self.saved_storage_bytes)

    @property
    def saved_input_bytes(self) -> int:
        return sum(p.saved_input_bytes for p in self.partitions)

    @property
    def forward_node_count(self) -> int:
        return sum(_count_nodes(p.forward) for p in self.partitions)

    @property
    def backward_node_count(self) -> int:
        return sum(_count_nodes(p.backward) for p in self.partitions)

    def memory_by_module(self) -> dict[str, int]:
        """Saved activation bytes per module ("" for the top level), largest first; they sum to
        `saved_activation_bytes`."""
        return memory.bytes_by_module(saved_storages(self.partitions))

    def memory_timeline(self) -> list[dict]:
        """Activation memory alive after each op, `{"phase", "node", "live_bytes", "graph"}`, as AOT
        Autograd runs forward and backward (each value dropped after its last use), on top of the
        forward inputs and tangents."""
        return memory.timeline(self.partitions)

    @property
    def peak(self) -> memory.MemoryPeak:
        """Where activation memory peaks: `live_bytes`, `phase`, `node`, `module`, `graph`, `step`."""
        return memory.peak(self.partitions)

    @property
    def peak_activation_bytes(self) -> int:
        """The highest point of `memory_timeline()`, the memory pane's peak: it includes the gradients the
        backward returns (alive to its end), which no activation plan lowers."""
        return self.peak.live_bytes

    @property
    def activation_only_peak(self) -> memory.MemoryPeak:
        """Where `memory_timeline()` less the parameters' gradients peaks: saved values, temporaries and any
        input's gradient (`memory.activation_peak`)."""
        return memory.activation_peak(self.partitions)

    @property
    def peak_activation_only_bytes(self) -> int:
        """`activation_only_peak`'s bytes: what a memory target for activations is held against."""
        return self.activation_only_peak.live_bytes

    def measure(self) -> MeasuredMemory:
        """Run the real forward and backward graphs op by op and measure live activation memory.

        Counts what `memory_timeline()` predicts (storages the graphs allocate, each once; not forward
        inputs or tangents), one point per op at the same steps: `.peak_bytes`, `.curve`,
        `.predicted_peak_bytes`, `.error_percent`, `.to_memory_viz(path)`. It runs the model, so it is
        never done implicitly: the result is kept as `measured`, and the next `bw.show(self)` draws it.
        Real mode only (a fake-mode extraction has no values to run)."""
        self.measured = measure_partitions(self.partitions)
        return self.measured

    def summary(self) -> dict:
        """Plain numbers, for tables, JSON and notebooks."""
        return {
            "model": self.model_name,
            "partitioner": self.partitioner,
            "memory_budget": self.memory_budget,
            "mode": self.mode,
            "graphs": len(self.partitions),
            "forward_nodes": self.forward_node_count,
            "backward_nodes": self.backward_node_count,
            "saved": len(self.saved_tensors),
            "saved_activations": sum(1 for s in self.saved_tensors if s.is_activation),
            "recomputed": len(self.recomputed),
            "saved_activation_bytes": self.saved_activation_bytes,
            "saved_input_bytes": self.saved_input_bytes,
        }

    def save_graphnet(
        self, out_dir: str | Path, name: str | None = None, *, layout: Layout = "graphnet", validate: bool = False
    ) -> dict[str, Path]:
        """Write the `train_forward` and `train_backward` GraphNet samples, as GraphNet's extractor lays them out.

        `out_dir/train_backward/<name>/<basename>_train_backward` (`layout="flat"`: `out_dir/train_backward/<name>`).
        validate: run GraphNet's validation steps on each and write `graph_hash.txt` as its validator does;
        a sample that fails raises ValidationError and nothing is written. Returns the folder of each split.
        """
        check = None
        if validate:
            from ..graphnet.validate import validate_or_raise

            check = validate_or_raise
        return save_extraction(self, out_dir, name or self.model_name, layout, check)

    def __repr__(self) -> str:
        return (
            f"BackwardExtraction(model={self.model_name!r}, backend={self.backend!r}, "
            f"partitioner={self.partitioner!r}, mode={self.mode!r}, graphs={len(self.partitions)}, fw_nodes={self.forward_node_count}, "
            f"bw_nodes={self.backward_node_count}, saved={len(self.saved_tensors)}, "
            f"saved_activation_bytes={self.saved_activation_bytes})"
        )
