"""The widget's background work (the Sweep button, the Advise box, the slider's neighbours made ahead) is
invisible to the kernel's own thread (issue 44, items 4 and 5): while it runs, the user's eager forward in the
main thread never fails, the global random generator gives exactly the draws it gives with nothing in the
background, and no process-wide torch state (torch.fx's patch of `nn.Module.__call__`, torch's configs, grad
mode, the loggers bwd_widgets quiets) ever reads differently from the main thread."""

import inspect
import logging
import threading
import time
import warnings

import pytest
import torch
from torch import nn

import bwd_widgets as bw
from bwd_widgets.core.fx_route import trace_patched, trace_patches
from bwd_widgets.core.logger_calls import LoggerCalls
from bwd_widgets.core.trace_window import TraceWindow
from bwd_widgets.examples import Transformer

WATCHED_SECONDS = 20.0
SEED = 1234


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.inner(x)


class _UsersOwnModel(nn.Module):
    """Another model of the user's, called eagerly in the main thread: submodules called through
    `nn.Module.__call__`, which torch.fx patches for the whole process while it traces."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(_Block() for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def _process_state() -> dict:
    """What another thread's work could change for the whole process, as the main thread reads it."""
    return {
        "Module.__call__": torch.nn.Module.__call__,
        "Module.__getattr__": torch.nn.Module.__getattr__,
        "grad mode": torch.is_grad_enabled(),
        "functorch config": repr(sorted(torch._functorch.config.get_config_copy().items())),
        "dynamo config": repr(sorted((k, repr(v)) for k, v in torch._dynamo.config.get_config_copy().items())),
        "fake tensor logger": logging.getLogger("torch._subclasses.fake_tensor").level,
        "threads": torch.get_num_threads(),
        **{
            f"{getattr(owner, '__name__', owner)}.{name}": vars(owner).get(name)  # its own entry, not an inherited one
            for owner, name, _ in trace_patches(TraceWindow(), LoggerCalls())
        },
    }


def _background_jobs(widget: bw.BackwardGraphWidget) -> list:
    """Each job the widget runs in the background, started one after another as the last ends."""
    budgets = [0.0, 0.25, 0.5, 0.75, 1.0]

    def move() -> threading.Thread:  # a slider move: its two neighbours are partitioned ahead
        widget.partitioner, widget.memory_budget = "min_cut", 0.6
        return next(t for t in threading.enumerate() if t.name == "bwd-widgets-neighbours")

    return [lambda: widget.start_sweep(budgets), lambda: widget.start_advise("1 KB"), move]


@pytest.mark.parametrize("mode", ["real", "fake"])
def test_the_kernels_thread_sees_nothing_of_the_widgets_background_work(mode):
    torch.manual_seed(0)
    widget = bw.show(Transformer(width=32, depth=2), torch.randint(0, 64, (4, 16)), mode=mode)
    users = _UsersOwnModel().eval()
    x = torch.randn(8, 16)
    with torch.no_grad():
        expected = users(x)
    before = _process_state()
    jobs, running = _background_jobs(widget), None
    errors: list[str] = []
    changed: set[str] = set()
    torch.manual_seed(SEED)
    draws: list[int] = []
    started = time.monotonic()
    while time.monotonic() - started < WATCHED_SECONDS or jobs or (running is not None and running.is_alive()):
        if (running is None or not running.is_alive()) and jobs:
            assert widget.error == "", widget.error
            running = jobs.pop(0)()
            assert running is not None, widget.error
        try:
            with torch.no_grad():
                assert torch.equal(users(x), expected)
        except Exception as error:  # noqa: BLE001 - counted: the test fails on the first
            errors.append(f"{type(error).__name__}: {error}")
        draws.append(int(torch.randint(0, 2**62, (1,)).item()))
        now = _process_state()
        changed |= {name for name in before if now[name] != before[name]}
    assert widget.error == "" and len(widget.sweep_points) == 5 and widget.advice_rows
    assert errors == [], f"{len(errors)} of the user's calls failed, the first: {errors[0]}"
    assert changed == set(), f"the main thread saw {sorted(changed)} change while the widget worked"
    alone = torch.Generator().manual_seed(SEED)
    assert draws == [int(torch.randint(0, 2**62, (1,), generator=alone).item()) for _ in draws], (
        "the global generator's draws in the main thread are not what they are with nothing in the background"
    )
    assert len(draws) > 1000, "the main thread ran all along"


@pytest.mark.parametrize("partitioner", ["default", "min_cut"])
def test_a_partition_made_in_a_thread_replays_its_real_values_where_they_are_read(partitioner):
    """A partition made again holds no real values until read (`Partition.backward_inputs`): the thread that
    partitions (the widget's sweep, the slider's neighbours) draws nothing from the global generator; the
    thread that reads replays the forward under the run's random state, dropout masks included, and gets the
    real run's own values."""
    import bwd_widgets.core.trace as trace_module

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.Dropout(0.5), nn.ReLU(), nn.Linear(32, 16)).train()
    extraction = bw.extract(model, torch.randn(8, 16), partitioner=partitioner)
    replayed_in: list[str] = []
    replay = trace_module.replay_backward_inputs

    def recorded(*args):
        replayed_in.append(threading.current_thread().name)
        return replay(*args)

    made: list = []
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(trace_module, "replay_backward_inputs", recorded)
        thread = threading.Thread(target=lambda: made.append(extraction.rerun(partitioner)), name="partitioning")
        thread.start()
        thread.join()
        assert replayed_in == [], "the partitioning thread replayed the forward"
        values = made[0].partitions[0].backward_inputs
    assert replayed_in == ["MainThread"]
    captured = extraction.partitions[0].backward_inputs
    assert len(values) == len(captured)
    for again, first in zip(values, captured):
        assert type(again) is type(first)
        if isinstance(first, torch.Tensor):
            assert torch.equal(again, first)


def test_a_warning_another_thread_gives_while_torch_fx_traces_names_its_own_line():
    """torch.fx's trace patches `warnings.warn` for the whole process (to refuse the model's own call): another
    thread's warning still names the line that gave it, as without the patch."""
    original = warnings.warn
    caught: list[tuple[str, int]] = []

    def warn() -> None:
        assert warnings.warn is not original, "the trace's patch is in place"
        warnings.warn("from another thread", UserWarning, stacklevel=1)
        caught.append((shown[-1].filename, shown[-1].lineno))

    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        with trace_patched(trace_patches(TraceWindow(), LoggerCalls())):
            thread = threading.Thread(target=warn)
            thread.start()
            thread.join()
    assert warnings.warn is original
    assert caught == [(__file__, inspect.getsourcelines(warn)[1] + 2)]  # the line of its warnings.warn
