"""Device memory of one eager training step under saved-tensor hooks, counted storage by storage.

An offload plan is a `saved_tensors_hooks` pair: it runs around the compiled graphs, not in them (it wraps
what the compiled forward saves; torch inlines only hooks it can trace), so no extraction's graphs can check it, and on a machine without an accelerator `t.to("cpu")` moves nothing. So the step runs as the user
runs it, eagerly, `with hooks: loss = model(x)...`, then `loss.backward()`, over fake tensors (nothing is
computed, no memory is taken) on a stand-in device, `meta`: every parameter, buffer and input lives there,
so a hook that moves a saved tensor to the CPU really moves it off the device. A dispatch mode (this
thread's only: no global hook) sees every op's outputs; each new storage counts from the op that made it
until torch frees it (a finalizer on the storage, as `core/measure.py` counts a partition's run). The
activation-only bytes are those on the stand-in device less the parameters' gradients from the op that made
each (a hook on each parameter names them): the quantity `BackwardExtraction.peak_activation_only_bytes`
predicts for the compiled step.
"""

from __future__ import annotations

import contextlib
import itertools
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import torch

from .compat import TorchDispatchMode, pytree
from .fake import faked
from .measure import bytes_alive
from .model_state import left_as_it_was
from .outputs import OutputChoice, differentiable_outputs, pick_output
from .trace import TORCH_WORK

if TYPE_CHECKING:
    from collections.abc import Callable

STAND_IN = "meta"
"""The device the fakes live on: not the CPU, and one autograd can run on without its hardware."""


@dataclass(frozen=True)
class EagerStepMemory:
    """What one eager step left on the stand-in device and moved off it."""

    activation_peak_bytes: int
    """The highest activation-only bytes on the device after any op of forward or backward."""
    after_forward_bytes: int
    """Activation bytes on the device when forward ends, the loss left out: what backward's saved values hold."""
    cpu_bytes: int
    """Bytes on the CPU made during forward and alive when it ends: what the hooks moved off the device (a
    storage saved twice is copied twice), and any CPU tensor the model makes itself."""


class StepStorages(TorchDispatchMode):
    """Storages the step's ops make, each counted once from the op that made it until torch frees it, by the
    device of the tensor that holds it (a fake's storage reads `meta` whatever its device)."""

    def __init__(self, held: list[torch.Tensor]) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # unannotated in torch; untyped_calls_exclude skips super()
        self.held = {id(t.untyped_storage()) for t in held}
        self.live: dict[int, tuple[int, bool, int]] = {}
        """id(storage) -> (serial, on the stand-in device, bytes)."""
        self.serials = itertools.count()
        self.spans: dict[int, list[int]] = {}
        """serial -> [bytes, first reading, last reading] of the device's storages."""
        self.gradients: set[int] = set()
        self.device = self.cpu = 0
        self.readings: list[int] = []
        self.finalizers: list[weakref.finalize] = []

    def __torch_dispatch__(self, func: Callable, types: object, args: tuple = (), kwargs: dict | None = None) -> Any:
        given = {id(t.untyped_storage()) for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        result = func(*args, **(kwargs or {}))
        for leaf in pytree.tree_leaves(result):
            if isinstance(leaf, torch.Tensor):
                self._hold(leaf, given)
        self.readings.append(self.device)
        return result

    def _hold(self, tensor: torch.Tensor, given: set[int]) -> None:
        """Count a new storage; a known one's new size (`out=`, `resize_`); never an alias of an argument this
        step did not make (a view of a tensor that was there before: no new memory)."""
        storage = tensor.untyped_storage()
        key = id(storage)
        if key in self.live:
            self._resized(key, int(storage.nbytes()))
            return
        if key in self.held or key in given:
            return
        serial, on_device, nbytes = next(self.serials), tensor.device.type == STAND_IN, int(storage.nbytes())
        self.live[key] = (serial, on_device, nbytes)
        if on_device:
            self.device += nbytes
            self.spans[serial] = [nbytes, len(self.readings), -1]
        else:
            self.cpu += nbytes
        finalizer = weakref.finalize(storage, self._free, key)
        finalizer.atexit = False
        self.finalizers.append(finalizer)

    def _resized(self, key: int, nbytes: int) -> None:
        serial, on_device, before = self.live[key]
        if nbytes == before:
            return
        self.live[key] = (serial, on_device, nbytes)
        if on_device:
            self.device += nbytes - before
            self.spans[serial][0] = max(self.spans[serial][0], nbytes)
        else:
            self.cpu += nbytes - before

    def _free(self, key: int) -> None:
        serial, on_device, nbytes = self.live.pop(key)
        if on_device:
            self.device -= nbytes
            self.spans[serial][2] = len(self.readings) - 1
        else:
            self.cpu -= nbytes

    def gradient(self, grad: torch.Tensor) -> None:
        """A parameter's gradient (a tensor hook): out of the activation-only bytes from the op that made it."""
        found = self.live.get(id(grad.untyped_storage()))
        if found is not None and found[1]:
            self.gradients.add(found[0])

    def bytes_of(self, tensor: torch.Tensor) -> int:
        found = self.live.get(id(tensor.untyped_storage()))
        return found[2] if found is not None and found[1] else 0

    def activation_peak(self) -> int:
        """The highest reading less the parameters' gradients alive at it (one alive at the end: to the last)."""
        end = len(self.readings) - 1
        spans = []
        for serial in self.gradients:
            nbytes, first, last = self.spans[serial]
            spans.append((first, end if last < 0 else last, nbytes))
        alive = bytes_alive(spans, len(self.readings))
        return max([0, *(reading - gradients for reading, gradients in zip(self.readings, alive))])

    def close(self) -> None:
        for finalizer in self.finalizers:
            finalizer.detach()


CPU_CAVEAT = (
    "; on this device the hooks move nothing (CPU to CPU): the model's tensors are on the CPU, where a saved tensor "
    "moved to the CPU stays in the same memory, so the plan does not fit here; its figures are for the same step "
    "on a GPU"
)
"""What an offload plan's note says where `device_of` the step is "cpu"."""


def device_of(model: Any, values: list | tuple = ()) -> str | None:
    """The device type the step's tensors live on: the model's parameters and buffers, else its tensor inputs;
    None when there is none, or they are on several. Where it is "cpu", a hook moving saved tensors to the CPU
    moves nothing: the stand-in device's figures are those of the same step on an accelerator."""
    tensors = [*model.parameters(), *model.buffers()] if isinstance(model, torch.nn.Module) else []
    tensors = tensors or [v for v in values if isinstance(v, torch.Tensor)]
    types = {t.device.type for t in tensors}
    return types.pop() if len(types) == 1 else None


def _loss(outputs: Any, output: OutputChoice) -> torch.Tensor:
    """The part of the output the extraction's backward starts from (`pick_output`), summed over its
    differentiable tensors, as `loss = model(x).sum()`: a scalar, whose backward expands a ones-gradient as a
    view, so no tangent takes memory."""
    wanted = differentiable_outputs(pick_output(outputs, output))
    return wanted[0].sum() if len(wanted) == 1 else torch.stack([t.sum() for t in wanted]).sum()


def _require_grad(model: Any, inputs: dict[str, Any], decided: dict[str, bool]) -> list[torch.Tensor]:
    """Set the fakes' requires_grad as decided (inputs by argument name, parameters by qualified name); return
    the parameters that then need a gradient."""
    named = dict(model.named_parameters(remove_duplicate=False)) if isinstance(model, torch.nn.Module) else {}
    for name, value in [*inputs.items(), *named.items()]:
        if name in decided and isinstance(value, torch.Tensor) and value.is_floating_point():
            value.requires_grad_(decided[name])
    return list({id(p): p for p in named.values() if p.requires_grad}.values())


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
    its backward, on new fakes of the model's tensors and the inputs on the stand-in device; the model's own
    tensors are untouched (its parameters are swapped for the call only). `requires_grad` (by the `arg_names`
    of args then kwargs, and by qualified parameter name) says which get a gradient, as an extraction decided."""

    def plain(_: StepStorages) -> contextlib.AbstractContextManager:
        return hooks or contextlib.nullcontext()

    step = counted_step(model, args, kwargs, plain, output, requires_grad, arg_names, storages=StepStorages)
    return EagerStepMemory(step.storages.activation_peak(), step.after_forward, step.cpu)


S = TypeVar("S", bound=StepStorages)


@dataclass(frozen=True)
class CountedStep(Generic[S]):
    """An eager step as `counted_step` ran it: its storages, counted, and what the forward left."""

    storages: S
    forward_readings: int
    """How many of the storages' readings the forward took (the rest are backward's)."""
    after_forward: int
    """Bytes on the device after the forward, less the loss."""
    cpu: int
    """Bytes on the CPU after the forward (what hooks moved there)."""


def counted_step(
    model: Any,
    args: tuple,
    kwargs: dict[str, Any] | None,
    hooks: Callable[[S], contextlib.AbstractContextManager],
    output: OutputChoice,
    requires_grad: dict[str, bool] | None,
    arg_names: list[str] | None,
    storages: Callable[[list[torch.Tensor]], S],
) -> CountedStep[S]:
    """`eager_step_memory`'s step, the one way it runs: the counting mode made by `storages` (a subclass may
    label what it counts) and the forward under `hooks(counted)`."""
    names = list(kwargs or {})
    values = [*args, *(kwargs or {}).values()]
    with (
        TORCH_WORK,
        left_as_it_was(model),  # a forward that sets an attribute lazily (a rotary cache) keeps no fake there
        faked(model, values, device=STAND_IN) as fake_values,
    ):  # the collector paused: frees are torch's
        parameters = _require_grad(model, dict(zip(arg_names or [], fake_values)), requires_grad or {})
        fake_args, fake_kwargs = fake_values[: len(args)], dict(zip(names, fake_values[len(args) :]))
        held = [t for t in fake_values if isinstance(t, torch.Tensor)]
        if isinstance(model, torch.nn.Module):
            held += [*model.parameters(), *model.buffers()]
        counted = storages(held)
        handles = [p.register_hook(counted.gradient) for p in parameters]  # the gradient as it comes
        handles += [  # and as `.grad` holds it: AccumulateGrad copies one whose layout differs
            p.register_post_accumulate_grad_hook(lambda p: counted.gradient(p.grad)) for p in parameters
        ]
        try:
            with counted:
                with hooks(counted):
                    loss = _loss(model(*fake_args, **fake_kwargs), output)
                after, cpu = counted.device - counted.bytes_of(loss), counted.cpu
                forward_readings = len(counted.readings)
                loss.backward()
        finally:
            for handle in handles:
                handle.remove()
            counted.close()
    if not counted.readings or not any(counted.readings):
        raise ValueError("nothing the step made was on the stand-in device, so its memory could not be counted")
    return CountedStep(counted, forward_readings, after, cpu)
