"""What `torch.compile` itself saves for backward, counted independently of bwd_widgets: the one count the
partition tests (tests/test_torch_partition.py) and the Pareto race (bench/sweep_vs_torch_pareto.py) hold
bwd_widgets' saved bytes against."""

from __future__ import annotations

import torch

from bwd_widgets.core.compat import dynamo, functorch_config


def torch_compile_saved_bytes(model: object, args: tuple, kwargs: dict, budget: float, **patch: object) -> int:
    """What one call of `torch.compile(model, backend="aot_eager")` at `budget` (and the functorch settings
    `patch`) keeps for backward, by its pack hook: distinct storages of saved tensors that are no parameter,
    buffer or input."""
    dynamo.reset()
    held = [*getattr(model, "parameters", list)(), *getattr(model, "buffers", list)()]
    held += [v for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor)]
    held_storages = {t.untyped_storage().data_ptr() for t in held if t.numel()}
    counted: set[int] = set()
    sizes: list[int] = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if tensor.numel() and storage.data_ptr() not in held_storages and storage.data_ptr() not in counted:
            counted.add(storage.data_ptr())
            sizes.append(storage.nbytes())
        return tensor

    compiled = torch.compile(model, backend="aot_eager")
    with (
        functorch_config.patch(activation_memory_budget=budget, **patch),
        torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor),
    ):
        compiled(*args, **kwargs)
    dynamo.reset()
    return sum(sizes)
