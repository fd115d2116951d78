"""What `torch.compile` itself saves for backward, counted independently of bwd_widgets: the one count the partition
tests (tests/test_torch_partition.py, tests/test_inductor_backend.py), the course's claims
(tests/test_course_claims.py) and the Pareto race (bench/sweep_vs_torch_pareto.py) hold bwd_widgets' saved set
against.

A `saved_tensors_hooks` pack hook around the call of the compiled model sees every tensor the compiled forward hands
autograd to keep, whichever backend compiled it (aot_eager, Inductor's generated code); each storage counts once,
and the model's parameters and buffers and the call's tensors (and views of them) are left out, since the model and
the caller hold those anyway. With backend=None the model runs eagerly: what eager autograd saves, by the same
count.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch._dynamo import lookup_backend

from bwd_widgets.core.compat import dynamo, functorch_config, pytree

if TYPE_CHECKING:
    from collections.abc import Callable


@dataclass
class CompiledSaves:
    """What one compiled call saved beyond what the model and the caller hold."""

    storage_bytes: list[int] = field(default_factory=list)
    """The bytes of each storage saved, each once, in the order they were packed."""

    @property
    def tensors(self) -> int:
        return len(self.storage_bytes)

    @property
    def bytes(self) -> int:
        return sum(self.storage_bytes)


def counted_saves(
    model: object,
    args: tuple,
    kwargs: dict | None = None,
    *,
    backend: str | None = "aot_eager",
    budget: float = 1.0,
    backward: bool = False,
    events: list[str] | None = None,
    outside_regions: CompiledSaves | None = None,
    **patch: object,
) -> CompiledSaves:
    """What one call of `torch.compile(model, backend=backend)` (None: the model, eagerly) at memory `budget` (and the functorch settings
    `patch`) keeps for backward, by its pack hook. backward=True (or `events`) then runs backward from the sum of
    every output that needs a gradient; `events` records "pack", "unpack" and each parameter's gradient ("grad") in
    order. The model's gradients are cleared after; the call's tensors keep theirs (a caller reads `x.grad`).
    `outside_regions` gets what eager autograd saved outside every compiled region (the backend's compiled callables
    mark their calls), each storage once and none a region saved too."""
    kwargs = kwargs or {}
    parameters = list(getattr(model, "parameters", list)())
    held = [*parameters, *getattr(model, "buffers", list)()]
    held += [v for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor)]
    held_storages = {t.untyped_storage().data_ptr() for t in held if t.numel()}
    saves = CompiledSaves()
    counted: set[int] = set()
    in_region = [0]
    by_regions: set[int] = set()
    by_eager: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        if events is not None:
            events.append("pack")
        storage = tensor.untyped_storage()
        if tensor.numel() and storage.data_ptr() not in held_storages:
            if in_region[0]:
                by_regions.add(storage.data_ptr())
            else:
                by_eager.setdefault(storage.data_ptr(), storage.nbytes())
        if tensor.numel() and storage.data_ptr() not in held_storages and storage.data_ptr() not in counted:
            counted.add(storage.data_ptr())
            saves.storage_bytes.append(storage.nbytes())
        return tensor

    def marking(name: str) -> Callable:
        """`name`'s backend, each compiled callable it gives marking its calls (`in_region`)."""
        inner = lookup_backend(name)

        def backend(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
            compiled_region = inner(gm, example_inputs)

            @functools.wraps(compiled_region)
            def region(*region_args: object, **region_kwargs: object) -> object:
                in_region[0] += 1
                try:
                    return compiled_region(*region_args, **region_kwargs)
                finally:
                    in_region[0] -= 1

            return region

        return backend

    def unpack(tensor: torch.Tensor) -> torch.Tensor:
        if events is not None:
            events.append("unpack")
        return tensor

    handles = [p.register_hook(lambda g: events.append("grad")) for p in parameters] if events is not None else []
    dynamo.reset()
    try:
        marked = backend if backend is None or outside_regions is None else marking(backend)
        compiled = model if marked is None else torch.compile(model, backend=marked)
        with functorch_config.patch(activation_memory_budget=budget, **patch):
            with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
                output = compiled(*args, **kwargs)
            if backward or events is not None:
                leaves = [t for t in pytree.tree_leaves(output) if isinstance(t, torch.Tensor) and t.requires_grad]
                torch.autograd.backward([t.sum() for t in leaves])
    finally:
        for handle in handles:
            handle.remove()
        for parameter in parameters:
            parameter.grad = None
        dynamo.reset()
    if outside_regions is not None:
        outside_regions.storage_bytes.extend(size for key, size in by_eager.items() if key not in by_regions)
    return saves


def torch_compile_saved_bytes(
    model: object, args: tuple, kwargs: dict, budget: float, backend: str = "aot_eager", **patch: object
) -> int:
    """The bytes of `counted_saves`, for the partition tests and the Pareto race."""
    return counted_saves(model, args, kwargs, backend=backend, budget=budget, **patch).bytes
