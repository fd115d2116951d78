"""The result of an extraction: graph pairs, saved tensors, gradients and code."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import torch.fx

from ._analysis import GradientOutput, SavedTensor, TensorInfo
from ._codegen import graphnet_code, without_none_outputs


@dataclass
class GraphPair:
    """One compiled region: its joint graph and the forward/backward split of it."""

    index: int
    forward: torch.fx.GraphModule
    backward_with_nones: torch.fx.GraphModule
    joint: torch.fx.GraphModule | None
    inputs: list  # InputSource per forward primal
    saved_tensors: list[SavedTensor]
    tangents: list[TensorInfo]
    gradients: list[GradientOutput]
    forward_inputs: list | None = None
    backward_inputs: list | None = None
    num_fwd_outputs: int | None = None
    joint_inputs: list | None = None
    partition_kwargs: dict = field(default_factory=dict)
    partitioner: str = "default"
    work_joint: torch.fx.GraphModule | None = field(default=None, repr=False)  # see _studio

    @cached_property
    def backward(self) -> torch.fx.GraphModule:
        """The backward graph with `None` gradients dropped from its returned tuple."""
        return without_none_outputs(self.backward_with_nones)

    @property
    def backward_code(self) -> str:
        return graphnet_code(self.backward)

    @property
    def forward_code(self) -> str:
        return graphnet_code(self.forward)

    @property
    def recomputed(self) -> list:
        """Forward ops the partitioner chose to recompute in backward: (node name, op)."""
        from ._analysis import op_name

        return [
            (n.name, op_name(n))
            for n in self.backward.graph.nodes
            if n.op == "call_function" and n.meta.get("partitioner_tag") == "is_forward"
        ]

    @cached_property
    def node_flops(self) -> dict:
        """FLOPs of each backward node, by torch's FLOP counter on fake tensors."""
        from ._flops import node_flops

        return node_flops(self.backward)

    @property
    def backward_flops(self) -> int:
        return sum(self.node_flops.values())

    @property
    def recompute_flops(self) -> int:
        """FLOPs spent in backward recomputing forward ops."""
        flops = self.node_flops
        return sum(flops.get(name, 0) for name, _ in self.recomputed)

    @property
    def saved_activation_bytes(self) -> int:
        """Memory saved on top of the forward inputs (views of inputs cost nothing)."""
        return sum(s.activation_bytes for s in self.saved_tensors)

    @property
    def saved_input_bytes(self) -> int:
        """Forward inputs (parameters, buffers, user inputs) kept alive for backward."""
        return sum(s.bytes for s in self.saved_tensors if not s.is_activation)


def _count_nodes(gm) -> int:
    return sum(1 for _ in gm.graph.nodes)


@dataclass
class BackwardExtraction:
    """Everything captured for one model, one partitioner, one mode.

    A model with graph breaks has several graph pairs, in execution order; the
    `forward`, `backward` and `joint` shortcuts give the first.
    """

    graphs: list[GraphPair]
    partitioner: str
    memory_budget: float | None
    mode: str
    model_name: str
    seconds: float = 0.0
    autograd_gradients: dict = field(default_factory=dict)  # name -> grad (real mode)
    requires_grad: dict = field(default_factory=dict)  # name -> bool, as decided
    notes: list = field(default_factory=list)  # things a user should know, one sentence each

    def rerun(self, partitioner="default", memory_budget=None) -> "BackwardExtraction":
        """The same model and inputs under another partitioner: the joint graph is
        partitioned again, not traced again."""
        from ._studio import repartition

        return repartition(self, partitioner, memory_budget)

    def compare(self, partitioners=("default", "min_cut", 0.5, 0.0)):
        """One row per partition of this extraction's joint graph."""
        from ._studio import compare

        return compare(self, partitioners=partitioners)

    def sweep(self, budgets=None, progress=True):
        """Min-cut across memory budgets; Pareto points of memory against recompute."""
        from ._studio import sweep

        return sweep(self, budgets=budgets, progress=progress)

    @property
    def backward_flops(self) -> int:
        return sum(g.backward_flops for g in self.graphs)

    @property
    def recompute_flops(self) -> int:
        return sum(g.recompute_flops for g in self.graphs)

    def widget(self, **kwargs):
        """The interactive viewer for this extraction (needs ipywidgets and the built front end)."""
        from ._widget import BackwardGraphWidget

        return BackwardGraphWidget(self, **kwargs)

    def to_dot(self, graph_index: int = 0) -> str:
        from ._graph_data import to_dot

        return to_dot(self, graph_index)

    def save_svg(self, path, graph_index: int = 0):
        """A static SVG through Graphviz's `dot` program (needs Graphviz installed: apt install graphviz)."""
        from ._graph_data import save_svg

        return save_svg(self, path, graph_index)

    def to_html(self, path, graph_index: int = 0):
        """One self-contained HTML file with the same viewer: no kernel, no network."""
        from ._html import write_html

        return write_html(self, path, graph_index)

    @property
    def forward(self) -> torch.fx.GraphModule:
        return self.graphs[0].forward

    @property
    def backward(self) -> torch.fx.GraphModule:
        return self.graphs[0].backward

    @property
    def joint(self) -> torch.fx.GraphModule | None:
        return self.graphs[0].joint

    @property
    def backward_code(self) -> str:
        return self.graphs[0].backward_code

    @property
    def forward_code(self) -> str:
        return self.graphs[0].forward_code

    @property
    def saved_tensors(self) -> list[SavedTensor]:
        return [s for g in self.graphs for s in g.saved_tensors]

    @property
    def tangents(self) -> list[TensorInfo]:
        return [t for g in self.graphs for t in g.tangents]

    @property
    def gradients(self) -> list[GradientOutput]:
        return [d for g in self.graphs for d in g.gradients]

    @property
    def recomputed(self) -> list:
        return [r for g in self.graphs for r in g.recomputed]

    @property
    def saved_activation_bytes(self) -> int:
        return sum(g.saved_activation_bytes for g in self.graphs)

    @property
    def saved_input_bytes(self) -> int:
        return sum(g.saved_input_bytes for g in self.graphs)

    @property
    def forward_node_count(self) -> int:
        return sum(_count_nodes(g.forward) for g in self.graphs)

    @property
    def backward_node_count(self) -> int:
        return sum(_count_nodes(g.backward) for g in self.graphs)

    def summary(self) -> dict:
        """Plain numbers, for tables, JSON and notebooks."""
        return {
            "model": self.model_name,
            "partitioner": self.partitioner,
            "memory_budget": self.memory_budget,
            "mode": self.mode,
            "graphs": len(self.graphs),
            "forward_nodes": self.forward_node_count,
            "backward_nodes": self.backward_node_count,
            "saved": len(self.saved_tensors),
            "saved_activations": sum(1 for s in self.saved_tensors if s.is_activation),
            "recomputed": len(self.recomputed),
            "saved_activation_bytes": self.saved_activation_bytes,
            "saved_input_bytes": self.saved_input_bytes,
        }

    def save_graphnet(self, out_dir, name: str | None = None):
        """Write `train_forward/<name>` and `train_backward/<name>` GraphNet samples."""
        from ._graphnet import save_extraction

        return save_extraction(self, out_dir, name or self.model_name)

    def __repr__(self) -> str:
        return (
            f"BackwardExtraction(model={self.model_name!r}, partitioner={self.partitioner!r}, "
            f"mode={self.mode!r}, graphs={len(self.graphs)}, fw_nodes={self.forward_node_count}, "
            f"bw_nodes={self.backward_node_count}, saved={len(self.saved_tensors)}, "
            f"saved_activation_bytes={self.saved_activation_bytes})"
        )
