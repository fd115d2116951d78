"""Capture forward, backward and joint fx graphs through torch.compile + AOT Autograd.

No analysis happens here: this module only records what torch hands its compilers.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.fx
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd

from .naming import parse_source_name
from .partitioners import Partitioner
from .trace import InputSource, Partition, Trace


@dataclass
class CaptureSession:
    """A Dynamo backend that records each compiled region as a Trace and its first Partition."""

    partitioner: Partitioner
    keep_real_inputs: bool
    input_names: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Local argument name -> (kind, human name), for GraphNet samples."""
    signature: list[str] = field(default_factory=list)
    partitions: list[Partition] = field(default_factory=list)
    _inputs: list[InputSource] = field(default_factory=list)
    _current: Partition | None = None

    def backend(self) -> Callable:
        def partition_fn(joint, joint_inputs, *, num_fwd_outputs, **kwargs):
            trace = Trace(
                index=len(self.partitions),
                joint=joint,
                joint_inputs=joint_inputs,
                partition_kwargs=dict(kwargs, num_fwd_outputs=num_fwd_outputs),
                inputs=self._inputs,
            )
            forward, backward = trace.split(self.partitioner)
            self._current = Partition(trace, self.partitioner, forward, backward)
            self.partitions.append(self._current)
            return forward, backward

        def fw_compiler(gm, example_inputs):
            current = self._current
            if current is None:  # an inference graph: nothing needs a gradient here
                return make_boxed_func(gm.forward)
            current.forward = gm
            return _recording(gm, self._keep_forward_inputs(current.trace))

        def bw_compiler(gm, example_inputs):
            current = self._current
            current.backward_with_nones = gm
            return _recording(gm, self._keep_backward_inputs(current))

        aot_backend = aot_autograd(fw_compiler=fw_compiler, bw_compiler=bw_compiler, partition_fn=partition_fn)

        def backend(gm, example_inputs):
            order = _signature_order(gm, self.signature)
            if order is not None:
                # Dynamo calls the compiled graph in its placeholders' final order.
                _reorder_placeholders(gm, order)
                example_inputs = [example_inputs[i] for i in order]
            self._inputs = self._sources(gm)
            self._current = None
            return aot_backend(gm, example_inputs)

        return backend

    def _keep_forward_inputs(self, trace: Trace) -> Callable[[list], None] | None:
        if not self.keep_real_inputs:
            return None

        def keep(args: list) -> None:
            trace.forward_inputs = [_detached_copy(a) for a in args]

        return keep

    def _keep_backward_inputs(self, partition: Partition) -> Callable[[list], None] | None:
        if not self.keep_real_inputs:
            return None

        def keep(args: list) -> None:
            values = [_detached_copy(a) for a in args]
            partition.backward_inputs = values
            names = [n.name for n in partition.backward_with_nones.graph.find_nodes(op="placeholder")]
            partition.trace.tangent_values = {
                name: value for name, value in zip(names, values) if name.startswith("tangents_")
            }

        return keep

    def _sources(self, gm: torch.fx.GraphModule) -> list[InputSource]:
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


def _recording(gm: torch.fx.GraphModule, keep: Callable[[list], None] | None) -> Callable:
    """Wrap a compiled graph in torch's boxed calling convention, keeping its real inputs if asked."""

    def run(args):
        if keep is not None:
            keep(args)
        return gm(*args)

    run._boxed_call = True
    return run


def _detached_copy(value):
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    return value


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


def signature_names(fn: Callable) -> list[str]:
    """Names of the positional parameters of fn (or of a module's forward)."""
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    try:
        parameters = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
