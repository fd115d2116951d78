"""Device memory of one eager training step under saved-tensor hooks, counted by torch's own tracker.

An offload plan is a `saved_tensors_hooks` pair: AOT Autograd's graphs never see it, so no extraction can
check it, and on a machine without an accelerator `t.to("cpu")` moves nothing. So the step runs as the user
runs it, eagerly, `with hooks: loss = model(x)...`, then `loss.backward()`, over fake tensors (nothing is
computed, no memory is taken) on a stand-in device, `meta`: every parameter, buffer and input lives there,
so a hook that moves a saved tensor to the CPU really moves it off the device. torch's `MemTracker` counts
live storages by device and kind after every op; the activation-only bytes are its activations and
temporaries on the stand-in device (parameters, buffers, the inputs and the parameters' gradients left
out), the same quantity as `BackwardExtraction.peak_activation_only_bytes`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch

from .compat import MemTracker, TorchDispatchMode
from .fake import faked
from .outputs import OutputChoice, differentiable_outputs, pick_output

STAND_IN = "meta"
"""The device the fakes live on: not the CPU, and one autograd can run on without its hardware."""
ACTIVATION_KINDS = ("Activation", "Temp")
"""MemTracker's kinds that make up the activation-only bytes: what forward and backward allocate, less the
parameters' gradients (its "Gradient")."""


@dataclass(frozen=True)
class EagerStepMemory:
    """What one eager step left on the stand-in device and moved off it."""

    activation_peak_bytes: int
    """The highest activation-only bytes on the device after any op of forward or backward."""
    after_forward_bytes: int
    """Activation-only bytes on the device when forward ends: what backward's saved values hold there."""
    moved_bytes: int
    """Activation bytes on the CPU when forward ends: what the hooks moved off the device."""


class _AfterEachOp(TorchDispatchMode):
    """Reads MemTracker's current snapshot after every op (pushed above it, so the op is already counted)."""

    def __init__(self, tracker: Any) -> None:
        super().__init__()
        self.tracker, self.peak = tracker, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        self.peak = max(self.peak, _bytes(self.tracker, on_device=True))
        return result


def _bytes(tracker: Any, on_device: bool) -> int:
    """Activation-only bytes MemTracker holds now, on the stand-in device or on the CPU."""
    snapshot = tracker.get_tracker_snapshot("current")
    return sum(
        int(count)
        for device, kinds in snapshot.items()
        if (torch.device(device).type == STAND_IN) == on_device
        for kind, count in kinds.items()
        if str(getattr(kind, "value", kind)) in ACTIVATION_KINDS
    )


def _loss(outputs: Any, output: OutputChoice) -> torch.Tensor:
    """The part of the output the extraction's backward starts from (`pick_output`), summed over its
    differentiable tensors, as `loss = model(x).sum()`: a scalar, whose backward expands a ones-gradient as a
    view, so no tangent takes memory."""
    wanted = differentiable_outputs(pick_output(outputs, output))
    return wanted[0].sum() if len(wanted) == 1 else torch.stack([t.sum() for t in wanted]).sum()


def _require_grad(model: Any, inputs: dict[str, Any], decided: dict[str, bool]) -> None:
    """Set the fakes' requires_grad as decided: inputs by argument name, parameters by qualified name."""
    named = dict(model.named_parameters(remove_duplicate=False)) if isinstance(model, torch.nn.Module) else {}
    for name, value in [*inputs.items(), *named.items()]:
        if name in decided and isinstance(value, torch.Tensor) and value.is_floating_point():
            value.requires_grad_(decided[name])


def eager_step_memory(
    model: Any,
    args: tuple,
    kwargs: dict[str, Any] | None = None,
    hooks: contextlib.AbstractContextManager | None = None,
    output: OutputChoice = None,
    requires_grad: dict[str, bool] | None = None,
    arg_names: list[str] | None = None,
) -> EagerStepMemory:
    """One eager forward under `hooks` (e.g. `torch.autograd.graph.saved_tensors_hooks(pack, unpack)`) and
    its backward, on fakes of the model and inputs on the stand-in device; the model's own tensors are
    untouched (its parameters are swapped for the call only). `requires_grad` (by the `arg_names` of args
    then kwargs, and by qualified parameter name) says which get a gradient, as an extraction decided."""
    names = list(kwargs or {})
    values = [*args, *(kwargs or {}).values()]
    with faked(model, values, device=STAND_IN) as fake_values:
        _require_grad(model, dict(zip(arg_names or [], fake_values)), requires_grad or {})
        fake_args, fake_kwargs = fake_values[: len(args)], dict(zip(names, fake_values[len(args) :]))
        tracker = MemTracker()
        # Its per-module peak snapshots walk every module seen after every op (two thirds of a 6.7 B model's
        # step); the whole-run peak is read here after each op instead, so that walk is skipped.
        tracker._update_peak_stats = lambda peak_state: None  # type: ignore[method-assign]
        tracker.track_external(*[t for t in fake_values if isinstance(t, torch.Tensor)])
        if isinstance(model, torch.nn.Module):
            tracker.track_external(model)
        watch = _AfterEachOp(tracker)
        with tracker, watch:
            with hooks if hooks is not None else contextlib.nullcontext():
                loss = _loss(model(*fake_args, **fake_kwargs), output)
            after, moved = _bytes(tracker, on_device=True), _bytes(tracker, on_device=False)
            loss.backward()
    return EagerStepMemory(watch.peak, after, moved)
