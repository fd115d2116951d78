"""Why an offload plan's verified peak is not its predicted one: both sides split into the same parts, measured.

The prediction (`predict`) is arithmetic on min-cut 1.0's partition, a rule of ours: its activation-only peak,
less the saved bytes the plan moves to the CPU, plus the largest saved value brought back at a time in
backward. It is the sum of four parts read from bw's liveness walk of that partition: the temporaries at
min-cut's peak (what is alive there besides saved values), less the saved bytes the rule takes off although
min-cut had freed them before its peak, plus the saved bytes left on the device (under the plan's size), plus
the largest brought back.

The verification (`core.eager_memory.eager_step_memory`) runs the pasted hooks around an eager forward and
backward over fake tensors. `eager_peak_parts` runs the same step once more, counting the same storages the
same way (`core.eager_memory.counted_step`), and labels each by what made it: a saved tensor the pack hook left on the device,
a copy the unpack hook brought back, or anything else (temporaries: the ops' outputs, gradients of
activations, what autograd's formulas compute in backward), by the aten op that made it. At the eager peak
those three add up to the verified peak, so the gap is attributed exactly: every part measured, by torch's
run or by bw's walk, none estimated.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from ...core import memory
from ...core.compat import pytree
from ...core.eager_memory import StepStorages, counted_step
from ...core.measure import bytes_alive

if TYPE_CHECKING:
    from collections.abc import Callable

    from ...core.outputs import OutputChoice
    from ...extraction.result import BackwardExtraction


class OffloadPrediction(NamedTuple):
    """The prediction's parts; `peak` is their sum, the plan's predicted peak."""

    temporaries: int
    """Alive at min-cut 1.0's activation-only peak besides its saved values: its peak less those."""
    freed_before_peak: int
    """Saved bytes the rule takes off that min-cut had already freed at its peak (the rule's, not torch's): the
    saved sizes less the saved storage alive at the peak (negative where more is alive than the sizes count)."""
    kept: int
    """Saved bytes under the plan's size: left on the device."""
    back: int
    """The largest saved value, brought back to the device at a time in backward."""

    @property
    def peak(self) -> int:
        return self.temporaries - self.freed_before_peak + self.kept + self.back


def saved_sizes(base: BackwardExtraction) -> list[int]:
    """Bytes of each storage min-cut 1.0 saves, largest first (each once across regions, each run of a region its
    own: `saved_storage_bytes`): the sizes an offload plan chooses among."""
    return sorted(base.saved_storage_bytes, reverse=True)


def predict(base: BackwardExtraction, chosen: int) -> OffloadPrediction:
    """The offload plan's predicted peak, moving min-cut 1.0's saved values of `chosen` bytes or more, in parts."""
    sizes = saved_sizes(base)
    top = base.activation_only_peak
    saved_at_peak = memory.live_by_kind(base.partitions)[memory.SAVED][top.step] if top.step >= 0 else 0
    return OffloadPrediction(
        top.live_bytes - saved_at_peak,
        sum(sizes) - saved_at_peak,
        sum(s for s in sizes if s < chosen),
        sizes[0] if sizes else 0,
    )


@dataclass(frozen=True)
class EagerPeak:
    """The eager step's activation-only peak under the hooks, split by what made each storage alive at it."""

    peak: int
    kept: int
    """Saved tensors the pack hook left on the device."""
    back: int
    """Copies the unpack hook brought back to the device."""
    temporaries: int
    """Everything else: forward outputs still alive, gradients of activations, backward's intermediates."""
    phase: str
    """"forward" or "backward": where the peak is."""
    makers: dict[str, tuple[tuple[str, int], ...]]
    """Each part's bytes ("kept", "back", "temporaries") by the aten op that made them (for a copy brought back:
    the op that made the saved tensor it copies), largest first."""


OUTSIDE = "buffer or input"
"""The maker named for a saved tensor the step did not make: a buffer, an input (a parameter is never moved)."""


class _Labelled(StepStorages):
    """`StepStorages`, each device storage labelled with the op that made it."""

    def __init__(self, held: list[torch.Tensor]) -> None:
        super().__init__(held)
        self.op = ""
        self.made_by: dict[int, str] = {}
        """serial -> the aten op that made it."""

    def __torch_dispatch__(self, func: Callable, types: object, args: tuple = (), kwargs: dict | None = None) -> Any:
        self.op = str(getattr(func, "__name__", func))
        return super().__torch_dispatch__(func, types, args, kwargs)

    def _hold(self, tensor: torch.Tensor, given: set[int]) -> None:
        key = id(tensor.untyped_storage())
        new = key not in self.live
        super()._hold(tensor, given)
        if new and key in self.live:
            self.made_by[self.live[key][0]] = self.op

    def serial(self, tensor: torch.Tensor) -> int | None:
        found = self.live.get(id(tensor.untyped_storage()))
        return found[0] if found is not None and found[1] else None


def _labelling_hooks(
    hooks: contextlib.AbstractContextManager, counted: _Labelled, kept: set[int], back: dict[int, str]
) -> contextlib.AbstractContextManager:
    """The plan's own `saved_tensors_hooks`, each call also noting a saved tensor left on the device (`kept`) and a
    copy brought back (`back`, with the op that made the saved tensor it copies); no hooks where the plan defined
    none."""
    pack = getattr(hooks, "pack_hook", None)
    unpack = getattr(hooks, "unpack_hook", None)
    if pack is None or unpack is None:
        return contextlib.nullcontext()
    origins: dict[int, str] = {}
    """id(packed) -> the op that made the saved tensor: the packed object is not held (that would keep a tensor the
    hooks leave on the device alive past autograd's release); a packed object being unpacked is alive, so the last
    entry under its id is its own."""

    def packing(tensor: torch.Tensor) -> Any:
        packed = pack(tensor)
        serial = counted.serial(tensor)
        storage = tensor.untyped_storage()
        leaves = [t for t in pytree.tree_leaves(packed) if isinstance(t, torch.Tensor)]
        if serial is not None and any(t.untyped_storage() is storage for t in leaves):
            kept.add(serial)
        origins[id(packed)] = counted.made_by.get(serial, "?") if serial is not None else OUTSIDE
        return packed

    def unpacking(packed: Any) -> Any:
        tensor = unpack(packed)
        serial = counted.serial(tensor) if isinstance(tensor, torch.Tensor) else None
        if serial is not None and serial not in kept:
            back[serial] = origins.get(id(packed), "?")
        return tensor

    return torch.autograd.graph.saved_tensors_hooks(packing, unpacking)


def eager_peak_parts(
    model: Any,
    args: tuple,
    kwargs: dict[str, Any] | None,
    hooks: contextlib.AbstractContextManager,
    output: OutputChoice,
    requires_grad: dict[str, bool] | None,
    arg_names: list[str] | None,
) -> EagerPeak:
    """`eager_step_memory`'s step, as it runs it, with every storage alive at the activation-only peak labelled."""
    kept: set[int] = set()
    back: dict[int, str] = {}
    step = counted_step(
        model,
        args,
        kwargs,
        lambda counted: _labelling_hooks(hooks, counted, kept, back),
        output,
        requires_grad,
        arg_names,
        storages=_Labelled,
    )
    return _split_at_peak(step.storages, kept, back, step.forward_readings)


def _split_at_peak(counted: _Labelled, kept: set[int], back: dict[int, str], forward_readings: int) -> EagerPeak:
    """The first reading where the device's bytes less the parameters' gradients are highest (`activation_peak`),
    and the storages alive there by what made them."""
    readings = counted.readings
    end = len(readings) - 1
    spans = {
        serial: (first, end if last < 0 else last, nbytes) for serial, (nbytes, first, last) in counted.spans.items()
    }
    gradients = bytes_alive([spans[s] for s in counted.gradients], len(readings))
    values = [reading - g for reading, g in zip(readings, gradients)]
    at = max(range(len(values)), key=lambda i: (values[i], -i)) if values else 0
    makers: dict[str, dict[str, int]] = {"kept": {}, "back": {}, "temporaries": {}}
    for serial, (first, last, nbytes) in spans.items():
        if not first <= at <= last or serial in counted.gradients:
            continue
        part = "kept" if serial in kept else "back" if serial in back else "temporaries"
        op = _short(back[serial] if part == "back" else counted.made_by.get(serial, "?"))
        makers[part][op] = makers[part].get(op, 0) + nbytes
    total = {part: sum(by_op.values()) for part, by_op in makers.items()}
    return EagerPeak(
        max(0, values[at]) if values else 0,
        total["kept"],
        total["back"],
        total["temporaries"],
        "forward" if at < forward_readings else "backward",
        {part: tuple(sorted(by_op.items(), key=lambda item: (-item[1], item[0]))) for part, by_op in makers.items()},
    )


def _short(op: str) -> str:
    """`native_layer_norm_backward` for aten's `native_layer_norm_backward.default`."""
    return op.removeprefix("aten.").split(".", 1)[0]


@dataclass(frozen=True)
class PeakGap:
    """Verified less predicted, in measured parts that add up to it."""

    verified: int
    predicted: int
    parts: tuple[tuple[str, int], ...]
    """(what, signed bytes): temporaries, saved values freed before min-cut's peak, kept, brought back."""
    eager: EagerPeak
    prediction: OffloadPrediction

    @property
    def bytes(self) -> int:
        return self.verified - self.predicted

    @property
    def text(self) -> str:
        """One clause, no semicolon in it: the gap, then each part that is not 0, signed, with eager's measure
        against the prediction's and the ops that made the bytes alive at the eager peak."""
        e, p = self.eager, self.prediction
        if self.bytes == 0:
            return "verified equals predicted"
        pieces = []
        if e.temporaries != p.temporaries:
            pieces.append(
                f"{_signed(e.temporaries - p.temporaries)} of temporaries ({e.temporaries:,} B at the eager peak, in "
                f"{e.phase}{_by(e.makers['temporaries'])}, against {p.temporaries:,} B at min-cut's peak)"
            )
        if p.freed_before_peak > 0:
            pieces.append(
                f"{_signed(p.freed_before_peak)} of saved values min-cut frees before its peak, which the "
                "prediction's rule (ours, not torch's) takes off all the same"
            )
        elif p.freed_before_peak < 0:
            pieces.append(
                f"{_signed(p.freed_before_peak)} of saved storage alive at min-cut's peak beyond the saved sizes the "
                "prediction's rule (ours, not torch's) takes off"
            )
        if e.kept != p.kept:
            pieces.append(
                f"{_signed(e.kept - p.kept)} of saved values the hooks leave on the device ({e.kept:,} B alive at "
                f"the eager peak{_by(e.makers['kept'])}, against min-cut's {p.kept:,} B under the plan's size)"
            )
        if e.back != p.back:
            pieces.append(
                f"{_signed(e.back - p.back)} of saved values brought back ({e.back:,} B at the eager peak, saved "
                f"by{_by(e.makers['back'], ' ')}, against the rule's one largest, {p.back:,} B)"
            )
        more = "more" if self.bytes > 0 else "less"
        return f"verified is {abs(self.bytes):,} B {more} than predicted: " + ", ".join(pieces)


def _by(makers: tuple[tuple[str, int], ...], before: str = ": ") -> str:
    """The three largest makers of a part, `op bytes`, or nothing."""
    return f"{before}{', '.join(f'{op} {n:,} B' for op, n in makers[:3])}" if makers else ""


def _signed(n: int) -> str:
    return f"{n:+,} B"


def explain(verified: int, prediction: OffloadPrediction, eager: EagerPeak) -> PeakGap:
    """The gap between `verified` and `prediction.peak`, part by part; eager's parts must add up to `verified`."""
    if eager.kept + eager.back + eager.temporaries != verified or eager.peak != verified:
        raise ValueError(
            f"the labelled eager step peaks at {eager.peak:,} B ({eager.kept + eager.back + eager.temporaries:,} B "
            f"by its parts), not the verified {verified:,} B"
        )
    parts = (
        ("temporaries", eager.temporaries - prediction.temporaries),
        ("saved values freed before min-cut's peak", prediction.freed_before_peak),
        ("saved tensors left on the device", eager.kept - prediction.kept),
        ("saved tensors brought back", eager.back - prediction.back),
    )
    return PeakGap(verified, prediction.peak, parts, eager, prediction)
