"""Fake mode: parameters, buffers and inputs swapped for fake tensors, so that nothing is computed and
no memory is taken, for models of any size (meta-device weights included)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from .compat import FakeTensorMode


@contextlib.contextmanager
def faked(model: Callable, inputs: list, device: str | None = None) -> Iterator[list]:
    """Swap parameters, buffers and inputs for fake tensors: no compute, no memory. With `device`, every fake
    is on that device (a stand-in for an accelerator this machine lacks: "meta" has autograd's device guard)."""
    from .compat import FakeTensor, FakeTensorMode, _reparametrize_module, detect_fake_mode

    state: dict[str, torch.Tensor] = {}
    if isinstance(model, torch.nn.Module):
        state.update(model.named_parameters(remove_duplicate=False))
        state.update(model.named_buffers(remove_duplicate=False))
    tensors = list(state.values()) + [t for t in inputs if isinstance(t, torch.Tensor)]
    # On a stand-in device every fake is new, in a mode of its own (a user's fakes stay as they are), and tensors
    # the model makes outside the mode (transformers' empty cache on `meta`) join in.
    if device is not None:
        fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    else:
        # allow_non_fake_inputs: a real tensor the forward reads that is neither parameter, buffer nor input (a
        # table a first eager call cached on the instance, the class or a module) is made fake as it is read,
        # the user's own left as it is; without it FakeTensorMode refuses the mix (issue 44, item 2)
        fake_mode = detect_fake_mode(tensors) or FakeTensorMode(allow_non_fake_inputs=True)

    made: dict[int, torch.Tensor] = {}  # one fake per tensor: tied names must get the very same one

    def fake(tensor: torch.Tensor) -> torch.Tensor:
        if isinstance(tensor, FakeTensor) and device is None:
            return tensor
        if id(tensor) not in made:
            made[id(tensor)] = _fake(tensor, fake_mode, device)
        return made[id(tensor)]

    fake_state = {n: fake(t) for n, t in state.items()}
    fake_inputs = [fake(t) if isinstance(t, torch.Tensor) else t for t in inputs]
    with contextlib.ExitStack() as stack:
        if isinstance(model, torch.nn.Module):
            stack.enter_context(_reparametrize_module(model, fake_state, tie_weights=True))
        stack.enter_context(fake_mode)
        yield fake_inputs


def _fake(tensor: torch.Tensor, fake_mode: FakeTensorMode, device: str | None = None) -> torch.Tensor:
    """A fake twin of `tensor`, on `device` if given: meta-device tensors become CPU fakes (meta has no data
    to copy), and a parameter stays a parameter, so torch.fx still tells it from a constant."""
    if tensor.device.type == "meta" or device is not None:
        with fake_mode:
            result = torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype, device=device or "cpu")
        if isinstance(tensor, torch.nn.Parameter):
            result = torch.nn.Parameter(result, requires_grad=tensor.requires_grad and result.is_floating_point())
    else:
        result = fake_mode.from_tensor(tensor)
    return result.requires_grad_(tensor.requires_grad) if result.is_floating_point() else result
