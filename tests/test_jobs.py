"""The widget's one runner of background work (bwd_widgets/jupyter/jobs.py), on its own: what each kind does when
asked for while one runs (refused, replaced, run once more), the busy flag, cancel, and errors as one sentence.
The widget's own jobs are exercised through the widget in tests/test_widget.py and tests/test_background_invisible.py."""

import threading

import pytest

from bwd_widgets.core.errors import BwdWidgetsError
from bwd_widgets.jupyter.jobs import ADVISE, KINDS, NEIGHBOURS, PICTURE, SWEEP, JobRunner

WAIT_S = 30


class _Widget:
    """What the runner speaks to: the error sentence and the busy flag, recorded."""

    def __init__(self):
        self.errors: list[str] = []
        self.busy: list[bool] = []
        self.runner = JobRunner(on_error=self.errors.append, on_busy=self.busy.append)


def _held(gate: threading.Event, runs: list | None = None):
    """Work that runs until `gate` opens or its job is told to stop."""

    def work(job):
        if runs is not None:
            runs.append(job)
        for _ in range(WAIT_S * 100):
            if gate.wait(0.01) or job.cancelled():
                return "done"
        raise AssertionError("the test never opened the gate")

    return work


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
def test_each_kind_runs_in_a_thread_named_for_it_and_is_released(kind):
    widget, gate = _Widget(), threading.Event()
    thread = widget.runner.start(kind, _held(gate))
    assert thread.name == f"bwd-widgets-{kind.name}" and widget.runner.running(kind) is not None
    assert widget.runner.busy is kind.exclusive and widget.busy == ([True] if kind.exclusive else [])
    gate.set()
    assert widget.runner.wait(kind, WAIT_S)
    assert widget.runner.running(kind) is None and not widget.runner.busy
    assert widget.busy == ([True, False] if kind.exclusive else []) and widget.errors == []


def test_the_sweep_and_the_advisor_refuse_each_other_and_themselves():
    widget, gate = _Widget(), threading.Event()
    widget.runner.start(SWEEP, _held(gate))
    assert widget.runner.start(SWEEP, _held(gate)) is None and widget.runner.start(ADVISE, _held(gate)) is None
    with pytest.raises(BwdWidgetsError, match="^the advisor cannot start while the sweep runs in this widget"):
        widget.runner.run(ADVISE, _held(gate))
    assert widget.runner.start(NEIGHBOURS, _held(gate)) is not None, "work made ahead is not refused"
    gate.set()
    assert widget.runner.wait(SWEEP, WAIT_S) and widget.runner.wait(NEIGHBOURS, WAIT_S)
    assert widget.runner.run(ADVISE, _held(gate)) == "done" and widget.busy == [True, False, True, False]


def test_a_newer_job_replaces_the_running_one_of_a_replacing_kind():
    widget, gate, runs = _Widget(), threading.Event(), []
    first = widget.runner.start(NEIGHBOURS, _held(gate, runs))
    second = widget.runner.start(NEIGHBOURS, _held(gate, runs))
    first.join(WAIT_S)
    assert not first.is_alive() and second.is_alive(), "the first stopped at its check, the second waits on"
    assert runs[0].cancelled() and not runs[1].cancelled() and widget.runner.running(NEIGHBOURS) is runs[1]
    gate.set()
    second.join(WAIT_S)
    assert widget.runner.running(NEIGHBOURS) is None


def test_a_redraw_asked_for_while_one_runs_runs_once_more_after_it():
    widget, gate, runs = _Widget(), threading.Event(), []
    thread = widget.runner.start(PICTURE, _held(gate, runs))
    assert widget.runner.start(PICTURE, _held(gate, runs)) is None
    assert widget.runner.start(PICTURE, _held(gate, runs)) is None, "two requests meanwhile: one more run"
    gate.set()
    assert widget.runner.wait(PICTURE, WAIT_S) and not thread.is_alive()
    assert len(runs) == 2 and runs[0] is runs[1], "the same job, in the same thread, once more"


def test_cancel_sets_the_running_jobs_stop_flag_and_says_whether_one_ran():
    widget, runs = _Widget(), []
    assert widget.runner.cancel(SWEEP) is False
    thread = widget.runner.start(SWEEP, _held(threading.Event(), runs))
    assert widget.runner.cancel(SWEEP) is True
    thread.join(WAIT_S)
    assert runs[0].cancelled() and widget.runner.running(SWEEP) is None and widget.busy == [True, False]


@pytest.mark.parametrize("where", ["thread", "here"])
@pytest.mark.parametrize(
    ("error", "sentence"),
    [
        (RuntimeError("the workers are gone\nsecond line"), "the sweep failed: RuntimeError: the workers are gone"),
        (BwdWidgetsError("budgets must lie between 0 and 1."), "budgets must lie between 0 and 1."),
    ],
    ids=["unexpected", "ours"],
)
def test_an_error_is_one_sentence_the_progress_line_empties_and_the_runner_is_free(where, error, sentence):
    widget, lines = _Widget(), []

    def broken(job):
        job.report("1/4")
        raise error

    if where == "thread":
        widget.runner.start(SWEEP, lambda job: widget.runner.run(SWEEP, broken, lines.append)).join(WAIT_S)
    else:
        assert widget.runner.run(SWEEP, broken, lines.append) is None
    assert widget.errors == [sentence] and lines == ["1/4", ""]
    assert widget.runner.running(SWEEP) is None and widget.busy == [True, False]
