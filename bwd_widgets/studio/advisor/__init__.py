"""`bw.advise`: fit an activation-memory target with the plans a practitioner would try, and prove each.

Trace once for the min-cut budgets (each is a re-partition of that trace); trace once per checkpoint plan
(checkpointing changes the traced program), from the plan's own pasted code (`code.run_code`). A budget plan
is re-partitioned again under its pasted `config.patch` before it may fit, a checkpoint plan combined with a
budget likewise on its own trace: only such a peak, got by executing the code, decides whether a plan fits.
In fake mode the checkpoint plans are traced in worker processes forked at the start (`forked.py`) while
this process traces the model and partitions its budgets. The peak is activation-only
(`peak_activation_only_bytes`: the returned gradients left out, since no plan lowers them); an optimizer's
step bill adds parameters, gradients and optimizer state once. An operations module: it imports the core
and the studio's helpers, never Jupyter.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ...core.eager_memory import CPU_CAVEAT, device_of, eager_step_memory
from ...core.errors import AdviceError, one_line
from ...core.kinds import Mode
from ...core.measure import time_step
from ...core.partitioners import check_budget
from ...extraction.extract import extract, prepared_call
from ...extraction.result import BackwardExtraction
from ..compare import listed
from ..forked import Awaited, ForkedTasks, default_workers
from . import code as snippets
from . import newest
from .gap import OffloadPrediction, eager_peak_parts, explain, predict, saved_sizes
from .plans import Advice, Plan, pareto, parse_bytes, step_bytes

__all__ = ["Advice", "AdviceError", "Plan", "Stopped", "advise", "parse_bytes"]

ORDINAL = {1: "every block", 2: "every 2nd block", 3: "every 3rd block"}


def _every(k: int) -> str:
    return ORDINAL.get(k, f"every {k}th block")


@dataclass
class _Run:
    """One advisor call's fixed settings and the trace of the model."""

    model: Any
    inputs: tuple
    mode: Mode
    extract_kwargs: dict
    target: int
    step: int
    path: str | None
    optimizer: str | None = None
    base: BackwardExtraction | None = None
    budget_plans: list[Plan] = field(default_factory=list)
    by_spec: dict[int, list[Plan]] = field(default_factory=dict)
    """Each checkpoint plan's plans (alone, and with a budget), by its place in the specs."""
    offload: list[Plan] = field(default_factory=list)
    predictions: dict[str, OffloadPrediction] = field(default_factory=dict)
    """Each offload plan's prediction in parts, by its code."""
    on_cpu: bool = False  # the model's tensors are on the CPU, where offload hooks moving them to it move nothing
    regions: list[Plan] = field(default_factory=list)
    """Region-budget plans (`newest.region_plan`): listed beside the Pareto set, verified as compiled."""

    @property
    def tried(self) -> list[Plan]:
        """The plans tried, in the order a one-process run makes them, whichever process made each."""
        return self.budget_plans + [p for i in sorted(self.by_spec) for p in self.by_spec[i]]

    def extract(self, model: Any, budget: float | None = 1.0) -> BackwardExtraction:
        return extract(
            model, *self.inputs, partitioner="min_cut", memory_budget=budget, mode=self.mode, **self.extract_kwargs
        )

    def plan(self, label: str, kind: str, code: str, e: BackwardExtraction) -> Plan:
        made = Plan(label, kind, code, e.peak_activation_only_bytes, e.saved_activation_bytes, e.recompute_flops)
        made.step_bytes, made.extraction = self.step, e
        return made

    def from_code(self, code: str) -> BackwardExtraction:
        """Execute a plan's code on a shadow of the model and extract: the model as the code left it, under
        the budget patch the code defined."""
        applied = snippets.run_code(code, self.model, self.path)
        with applied.memory_budget:
            return extract(applied.model, *self.inputs, partitioner="min_cut", mode=self.mode, **self.extract_kwargs)


class Stopped(KeyboardInterrupt):
    """`should_stop()` said stop: the advisor ends as on Ctrl-C, with the plans made so far."""


class _Steps:
    """The advisor's progress: tqdm's bar, and `on_step(label, done, total)` for a caller that draws its own
    (the widget); between steps `should_stop()` ends the run as Ctrl-C does."""

    def __init__(self, bar: Any, on_step: StepCallback | None, should_stop: Callable[[], bool] | None) -> None:
        self.bar, self.on_step, self.should_stop = bar, on_step, should_stop
        self.label, self.done = "", 0

    @property
    def total(self) -> int:
        return int(self.bar.total or 0)

    @total.setter
    def total(self, total: int) -> None:
        self.bar.total = total

    def set_postfix_str(self, label: str) -> None:
        self.label = label
        self.bar.set_postfix_str(label)
        if self.on_step is not None:
            self.on_step(label, self.done, self.total)

    def update(self, ask: bool = True) -> None:
        self.done += 1
        self.bar.update()
        if self.on_step is not None:
            self.on_step(self.label, self.done, self.total)
        if ask and self.should_stop is not None and self.should_stop():
            raise Stopped

    def finish(self) -> None:
        """The steps counted ahead but not needed (plans off the Pareto front are not verified): done, so the
        count ends at its total, which never changed while the advisor ran."""
        left = self.total - self.done
        if left > 0:
            self.done = self.total
            self.bar.update(left)
            if self.on_step is not None:
                self.on_step(self.label, self.done, self.total)


def _steps_at_most(budgets: tuple, specs: list, offload: bool, region: bool = False) -> int:
    """Every step the advisor can take, counted before it starts: the trace, each budget, each checkpoint spec,
    the verification of each plan those can make (one per budget, two per spec: alone and with the lowest
    budget), an offload plan's one or two eager checks, and the region plan's compiled run. The count shown
    never grows; `_Steps.finish` closes the steps not needed."""
    return 1 + len(budgets) + len(specs) + len(budgets) + 2 * len(specs) + (2 if offload else 0) + int(region)


StepCallback = Callable[[str, int, int], None]

HOOKS_UNDER_COMPILE = (
    "under torch.compile the same hooks wrap what the compiled forward saves (min-cut's set), packed as the forward "
    "ends and all unpacked as backward starts, so they do not lower a compiled step's peak: use them with an eager "
    "step"
)
"""What an offload plan says of its hooks around a compiled call, as torch runs them (`tests/test_advisor.py` holds
it on every tested torch: every unpack comes before the first parameter's gradient)."""


def _budget_plans(run: _Run, budgets: tuple, bar: _Steps) -> list[Plan]:
    assert run.base is not None
    made = []
    for budget in budgets:
        bar.set_postfix_str(f"min-cut budget {budget:g}")
        e = run.base if budget == 1.0 else run.base.rerun("min_cut", budget)
        made.append(run.plan(f"min-cut budget {budget:g}", "budget", snippets.budget_code(budget), e))
        bar.update()
    return made


def _lowest_budget(run: _Run, budget_plans: list[Plan]) -> float | None:
    """The budget of lowest peak below 1.0, tried with each checkpoint plan that does not fit alone."""
    lowest = min(
        (p for p in budget_plans if p.extraction is not run.base), key=lambda p: p.predicted_peak_bytes, default=None
    )
    return None if lowest is None else float(lowest.label.rsplit(" ", 1)[1])


def _checkpoint_specs(path: str, policies: tuple, every: tuple) -> list[tuple[str, str, str]]:
    """(label, kind, code) for each checkpoint plan, cheapest recompute first."""
    specs = [
        (f"selective: save {saves}, every block", "selective", snippets.selective_code(path, saves))
        for saves in policies
    ]
    specs += [
        (f"checkpoint {_every(k)}", "checkpoint", snippets.checkpoint_code(path, k))
        for k in sorted(every, reverse=True)
    ]
    return specs


def _checkpoint_plans(run: _Run, spec: tuple[str, str, str], lowest: Callable[[], float | None]) -> list[Plan]:
    """One checkpoint plan, traced from its own code (so its prediction is verified by construction); one that
    does not fit alone is also tried with the `lowest()` budget, a re-partition of that trace, and verified
    under the budget patch of its pasted code. Runs in this process or in a forked worker."""
    label, kind, code = spec
    e = run.from_code(code)
    alone = run.plan(label, kind, code, e)
    _verified(run, alone, e)
    made = [alone]
    budget = lowest() if alone.predicted_bill_bytes > run.target else None
    if budget is not None:
        both_code = code + "\n" + snippets.budget_code(budget)
        both = run.plan(f"{label} + min-cut budget {budget:g}", "combined", both_code, e.rerun("min_cut", budget))
        with snippets.run_code(both_code, run.model, run.path).memory_budget:
            _verified(run, both, e.rerun("min_cut"))  # the budget from the pasted config patch alone
        made.append(both)
    return made


def _shipped(plans: list[Plan]) -> list[Plan]:
    """In a worker process: the plans without their extractions or the ways to remake them (fake tensors and
    the model do not pickle, or should not travel)."""
    for plan in plans:
        plan.extraction, plan.remake = None, None
    return plans


def _saved_sizes(run: _Run) -> list[int]:
    """Bytes of min-cut 1.0's saved activations, largest first: the sizes an offload plan chooses among."""
    assert run.base is not None
    return saved_sizes(run.base)


def _offload_plan(run: _Run, chosen: int | None = None) -> Plan | None:
    """Offload the saved activations of `chosen` bytes or more; by default the size is chosen from min-cut 1.0's
    saved values so that the prediction fits. Verified afterwards by running its pasted hooks (`_check_offload`)."""
    assert run.base is not None
    sizes = _saved_sizes(run)
    if not sizes:
        return None
    peak, moved = run.base.peak_activation_only_bytes, 0
    if chosen is None:
        chosen = sizes[-1]
        for size in sizes:
            moved += size
            chosen = size
            if peak - moved + sizes[0] + run.step <= run.target:
                break
    prediction = predict(run.base, chosen)  # peak - moved + sizes[0], in parts
    moved = sum(s for s in sizes if s >= chosen)
    code = snippets.offload_code(chosen)
    run.predictions[code] = prediction
    return Plan(
        f"offload saved tensors >= {chosen:,} B to the CPU",
        "offload",
        code,
        prediction.peak,
        run.base.saved_activation_bytes - moved,
        0,
        step_bytes=run.step,
        note="predicted: min-cut 1.0's activation-only peak less the saved bytes moved off the device, plus the "
        "largest one back at a time in backward. saved_tensors_hooks run around the compiled graphs, not in "
        "them, so the plan has no partition of its own: it is verified as the code runs, eagerly (copies cost transfer time, not FLOPs); "
        + HOOKS_UNDER_COMPILE
        + (CPU_CAVEAT if run.on_cpu else ""),
    )


def _check_offload(run: _Run, plan: Plan, bar: _Steps) -> None:
    """Verify the offload plan; one whose eager step does not fit is tried once more moving every saved
    activation (min-cut 1.0's smallest saved size), which takes its place if it fits or peaks lower."""
    _verify_step(run, plan, bar)
    smallest = _saved_sizes(run)[-1]
    everything = None if _fits_off_cpu(run, plan) or plan.verified_peak_bytes is None else _offload_plan(run, smallest)
    if everything is None or everything.code == plan.code:
        return
    _verify_step(run, everything, bar)
    peak = everything.verified_peak_bytes
    if peak is not None and (_fits_off_cpu(run, everything) or peak < (plan.verified_peak_bytes or 0)):
        everything.note += (
            f"; tried first: {plan.label}, whose eager peak of {plan.verified_peak_bytes:,} B does not fit"
        )
        run.offload[run.offload.index(plan)] = everything


def _fits_off_cpu(run: _Run, plan: Plan) -> bool:  # on a device the hooks move saved tensors off: `fits` elsewhere
    return plan.verified_peak_bytes is not None and plan.verified_peak_bytes + run.step <= run.target


def _verify_step(run: _Run, plan: Plan, bar: _Steps) -> None:
    bar.set_postfix_str(f"verify {plan.label} (eager, fake tensors)")
    _verify_offload(run, plan)
    bar.update()


def _verify_offload(run: _Run, plan: Plan) -> None:
    """Execute the plan's code and run one eager forward, under the `offload` hooks it defined, and backward,
    over fake tensors on a stand-in device (`core.eager_memory`), as `extract` would call the model;
    each storage is counted as it comes and goes. A model that cannot run there leaves the plan unverified."""
    applied = snippets.run_code(plan.code, run.model, run.path)
    try:
        call = prepared_call(applied.model, run.inputs, run.extract_kwargs, run.mode)
        step = eager_step_memory(
            call.model,
            call.inputs,
            call.keywords,
            applied.saved_tensors_hooks,
            call.output,
            run.base.requires_grad if run.base is not None else call.requires_grad,  # as the capture decided
            call.arg_names,
        )
    except Exception as error:  # noqa: BLE001 - the plan stays listed, predicted only, with why
        plan.note += f"; not verified: its eager step could not run on fake tensors ({one_line(error)})"
        return
    plan.verified_peak_bytes, plan.saved_bytes = step.activation_peak_bytes, step.after_forward_bytes
    plan.fits = step.activation_peak_bytes + run.step <= run.target and not run.on_cpu  # nothing moves on a CPU
    plan.note += (
        f"; verified: the pasted hooks around an eager forward and backward over fake tensors on a stand-in "
        f"device leave an activation-only peak of {step.activation_peak_bytes:,} B and "
        f"{step.after_forward_bytes:,} B on the device after forward, {step.cpu_bytes:,} B on the CPU; "
        "the eager step saves what autograd's formulas save, not what min-cut keeps, and runs attention as the "
        "math kernel, which saves more than a GPU's fused kernels"
    )
    _explain_gap(run, plan, call, applied.saved_tensors_hooks)


def _explain_gap(run: _Run, plan: Plan, call: Any, hooks: Any) -> None:
    """Where the verified peak differs from the predicted one: the same eager step run once more with each storage
    alive at its peak labelled (`gap.eager_peak_parts`), against the prediction's parts; the note says it in one
    clause, whose parts add up to the gap."""
    prediction = run.predictions.get(plan.code)
    if prediction is None or plan.verified_peak_bytes is None or prediction.peak != plan.predicted_peak_bytes:
        return
    try:
        eager = eager_peak_parts(
            call.model,
            call.inputs,
            call.keywords,
            hooks,
            call.output,
            run.base.requires_grad if run.base is not None else call.requires_grad,
            call.arg_names,
        )
        plan.gap = explain(plan.verified_peak_bytes, prediction, eager)
    except Exception as error:  # noqa: BLE001 - the plan keeps its verified peak; only the why is missing
        plan.note += f"; the gap to the prediction is not attributed: {one_line(error)}"
        return
    plan.note += "; " + plan.gap.text


def verify(run: _Run, plan: Plan) -> None:
    """A budget plan: execute its code and partition the model's trace again under the budget patch the code
    defined: the peak that decides `fits`."""
    assert run.base is not None
    with snippets.run_code(plan.code, run.model, run.path).memory_budget:
        e = run.base.rerun("min_cut")  # the budget comes from the pasted config patch alone
    _verified(run, plan, e)


def _verified(run: _Run, plan: Plan, e: BackwardExtraction) -> None:
    plan.verified_peak_bytes, plan.extraction = e.peak_activation_only_bytes, e
    plan.saved_bytes, plan.recompute_flops = e.saved_activation_bytes, e.recompute_flops
    plan.fits = e.peak_activation_only_bytes + run.step <= run.target


def _verify_front(run: _Run, bar: _Steps) -> None:
    """Verify until every plan on the Pareto front has been re-extracted from its code."""
    while True:
        pending = [p for p in pareto(run.tried) if p.verified_peak_bytes is None]
        if not pending:
            return
        for plan in pending:
            bar.set_postfix_str(f"verify {plan.label}")
            verify(run, plan)
            bar.update()


def _gradient_bytes(e: BackwardExtraction | None) -> int:
    """Bytes of the parameters' gradients the backward returns: in the memory pane's peak, not in the
    advisor's (an input's gradient stays in it)."""
    if e is None:
        return 0
    total = 0
    for g in e.gradients:
        if g.kind != "parameter":
            continue
        dtype = getattr(torch, g.dtype.removeprefix("torch."), None)
        size = torch.empty((), dtype=dtype).element_size() if isinstance(dtype, torch.dtype) else 0
        total += size * int(torch.Size(g.shape).numel())
    return total


def _choose(run: _Run, seconds: float, interrupted: bool) -> Advice:
    front = pareto([p for p in run.tried if p.verified_peak_bytes is not None])
    fitting = [p for p in front if p.fits]
    best = min(fitting, key=lambda p: (p.recompute_flops, p.verified_peak_bytes), default=None)
    why = ""
    if best is None and front:
        lowest = min(front, key=lambda p: p.verified_peak_bytes or 0)
        why = (
            f"no plan tried fits {run.target:,} B: the lowest re-extracted activation peak is {lowest.label}'s "
            f"{lowest.verified_peak_bytes:,} B{' plus ' + format(run.step, ',') + ' B for the step' if run.step else ''}."
        )
        if run.step > run.target:
            why = why[:-1] + (
                f"; the step bill alone (parameters, gradients, optimizer state) takes {run.step:,} B, which no "
                "plan here lowers (lower precision or sharding does)."
            )
    elif best is None:
        why = "no plan was re-extracted before the advisor stopped."
    offloads = [p for p in run.offload if p.fits]
    if best is None and offloads:
        why += f" Offloading fits instead: {offloads[0].label} (verified eagerly; it costs copies, not FLOPs)."
    notes = [f"{p.label}: {p.note}" for p in [*run.offload, *run.regions]]
    if run.path is None:
        notes.append(
            "no repeated-block container (an nn.ModuleList or nn.Sequential of one class) found: no checkpoint plans."
        )
    notes += newest.newest_notes()
    return Advice(
        run.target,
        front,
        best,
        why,
        run.tried,
        seconds,
        interrupted,
        notes,
        run.offload,
        run.optimizer,
        _gradient_bytes(run.base),
        run.step,
        run.regions,
    )


def _measure(advice: Advice, mode: Mode, measure: bool, measure_time: bool, steps: Callable[[int], _Steps]) -> None:
    """Real mode: run the chosen plan's graphs and keep the measured activation-only peak beside the verified
    one; with `measure_time`, time one forward and backward of each plan on the Pareto set, one step of
    `steps(total)` each (its bar shows the plan; Cancel or Ctrl-C between plans keeps what was timed)."""
    if mode != "real":
        return
    try:
        best = advice.best
        if measure and best is not None and best.extraction is not None:
            best.measured_peak_bytes = best.extraction.measure().activation_peak_bytes
        timed = [p for p in advice.plans if p.verified_peak_bytes is not None and p.extraction is not None]
        if not (measure_time and timed):
            return
        bar = steps(len(timed))
        try:
            for plan in timed:
                bar.set_postfix_str(f"time {plan.label}")
                try:
                    plan.measured_seconds = time_step(plan.extraction.partitions)  # type: ignore[union-attr]
                except Exception as error:  # noqa: BLE001 - one plan that cannot run here keeps the others' times
                    advice.notes.append(f"{plan.label}: not timed: {one_line(error)}")
                bar.update(ask=plan is not timed[-1])  # a stop after the last plan stops nothing
        finally:
            bar.bar.close()
    except KeyboardInterrupt:
        advice.interrupted = True


def advise(
    model: object,
    *inputs: object,
    target: int | float | str,
    mode: Mode = "real",
    budgets: Sequence[float] = (1.0, 0.5, 0.2),
    policies: Sequence[str] = ("matmuls", "attention"),
    every: Sequence[int] = (1, 2),
    optimizer: str | None = None,
    offload: bool = True,
    measure: bool = True,
    measure_time: bool = False,
    progress: bool = True,
    on_step: StepCallback | None = None,
    should_stop: Callable[[], bool] | None = None,
    **extract_kwargs: object,
) -> Advice:
    """The plans that fit `target` bytes of activation memory, and the cheapest.

    target: bytes, or a text such as "24GB" or "512 MiB", held against the activation-only peak (saved values and
    temporaries: the memory pane's peak less the gradients the backward returns, which no plan lowers). optimizer:
    "sgd", "momentum", "adam" or "adamw" adds the parameters, their gradients and that optimizer's state, once
    each, to every plan's bill (None: activations only). Tries min-cut `budgets` (one trace, re-partitioned),
    selective checkpoint `policies` ("matmuls", "attention") and full checkpointing of every k-th block for k in
    `every`, on the model's repeated-block container; a checkpoint plan that does not fit alone is tried with the
    budget of lowest peak too. Each plan on the Pareto front (peak against recompute FLOPs) is re-extracted from
    its own `code`; `best` is the one recomputing least whose re-extracted peak fits. Real mode:
    `best.measured_peak_bytes` is measured (measure=False skips it); measure_time=True times each Pareto plan's
    step (`Plan.measured_seconds`). An offload plan (`offload`) is verified by running its pasted hooks around an eager
    step over fake tensors; it costs copies, not FLOPs: never `best`, nor fitting a CPU model (its hooks move nothing
    there). Where torch has per-region budgets, a region plan gives each block the lowest budget below 1.0
    (`Advice.regions`), verified in real mode by running its pasted code compiled; listed, never `best`. Plans
    go to shallow copies of the model. Ctrl-C, or should_stop() true after a step (Cancel), returns the
    plans so far; on_step(label, done, total) is called as each step starts and ends.
    """
    from tqdm.auto import tqdm

    target_bytes = parse_bytes(target)
    budgets = tuple(check_budget(b) for b in listed(budgets, "budgets", "(1.0, 0.5)"))
    _check_choices(policies, every, measure_time, mode)
    path = snippets.find_blocks(model)
    run = _Run(model, inputs, mode, extract_kwargs, target_bytes, step_bytes(model, optimizer), path, optimizer)
    specs = _checkpoint_specs(path, tuple(policies), tuple(every)) if path is not None else []
    region = newest.region_budget(budgets) if path is not None else None
    started, interrupted = time.perf_counter(), False
    total = _steps_at_most(budgets, specs, offload, region is not None)
    bar = tqdm(total=total, desc="advisor", unit="step", disable=not progress)
    steps = _Steps(bar, on_step, should_stop)
    try:
        _search(run, budgets, specs, offload, steps, region)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        bar.close()
    advice = _choose(run, time.perf_counter() - started, interrupted)
    if not interrupted:
        _measure(advice, mode, measure, measure_time, functools.partial(_timing_steps, progress, on_step, should_stop))
    return advice


def _check_choices(policies: Sequence[str], every: Sequence[int], measure_time: bool, mode: Mode) -> None:
    """One AdviceError sentence for a policy, an `every` or a timing the advisor cannot try."""
    for saves in policies:
        if saves not in snippets.POLICY_OPS:
            raise AdviceError(f"policies= takes {' or '.join(map(repr, snippets.POLICY_OPS))}, got {saves!r}.")
    if measure_time and mode != "real":
        raise AdviceError("measure_time=True times each plan's real graphs, so it needs mode='real'.")
    if any(not isinstance(k, int) or k < 1 for k in every):
        raise AdviceError(f"every= takes whole numbers of 1 or more (1: every block), got {tuple(every)!r}.")


def _timing_steps(
    progress: bool, on_step: StepCallback | None, should_stop: Callable[[], bool] | None, total: int
) -> _Steps:
    """The progress of timing the plans: a bar of its own, after the advisor's."""
    from tqdm.auto import tqdm

    return _Steps(tqdm(total=total, desc="timing", unit="plan", disable=not progress), on_step, should_stop)


def _search(
    run: _Run, budgets: tuple, specs: list[tuple[str, str, str]], offload: bool, bar: _Steps, region: float | None
) -> None:
    """Trace the model and partition its budgets while forked workers (fake mode) trace the checkpoint plans,
    then share what is left of those; then the offload estimate, the verification of the Pareto front, and the
    region plan (each block at the `region` budget), run compiled."""
    run.on_cpu = device_of(run.model, [*run.inputs, *run.extract_kwargs.values()]) == "cpu"
    count = default_workers(run.mode)
    lowest = Awaited(shared=count > 0 and bool(specs))
    pool = ForkedTasks(len(specs), count, lambda i: _shipped(_checkpoint_plans(run, specs[i], lowest.get)), least=2)

    def here(index: int) -> list[Plan]:
        bar.set_postfix_str(specs[index][0])
        return _checkpoint_plans(run, specs[index], lowest.get)

    def came(index: int, plans: list[Plan], made_here: bool) -> None:
        run.by_spec[index] = plans if made_here else [_remade(run, plan) for plan in plans]
        bar.update()

    try:
        pool.start()  # fake mode: the workers trace checkpoint plans while this process traces the model
        bar.set_postfix_str("trace")
        run.base = run.extract(run.model)
        bar.update()
        run.budget_plans = _budget_plans(run, budgets, bar)
        lowest.put(_lowest_budget(run, run.budget_plans))
        pool.run(here, came)
    finally:
        pool.close()
    plan = _offload_plan(run) if offload else None
    if plan is not None:
        run.offload.append(plan)  # listed, predicted, even if the run stops before its check
    _verify_front(run, bar)
    if plan is not None:
        _check_offload(run, plan, bar)
    if region is not None:
        bar.set_postfix_str(f"each block at region budget {region:g} (compiled)")
        run.regions.append(newest.region_plan(run, region))
        bar.update()
    bar.finish()


def _remade(run: _Run, plan: Plan) -> Plan:
    """A worker's plan: its extraction is made again here, from its own code, when first read."""
    plan.remake = functools.partial(run.from_code, plan.code)
    return plan


def _every_plan(advice: Advice) -> list[Plan]:
    plans = [*advice.tried, *advice.plans, *advice.offload, *advice.regions, *([advice.best] if advice.best else [])]
    return list({id(plan): plan for plan in plans}.values())


def shipped_advice(advice: Advice) -> Advice:
    """`advice` with every plan `_shipped`: what pickles out of the process the widget's advisor runs in
    (`studio/spawned.py`)."""
    _shipped(_every_plan(advice))
    return advice


def remade_here(advice: Advice, model: object, inputs: tuple, mode: Mode, extract_kwargs: dict) -> Advice:
    """`advice` made in a worker process, its plans' extractions made again here from their own code when
    first read (as a forked worker's plan is, `_remade`); offload plans have none."""
    path = snippets.find_blocks(model)
    run = _Run(model, inputs, mode, extract_kwargs, advice.target_bytes, advice.step_bytes, path, advice.optimizer)
    for plan in _every_plan(advice):
        if plan.kind not in ("offload", "region"):
            _remade(run, plan)
    return advice


def advise_in_process(argument: tuple, send: Callable[[object], None], stop: Callable[[], bool]) -> Advice:
    """`advise` as the widget's advisor runs it, in a process of its own (`studio/spawned.py`): `argument` is
    (model, inputs, advise's keywords); each step is sent as (label, done, total); the advice comes back
    shipped (`shipped_advice`)."""
    model, inputs, keywords = argument
    advice = advise(
        model, *inputs, progress=False, should_stop=stop,
        on_step=lambda label, done, total: send((label, done, total)), **keywords,
    )  # fmt: skip
    return shipped_advice(advice)
