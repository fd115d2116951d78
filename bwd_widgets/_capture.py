"""Capture forward, backward and joint fx graphs through torch.compile + AOT Autograd.

No analysis happens here: this module only records what torch hands its compilers.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
import torch.fx
from torch._dynamo.backends.common import aot_autograd

from ._partitioners import Partitioner


class InputSource(NamedTuple):
    """What a forward primal is: kind, human name, and the key autograd's grads use."""

    kind: str  # parameter, buffer or input
    name: str  # `bn.weight`, or the argument name
    key: str  # the argument name (inputs) or qualified parameter name


@dataclass
class CapturedGraph:
    """One Dynamo graph's trip through AOT Autograd."""

    dynamo_graph: torch.fx.GraphModule
    input_sources: list  # one InputSource per forward primal
    joint: torch.fx.GraphModule | None = None
    forward: torch.fx.GraphModule | None = None
    backward: torch.fx.GraphModule | None = None
    num_fwd_outputs: int | None = None
    joint_inputs: list | None = None  # what partition_fn received: a repartition needs them again
    partition_kwargs: dict = field(default_factory=dict)
    forward_inputs: list | None = None
    backward_inputs: list | None = None


@dataclass
class CaptureSession:
    partitioner: Partitioner
    keep_real_inputs: bool
    input_names: dict = field(default_factory=dict)  # local arg name -> (kind, human name)
    signature: list = field(default_factory=list)
    graphs: list = field(default_factory=list)

    def backend(self):
        """A Dynamo backend that records each graph and partitions with our partitioner."""

        def partition_fn(joint, joint_inputs, *, num_fwd_outputs, **kwargs):
            current = self.graphs[-1]
            current.joint = copy_graph_module(joint)
            current.num_fwd_outputs = num_fwd_outputs
            current.joint_inputs = joint_inputs
            current.partition_kwargs = dict(kwargs, num_fwd_outputs=num_fwd_outputs)
            with self.partitioner.config():
                return self.partitioner.partition_fn(
                    joint, joint_inputs, num_fwd_outputs=num_fwd_outputs, **kwargs
                )

        def fw_compiler(gm, example_inputs):
            current = self.graphs[-1]
            current.forward = gm
            return _boxed(gm, current, "forward_inputs" if self.keep_real_inputs else None)

        def bw_compiler(gm, example_inputs):
            current = self.graphs[-1]
            current.backward = gm
            return _boxed(gm, current, "backward_inputs" if self.keep_real_inputs else None)

        aot_backend = aot_autograd(
            fw_compiler=fw_compiler, bw_compiler=bw_compiler, partition_fn=partition_fn
        )

        def backend(gm, example_inputs):
            order = _signature_order(gm, self.signature)
            if order is not None:
                # Dynamo calls the compiled graph in its placeholders' final order.
                _reorder_placeholders(gm, order)
                example_inputs = [example_inputs[i] for i in order]
            self.graphs.append(CapturedGraph(gm, self._sources(gm)))
            return aot_backend(gm, example_inputs)

        return backend

    def _sources(self, gm):
        from ._naming import parse_source_name

        sources = []
        for node in gm.graph.find_nodes(op="placeholder"):
            grapharg = node.meta.get("grapharg")
            source = getattr(grapharg, "source", None)
            if source is None:
                sources.append(InputSource("input", node.name, node.name))
                continue
            kind, name = parse_source_name(source.name)
            local = getattr(source, "local_name", None)
            key = name if local is None else local
            if local is not None and local in self.input_names:
                kind, name = self.input_names[local]
            sources.append(InputSource(kind, name, key))
        return sources


def _boxed(gm, captured, attribute):
    """Wrap a compiled graph in torch's boxed calling convention, keeping real inputs if asked."""

    def run(args):
        if attribute is not None:
            setattr(captured, attribute, [_detached_copy(a) for a in args])
        return gm(*args)

    run._boxed_call = True
    return run


def _detached_copy(value):
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    return value


def copy_graph_module(gm):
    """Min-cut mutates the joint graph it is given: keep an untouched copy (metadata shared)."""
    graph = torch.fx.Graph()
    output = graph.graph_copy(gm.graph, {})
    graph.output(output)
    return torch.fx.GraphModule(gm, graph)


def _signature_order(gm, signature):
    """Dynamo orders graph inputs by first use; GraphNet (and users) expect argument order.

    Only when every graph input is a plain argument of forward is the order restored.
    """
    if not signature:
        return None
    positions = []
    for node in gm.graph.find_nodes(op="placeholder"):
        source = getattr(node.meta.get("grapharg"), "source", None)
        local = getattr(source, "local_name", None)
        if local is None or local not in signature or type(source).__name__ != "LocalSource":
            return None
        positions.append(signature.index(local))
    order = sorted(range(len(positions)), key=positions.__getitem__)
    return None if order == list(range(len(order))) else order


def _reorder_placeholders(gm, order):
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    anchor = next(n for n in gm.graph.nodes if n.op != "placeholder")
    for i in order:
        anchor.prepend(placeholders[i])
    gm.recompile()


def signature_names(fn) -> list:
    """Names of the positional parameters of fn (or of a module's forward)."""
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    try:
        parameters = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return []
    return [
        p.name
        for p in parameters
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    ]
