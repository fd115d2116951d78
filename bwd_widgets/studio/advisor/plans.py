"""What the advisor returns: plans with their code, predicted and verified peaks, and the cheapest that fits; for an
offload plan, where its verified peak differs from the predicted one, in measured parts (`gap.PeakGap`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ...core.errors import AdviceError
from ...core.units import format_bytes, format_seconds
from ...extraction.result import BackwardExtraction
from .gap import PeakGap

UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def parse_bytes(target: object) -> int:
    """Bytes from an int (or a whole float) or a text such as "24GB", "24 GB", "512 MiB", "1.5e9"."""
    if isinstance(target, bool) or not isinstance(target, (int, float, str)):
        raise AdviceError(f"target={target!r} is not a size: give bytes as a number or a text such as '24GB'.")
    if isinstance(target, str):
        found = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", target)
        unit = found.group(2).lower() if found else None
        if found is None or unit not in UNITS:
            raise AdviceError(
                f"target={target!r} is not a size: write a number and a unit, e.g. '24GB', '512 MiB' "
                "(B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)."
            )
        target = float(found.group(1)) * UNITS[unit]
    if target != target or target < 0 or target == float("inf"):
        raise AdviceError(f"target={target!r} is not a size: give a positive number of bytes.")
    return int(target)


OPTIMIZER_STATES = {"sgd": 0, "momentum": 1, "adam": 2, "adamw": 2}
"""Optimizer state per trainable parameter, in parameter-sized tensors."""


def step_bytes(model: object, optimizer: str | None) -> int:
    """Parameters, their gradients and the optimizer's state, each once: the rest of one training step's bill
    beside the activation peak (which leaves the gradients out); 0 for None."""
    if optimizer is None:
        return 0
    if optimizer not in OPTIMIZER_STATES:
        raise AdviceError(f"optimizer={optimizer!r} is unknown: use one of {', '.join(OPTIMIZER_STATES)} or None.")
    parameters = list(model.parameters()) if isinstance(model, torch.nn.Module) else []
    held = sum(p.numel() * p.element_size() for p in parameters)
    trained = sum(p.numel() * p.element_size() for p in parameters if p.requires_grad)
    return held + trained * (1 + OPTIMIZER_STATES[optimizer])


@dataclass
class Plan:
    """One way to lower activation memory, with the code to paste and what it costs."""

    label: str
    kind: str
    """"budget", "selective", "checkpoint", "combined", "offload" or "region" (each block under its own
    `region_activation_memory_budget`, `newest.py`)."""
    code: str
    predicted_peak_bytes: int
    """Activation-only peak (`peak_activation_only_bytes`: saved values and temporaries, not the returned
    gradients) of bw's own extraction for the plan: a budget applied directly, a checkpoint plan traced from
    its own code (so for it the verified peak is the same extraction's)."""
    saved_bytes: int
    recompute_flops: int
    verified_peak_bytes: int | None = None
    """Activation-only peak got by executing `code` itself: a fresh extraction's, or for an offload plan the
    eager step's under its hooks (`core.eager_memory`); None where not verified."""
    fits: bool = False
    """The verified peak, plus `step_bytes`, is at or under the target (never True unverified)."""
    step_bytes: int = 0
    """Parameters, gradients and optimizer state (`step_bytes()`); 0 without an optimizer."""
    measured_peak_bytes: int | None = None
    """Real mode, the chosen plan: `MeasuredMemory.activation_peak_bytes` from running the graphs (gradient
    outputs' storages left out, like `verified_peak_bytes`)."""
    measured_seconds: float | None = None
    """`advise(..., measure_time=True)`, real mode, a plan on the Pareto set: median seconds of one forward and
    backward of its graphs on this machine (`core.measure.time_step`), the recompute cost as time, not FLOPs."""
    note: str = ""
    gap: PeakGap | None = None
    """An offload plan: where its verified peak differs from the predicted one, in measured parts that add up to
    it (`PeakGap`); its `text` ends the note. None for the other plans, and where not verified."""
    _extraction: BackwardExtraction | None = field(default=None, repr=False, compare=False)
    remake: Callable[[], BackwardExtraction] | None = field(default=None, repr=False, compare=False)
    """How to make `extraction` where it was not kept: a plan a worker process made carries only numbers."""

    @property
    def extraction(self) -> BackwardExtraction | None:
        """The extraction `verified_peak_bytes` came from (or the predicted one before verification); a plan
        made in a worker process extracts it again from its own code here, once, when first read."""
        if self._extraction is None and self.remake is not None:
            self._extraction, self.remake = self.remake(), None
        return self._extraction

    @extraction.setter
    def extraction(self, extraction: BackwardExtraction | None) -> None:
        self._extraction = extraction

    @property
    def extraction_made(self) -> BackwardExtraction | None:
        """The plan's partition if it is made already: None where reading `extraction` would make it."""
        return self._extraction

    @property
    def shows_partition(self) -> bool:
        """Whether the plan has a partition to show: an offload plan's hooks run around the compiled graphs, not
        in them, and a region plan's blocks are graphs of their own, of which bw's extraction keeps one run."""
        return self.kind not in ("offload", "region")

    @property
    def predicted_bill_bytes(self) -> int:
        return self.predicted_peak_bytes + self.step_bytes

    @property
    def bill_bytes(self) -> int | None:
        """The verified peak plus `step_bytes`: what `fits` holds against the target (None unverified)."""
        return None if self.verified_peak_bytes is None else self.verified_peak_bytes + self.step_bytes


def pareto(plans: list[Plan]) -> list[Plan]:
    """Plans no other plan beats on both peak (verified where known) and recompute FLOPs, lowest peak first."""

    def peak(p: Plan) -> int:
        return p.verified_peak_bytes if p.verified_peak_bytes is not None else p.predicted_peak_bytes

    front = [
        p
        for p in plans
        if not any(
            peak(q) <= peak(p)
            and q.recompute_flops <= p.recompute_flops
            and (peak(q), q.recompute_flops) < (peak(p), p.recompute_flops)
            for q in plans
        )
    ]
    unique: dict[tuple[int, int], Plan] = {}
    for p in front:
        unique.setdefault((peak(p), p.recompute_flops), p)
    return sorted(unique.values(), key=peak)


def _size(n: int | None) -> str:
    return "-" if n is None else format_bytes(n)


def _seconds(s: float | None) -> str:
    return "-" if s is None else format_seconds(s)


@dataclass
class Advice:
    """The advisor's answer: `plans` (the Pareto set over peak and recompute FLOPs) and `best`, the plan that
    recomputes least among those whose re-extracted peak fits (None, with `why`, when none fits)."""

    target_bytes: int
    plans: list[Plan]
    best: Plan | None
    why: str = ""
    tried: list[Plan] = field(default_factory=list, repr=False)
    """Every plan tried, in the order tried (the Pareto set is drawn from these)."""
    seconds: float = 0.0
    interrupted: bool = False
    notes: list[str] = field(default_factory=list)
    offload: list[Plan] = field(default_factory=list)
    """Offload plans (saved_tensors_hooks): the hooks run around the compiled graphs, not in them, so they
    have no extraction; each is verified by running its pasted hooks around an eager step on a stand-in device
    (`core/eager_memory.py`). Their cost is copies, not FLOPs: listed beside the Pareto set, never `best`."""
    optimizer: str | None = None
    gradient_bytes: int = 0
    """Bytes of the gradients the backward returns: out of every plan's peak, in the step bill with an optimizer."""
    step_bytes: int = 0
    regions: list[Plan] = field(default_factory=list)
    """Region-budget plans (`newest.region_plan`): each block a compiled graph of its own under its own budget.
    bw's extraction keeps one run of a graph the model runs again, so they have no extraction: their saved
    bytes are counted by running the pasted code compiled (real mode). Listed beside the Pareto set, never
    `best`."""

    @property
    def listed(self) -> list[Plan]:
        """Every plan in the order the advice lists it (the widget's rows): the Pareto set, lowest peak first,
        then the offload and region plans, which have no partition to show."""
        return [*self.plans, *self.offload, *self.regions]

    @property
    def unverified(self) -> list[Plan]:
        """The offload plans whose eager run could not be made (their note says why): predicted only."""
        return [p for p in self.offload if p.verified_peak_bytes is None]

    @property
    def target_means(self) -> str:
        """What the target is held against, one sentence."""
        if self.optimizer is None:
            return (
                f"target is activation memory: saved values and temporaries; parameter gradients "
                f"({_size(self.gradient_bytes)}) are in the step bill with optimizer=..."
            )
        return (
            f"target is activation memory (saved values and temporaries) plus the step bill for "
            f"optimizer={self.optimizer!r}: parameters, their gradients ({_size(self.gradient_bytes)}) and its "
            f"state, {_size(self.step_bytes)} in all, counted once."
        )

    def __repr__(self) -> str:
        head = (
            f"Advice(target {_size(self.target_bytes)}, {len(self.tried)} plans tried in {format_seconds(self.seconds)}"
        )
        lines = [head + (", interrupted)" if self.interrupted else ")"), "  " + self.target_means]
        width = max([44, *(len(p.label) for p in self.plans)])
        timed = any(p.measured_seconds is not None for p in self.plans)
        step_time = f" {'step time':>10}" if timed else ""
        lines.append(f"  {'plan':{width}} {'predicted':>11} {'verified':>11} {'recompute FLOPs':>16}{step_time}  fits")
        for p in self.plans:
            mark = "*" if p is self.best else " "
            fits = "yes" if p.fits else ("?" if p.verified_peak_bytes is None else "no")
            seconds = f" {_seconds(p.measured_seconds):>10}" if timed else ""
            lines.append(
                f"{mark} {p.label:{width}} {_size(p.predicted_peak_bytes):>11} {_size(p.verified_peak_bytes):>11} "
                f"{p.recompute_flops:>16,}{seconds}  {fits}"
            )
        if self.best is not None:
            bill = f", bill {_size(self.best.bill_bytes)}" if self.best.step_bytes else ""
            lines.append(
                f"best: {self.best.label} (activation peak {_size(self.best.verified_peak_bytes)}{bill}); "
                "paste best.code:"
            )
            lines += ["    " + line for line in self.best.code.splitlines()]
        else:
            lines.append(f"best: none: {self.why}")
        for p in self.offload:
            verified = "not verified" if p.verified_peak_bytes is None else f"verified {_size(p.verified_peak_bytes)}"
            verdict = "" if p.verified_peak_bytes is None else (", fits" if p.fits else ", does not fit")
            lines.append(
                f"  offload: {p.label}: predicted peak {_size(p.predicted_peak_bytes)}, {verified} (eager){verdict}"
            )
        for p in self.regions:
            counted = p.note.startswith("verified")  # its saved bytes were counted by running it compiled
            said = f"saved {_size(p.saved_bytes)} compiled" if counted else "not verified (see its note)"
            lines.append(f"  region: {p.label}: {said}, predicted peak {_size(p.predicted_peak_bytes)}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)
