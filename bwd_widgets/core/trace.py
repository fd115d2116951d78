"""A trace owns one compiled region's joint graph; a partition is one split of it into forward and backward.

`Trace.partition(p)` is the only way a joint graph gets split, for the first capture and every rerun,
comparison or sweep after it: no tracing again, and the working copy never leaks between partitions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

import torch
import torch.fx

from . import analysis
from .codegen import copy_graph_module, graphnet_code, without_none_outputs
from .errors import one_line
from .memory import MemoryProfile, profile
from .partitioners import Partitioner, resolve_partitioner


class InputSource(NamedTuple):
    """What a forward primal is: kind, human name, and the key autograd's grads use."""

    kind: str
    """`parameter`, `buffer` or `input`."""
    name: str
    """`bn.weight`, or the argument name."""
    key: str
    """The argument name (inputs) or qualified parameter name, as in `autograd_gradients`."""


def _fingerprint(gm: torch.fx.GraphModule) -> tuple:
    return tuple((n.name, n.op, n.target, len(n.users)) for n in gm.graph.nodes)


@dataclass(eq=False)
class Trace:
    """One compiled region as AOT Autograd saw it: the joint graph and what splitting it again needs."""

    index: int
    joint: torch.fx.GraphModule
    """The joint forward-backward graph, never modified."""
    joint_inputs: list
    partition_kwargs: dict
    """`num_fwd_outputs` and whatever else torch passed the partitioner."""
    inputs: list[InputSource]
    """One per forward primal."""
    forward_inputs: list | None = None
    """Real values of the forward primals (real mode): parameters by reference, the rest copied."""
    forward_versions: list[int | None] | None = None
    """Version counters of the forward inputs when captured: a later in-place change shows."""
    tangent_values: dict[str, Any] | None = None
    """Real tangents autograd used, by placeholder name (real mode)."""
    rng_state: torch.Tensor | None = None
    """The CPU generator's state before the real forward: a replay draws the same dropout masks."""
    notes: list[str] = field(default_factory=list)
    _work: torch.fx.GraphModule | None = field(default=None, repr=False)

    def partition(self, partitioner: Partitioner | str | float = "default") -> Partition:
        """Split the joint graph with `partitioner`; in real mode, replay the real backward inputs."""
        resolved = resolve_partitioner(partitioner)
        forward, backward = self.split(resolved)
        result = Partition(self, resolved, forward, backward)
        result.note_random_recompute()
        if self.forward_inputs is not None and self.tangent_values is not None:
            if self.inputs_changed():
                result.notes.append(
                    "a weight or input changed in place since the extraction: real backward values not replayed."
                )
            else:
                try:
                    result.backward_inputs = result.replay_backward_inputs()
                except Exception as error:  # the graphs stand; only the real values are missing
                    result.notes.append(f"could not replay real backward inputs: {one_line(error)}")
        return result

    def inputs_changed(self) -> bool:
        """Whether a forward input kept by reference was changed in place after the capture."""
        return any(
            version is not None and value._version != version
            for value, version in zip(self.forward_inputs or [], self.forward_versions or [])
        )

    def split(self, resolved: Partitioner) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule]:
        """Run the partitioner on this trace's own working copy, then put back what it changed.

        Partitioners (min-cut) rewrite node metadata and add attributes such as `dist_from_bw`,
        but not the graph: restoring the metadata is far cheaper than copying the graph for every
        partition. If the structure changed, the working copy is dropped and the next split copies
        the untouched joint again.
        """
        work = self._work if self._work is not None else copy_graph_module(self.joint)
        self._work = None
        nodes = list(work.graph.nodes)
        metas = [dict(n.meta) for n in nodes]
        attributes = [set(vars(n)) for n in nodes]
        fingerprint = _fingerprint(work)
        try:
            with resolved.config():
                return resolved.partition_fn(work, self.joint_inputs, **self.partition_kwargs)
        finally:
            if _fingerprint(work) == fingerprint:
                for node, meta, names in zip(nodes, metas, attributes):
                    node.meta = meta
                    for added in set(vars(node)) - names:
                        delattr(node, added)
                self._work = work


@dataclass(eq=False)
class Partition:
    """One trace split into a forward and a backward graph by one partitioner."""

    trace: Trace
    partitioner: Partitioner
    forward: torch.fx.GraphModule
    backward_with_nones: torch.fx.GraphModule
    """The backward graph as torch returns it: `None` for inputs that need no gradient."""
    backward_inputs: list | None = None
    """Real values of the backward placeholders (real mode)."""
    notes: list[str] = field(default_factory=list)

    @property
    def index(self) -> int:
        return self.trace.index

    @property
    def inputs(self) -> list[InputSource]:
        return self.trace.inputs

    @property
    def joint(self) -> torch.fx.GraphModule:
        return self.trace.joint

    @property
    def forward_inputs(self) -> list | None:
        return self.trace.forward_inputs

    @cached_property
    def backward(self) -> torch.fx.GraphModule:
        """The backward graph with `None` gradients dropped from its returned tuple."""
        return without_none_outputs(self.backward_with_nones)

    @cached_property
    def backward_code(self) -> str:
        return graphnet_code(self.backward)

    @cached_property
    def forward_code(self) -> str:
        return graphnet_code(self.forward)

    @cached_property
    def saved_tensors(self) -> list[analysis.SavedTensor]:
        return analysis.saved_tensors(self)

    @cached_property
    def tangents(self) -> list[analysis.TensorInfo]:
        return analysis.tangents(self.backward_with_nones)

    @cached_property
    def gradients(self) -> list[analysis.GradientOutput]:
        return analysis.gradients(self.backward_with_nones, self.inputs)

    @cached_property
    def recomputed(self) -> list[tuple[str, str]]:
        """Forward ops the partitioner chose to recompute in backward: (node name, op)."""
        return analysis.recomputed(self.backward_with_nones)

    @cached_property
    def recomputed_random_ops(self) -> list[str]:
        """Random ops (dropout...) recomputed in backward: their numbers are drawn again there."""
        return analysis.random_ops(self.backward_with_nones, {name for name, _ in self.recomputed})

    @cached_property
    def node_flops(self) -> dict[str, int]:
        """FLOPs of each backward node, by torch's FLOP counter on fake tensors (the same nodes as `backward`)."""
        from .flops import node_flops

        return node_flops(self.backward_with_nones)

    @cached_property
    def memory(self) -> MemoryProfile:
        """Activation memory after each forward and backward op (a liveness walk of both graphs)."""
        return profile(self)

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

    def note_random_recompute(self) -> None:
        """Say so when the partitioner recomputes a random op: the extraction must not look exact."""
        random = self.recomputed_random_ops
        if random:
            self.notes.append(
                f"{self.partitioner.name} recomputes random op(s) {', '.join(random)} in backward: the backward "
                "draws new random numbers, so its gradients differ from eager autograd's."
            )

    def replay_backward_inputs(self) -> list:
        """Run this forward graph on the real forward inputs: its saved outputs, plus the tangents
        autograd used, are the real inputs of this backward graph."""
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            if self.trace.rng_state is not None:
                torch.set_rng_state(self.trace.rng_state)
            outputs = self.forward(*self.trace.forward_inputs)
        output_nodes = self.forward.graph.output_node().args[0]
        by_name = {node.name: value for node, value in zip(output_nodes, outputs) if isinstance(node, torch.fx.Node)}
        by_name.update(self.trace.tangent_values or {})
        return [by_name[node.name] for node in self.backward_with_nones.graph.find_nodes(op="placeholder")]
