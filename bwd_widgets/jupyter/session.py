"""The kernel side of one widget: what it shows and what it keeps to show next, as named fields. The widget
(jupyter/widget.py) is the traits and commands over it; the work it starts runs through jupyter/jobs.py."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.errors import BwdWidgetsError
from ..studio.compare import DEFAULT_BUDGETS, Sweep, sweep
from .advising import NEEDS_SOURCE, ModelSource, advice_plans, advised, first_shown, remembered_source
from .ahead import MadeAhead, same_trace

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..extraction.result import BackwardExtraction
    from ..studio.advisor import Advice
    from ..studio.compare import Comparison, SweepPoint
    from .jobs import Job, JobRunner


class WidgetSession:
    """What one widget shows and keeps. `source` is its one reference to the model (the one remembered for later
    widgets of the same joint graph, `advising.remembered_source`, is weak)."""

    def __init__(
        self,
        shown: BackwardExtraction,
        *,
        comparison: Comparison | None,
        sweep: Sweep | None,
        advice: Advice | None,
        source: ModelSource | None,
        send: Callable[[dict, list | None], None],
        jobs: JobRunner,
    ) -> None:
        self.shown = shown
        """The extraction shown: every rerun (a partitioner, a budget) partitions its joint graph again."""
        self.graph_index = 0
        """Which of its compiled regions the payload shown is of."""
        self.comparison = comparison
        """The comparison the widget was opened on; its rows pick an extraction."""
        self.sweep = sweep
        """The sweep drawn in the partitions tab (opened on, or run from the Sweep button)."""
        self.advice = advice
        """The advice listed in the partitions tab (opened on, or run from the Advise box)."""
        self.source = remembered_source(shown, source)
        """(model, inputs, keywords) the advisor traces again; None where the widget was not given its model."""
        self.ahead = MadeAhead(send, self.showing, jobs)
        """The partitions and payloads made ahead of a slider move, and those sent to the browser."""

    @staticmethod
    def opened_on(
        extraction: BackwardExtraction | None,
        comparison: Comparison | None,
        sweep: Sweep | None,
        advice: Advice | None,
    ) -> BackwardExtraction:
        """What a widget opens on: a comparison's first extraction, else `extraction`, else a sweep's last point,
        else the advice's best plan. A BwdWidgetsError, one sentence, when there is nothing to show."""
        if sweep is not None and not sweep.points:
            raise BwdWidgetsError("the sweep has no points to show: run it again and let it finish a budget.")
        if comparison is not None:
            return comparison.extractions[0]
        extraction = extraction or (sweep.points[-1].extraction if sweep is not None else None)
        extraction = extraction or (first_shown(advice) if advice is not None else None)
        if extraction is None:
            raise BwdWidgetsError("nothing to show: pass an extraction, a comparison, a non-empty sweep or advice.")
        return extraction

    def showing(self) -> tuple[BackwardExtraction, int]:
        """(the extraction shown, its graph index): what work made ahead must still hold for."""
        return self.shown, self.graph_index

    def sweep_point_of(self, extraction: BackwardExtraction) -> int:
        """The sweep point `extraction` is (min-cut at that point's budget), or -1: the chart's "current" marker
        follows the slider instead of staying where it was last clicked."""
        points = self.sweep.points if self.sweep is not None else []
        for index, point in enumerate(points):
            same_plan = extraction.partitioner == "min_cut" and extraction.memory_budget == point.budget
            if point.extraction_made is extraction or same_plan:
                return index
        return -1

    def advice_row_of(self, extraction: BackwardExtraction) -> int:
        """The advice row whose plan `extraction` is, or -1."""
        for index, plan in enumerate(advice_plans(self.advice)):
            if plan.extraction_made is extraction:
                return index
        return -1

    def swept_budgets(self) -> set[float]:
        return {p.budget for p in self.sweep.points} if self.sweep is not None else set()

    def partitioned(self, partitioner: str, budget: float | None) -> BackwardExtraction:
        """The extraction under (partitioner, budget): a swept budget's own partition when the sweep has it, or
        one made ahead beside the last move, else partitioned again from the joint graph shown (partitions do
        not change once built)."""
        if partitioner == "min_cut" and budget is not None:
            swept = [p.extraction for p in self.sweep.points if p.budget == budget] if self.sweep else []
            for kept in [*swept, self.ahead.neighbours.get(round(budget, 4))]:
                if kept is not None and same_trace(kept, self.shown):
                    return kept
        return self.shown.rerun(partitioner, budget)

    def swept(self, job: Job, budgets: list[float] | None, drawn: Callable[[Sweep], None]) -> Sweep:
        """The Sweep button's work: min-cut's memory budget swept from the joint graph shown, as `job`. Each
        point goes to `drawn` with those before it, in the budgets' order, as it comes; the progress line
        counts them and says when the sweep stopped early."""
        listed = DEFAULT_BUDGETS if budgets is None else budgets if isinstance(budgets, (list, tuple)) else ()
        job.report(f"0/{len(listed)}")  # the Cancel button shows from now on
        done: list[SweepPoint] = []
        order = {budget: index for index, budget in reversed(list(enumerate(listed)))}

        def progress(point: SweepPoint, count: int, total: int) -> None:
            done.append(point)
            done.sort(key=lambda p: order.get(p.budget, len(order)))  # workers' points come out of order
            job.report(f"{count}/{total}")  # before the point: a chart of n points reads n/total
            drawn(Sweep(list(done)))

        result = sweep(self.shown, budgets=budgets, progress=False, on_point=progress, should_stop=job.cancelled)
        if result.interrupted:
            job.report(job.reported + (" (cancelled)" if job.cancelled() else " (interrupted)"))
        return result

    def needs_source(self) -> ModelSource:
        """The model source, or a BwdWidgetsError saying how to open a widget with one."""
        if self.source is None:
            raise BwdWidgetsError(NEEDS_SOURCE)
        return self.source

    def advised(self, job: Job, target: int | str, measure_time: bool) -> Advice:
        """The Advise box's work: `bw.advise` on the model source for `target` (`advising.advised`), as `job`,
        each step its progress line; the line is emptied when the advisor ends, or says it stopped."""
        job.report("starting")

        def step(label: str, done: int, total: int) -> None:
            job.report(f"{done}/{total}: {label}" if label else f"{done}/{total}")

        advice = advised(self.needs_source(), self.shown.mode, target, measure_time, step, job.cancelled)
        job.report("stopped" if advice.interrupted else "")
        return advice
