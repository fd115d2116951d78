"""Ctrl-C at any moment of an extraction, a rerun or a sweep leaves torch as it was (issue 23, finding 7).

torch.fx's tracer (ours on the torch.fx route, make_fx's inside AOT Autograd on both routes) patches
`nn.Module.__call__` and `__getattr__` and undoes that in a finally; an interrupt landing in that finally
left every eager module returning a Proxy. Here a timer interrupts the main thread after a delay drawn
from a seeded generator across each operation's measured duration, and after every interrupt eager
modules, torch's modes and settings, the model, and a later extraction are checked.
"""

import _thread
import logging
import random
import signal
import sys
import threading
import time
import traceback

import pytest
import torch
import torch.fx._symbolic_trace as fx_symbolic_trace
from torch import nn

import bwd_widgets as bw
from bwd_widgets.core.capture import CaptureSession

SEED = 23
POINTS = {"extract (torch.fx)": 18, "extract (Dynamo)": 14, "rerun": 10, "sweep": 10, "measure": 8}
"""Interrupt points per operation: 60 in all."""
_PATCHER_FILE = "torch/fx/_symbolic_trace.py"
_TRACING_FILES = ("torch/fx/_symbolic_trace.py", "torch/fx/experimental/proxy_tensor.py", "torch/fx/proxy.py")


class _Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 4)

    def forward(self, x):
        return self.b(self.a(x).relu())


class _DictMlp(_Mlp):
    """Extracted with output="y": the Dynamo route."""

    def forward(self, x):
        return {"y": super().forward(x).tanh(), "count": 3}


def _backward_names(extraction: bw.BackwardExtraction) -> list[str]:
    return [node.name for node in extraction.backward.graph.nodes]


def _state(models: list[nn.Module]) -> dict:
    """What an interrupted operation must leave as it was."""
    return {
        "Module.__call__": vars(nn.Module)["__call__"],
        "Module.__getattr__": vars(nn.Module)["__getattr__"],
        "fx patcher": fx_symbolic_trace.CURRENT_PATCHER,
        "fx tracing": fx_symbolic_trace._is_fx_tracing_flag,
        "grad mode": torch.is_grad_enabled(),
        "inference mode": torch.is_inference_mode_enabled(),
        "default dtype": torch.get_default_dtype(),
        "functorch config": torch._functorch.config.get_config_copy(),
        "dynamo config": torch._dynamo.config.get_config_copy(),
        "SIGINT handler": signal.getsignal(signal.SIGINT),
        "fake-tensor log level": logging.getLogger("torch._subclasses.fake_tensor").level,
        "parameters": [(n, p.requires_grad, p.detach().clone()) for m in models for n, p in m.named_parameters()],
    }


def _assert_same(before: dict, after: dict, where: str) -> None:
    for key, value in before.items():
        if key == "parameters":
            for (name, grad_before, tensor_before), (_, grad_after, tensor_after) in zip(value, after[key]):
                assert grad_before == grad_after, f"{where}: {name}.requires_grad changed"
                assert torch.equal(tensor_before, tensor_after), f"{where}: {name} changed"
        else:
            assert after[key] == value, f"{where}: {key} is {after[key]!r}, was {value!r}"
    eager = nn.Linear(2, 2)(torch.ones(1, 2))
    assert type(eager) is torch.Tensor, f"{where}: an eager module returned {type(eager).__name__}"


def _interrupted(operation, delay: float) -> tuple[str, BaseException | None]:
    """Run `operation` with Ctrl-C arriving after `delay` seconds: where it landed, and what it raised."""
    timer = threading.Timer(delay, _thread.interrupt_main)
    landed, raised = "after", None
    try:
        timer.start()
        result = operation()
        if isinstance(result, bw.Sweep) and result.interrupted:
            landed = "sweep (stopped)"
    except KeyboardInterrupt as error:
        landed = _where(error)
    except Exception as error:  # noqa: BLE001  # reported by the caller, with the interrupt's delay
        landed, raised = "raised", error
    while True:  # a late interrupt lands here, not in the checks
        try:
            timer.cancel()
            timer.join()
            time.sleep(0)
            break
        except KeyboardInterrupt:
            pass
    return landed, raised


class _LineInterrupt:
    """Ctrl-C (the real signal) sent at the `at`-th line torch.fx's patcher runs: where a timer rarely lands."""

    def __init__(self, at: int) -> None:
        self.at, self.lines = at, 0

    def __call__(self, frame, event, arg):
        if not frame.f_code.co_filename.endswith(_PATCHER_FILE) or self.lines >= self.at:
            return None
        return self._line

    def _line(self, frame, event, arg):
        if event == "line" and self.lines < self.at:
            self.lines += 1
            if self.lines == self.at:
                _thread.interrupt_main()
        return self._line if self.lines < self.at else None


def _at_line(operation, at: int) -> tuple[str, BaseException | None, int]:
    """Run `operation` with Ctrl-C at the `at`-th patcher line: where it landed, what it raised, lines counted."""
    tracer = _LineInterrupt(at)
    landed, raised = "after", None
    try:
        sys.settrace(tracer)
        try:
            operation()
        finally:
            sys.settrace(None)
        time.sleep(0)
    except KeyboardInterrupt as error:
        landed = _where(error)
    except Exception as error:  # noqa: BLE001  # reported by the caller
        landed, raised = "raised", error
    return landed, raised, tracer.lines


def _where(error: BaseException) -> str:
    frames = traceback.extract_tb(error.__traceback__)
    if frames and frames[-1].name == "interrupts_held":
        return "held until the capture ended"
    return "fx tracing" if any(f.filename.replace("\\", "/").endswith(_TRACING_FILES) for f in frames) else "elsewhere"


def _routes(operation) -> list[str]:
    """Which capture routes `operation` took."""
    taken = []
    with pytest.MonkeyPatch.context() as patch:
        for route in ("compile_fx", "compile_dynamo"):
            real = getattr(CaptureSession, route)

            def recording(self, *args, real=real, route=route, **kwargs):
                taken.append(route)
                return real(self, *args, **kwargs)

            patch.setattr(CaptureSession, route, recording)
        operation()
    return taken


def _duration(operation) -> float:
    times = []
    for _ in range(2):
        started = time.perf_counter()
        operation()
        times.append(time.perf_counter() - started)
    return min(times)


def test_interrupts_anywhere_leave_torch_and_later_extractions_working():
    torch.manual_seed(0)
    fx_model, dynamo_model = _Mlp(), _DictMlp()
    x = torch.randn(4, 8)

    def extract_fx():
        bw.clear_trace_cache()  # a fresh trace, so interrupts land in tracing
        return bw.extract(fx_model, x)

    def extract_dynamo():
        bw.clear_trace_cache()
        return bw.extract(dynamo_model, x, output="y")

    assert _routes(extract_fx) == ["compile_fx"] and _routes(extract_dynamo) == ["compile_dynamo"]
    base = extract_fx()
    operations = {
        "extract (torch.fx)": (extract_fx, extract_fx),
        "extract (Dynamo)": (extract_dynamo, extract_dynamo),
        "rerun": (lambda: base.rerun("min_cut", 0.5), lambda: base.rerun("min_cut", 0.5)),
        "sweep": (
            lambda: bw.sweep(fx_model, x, budgets=[0.0, 0.5, 1.0], progress=False, cache=False),
            lambda: bw.sweep(fx_model, x, budgets=[0.0, 0.5, 1.0], progress=False, cache=False).points[-1].extraction,
        ),
        # a real run of the graphs, which keeps Ctrl-C live: gradients come back on however it stops
        "measure": (lambda: base.measure(), lambda: base),
    }
    expected = {name: _backward_names(later()) for name, (_, later) in operations.items()}
    before = _state([fx_model, dynamo_model])
    rng = random.Random(SEED)
    landed: dict[str, int] = {}
    for name, (operation, later) in operations.items():
        duration = _duration(operation)
        for point in range(POINTS[name]):
            delay = rng.uniform(0.0, duration)
            where, raised = _interrupted(operation, delay)
            context = f"{name}, interrupt {point} after {delay * 1000:.1f} ms (landed: {where})"
            # torch may swallow an interrupt and fail for it (a guard check): then one sentence of ours
            assert raised is None or isinstance(raised, bw.BwdWidgetsError), f"{context}: raised {raised!r}"
            landed[where] = landed.get(where, 0) + 1
            _assert_same(before, _state([fx_model, dynamo_model]), context)
            assert _backward_names(later()) == expected[name], f"{context}: a later {name} differs"
    print(f"interrupt points: {sum(landed.values())}, landed: {landed}")
    assert sum(landed.values()) >= 58


def test_interrupts_inside_torch_fx_patcher_leave_torch_working():
    """At random lines of torch.fx's patcher (patching and undoing nn.Module.__call__), on both routes."""
    torch.manual_seed(0)
    fx_model, dynamo_model = _Mlp(), _DictMlp()
    x = torch.randn(4, 8)
    operations = {
        "extract (torch.fx)": lambda: bw.extract(fx_model, x, cache=False),
        "extract (Dynamo)": lambda: bw.extract(dynamo_model, x, output="y", cache=False),
    }
    expected = {name: _backward_names(operation()) for name, operation in operations.items()}
    before = _state([fx_model, dynamo_model])
    rng = random.Random(SEED)
    for name, operation in operations.items():
        _, _, lines = _at_line(operation, 10**9)  # counts the patcher's lines, interrupts nothing
        for at in sorted(rng.sample(range(1, lines + 1), 15)):
            where, raised, _ = _at_line(operation, at)
            context = f"{name}, interrupt at patcher line {at} of {lines} (landed: {where})"
            assert raised is None or isinstance(raised, bw.BwdWidgetsError), f"{context}: raised {raised!r}"
            _assert_same(before, _state([fx_model, dynamo_model]), context)
            assert _backward_names(operation()) == expected[name], f"{context}: a later extraction differs"


# -- a failing extraction leaves the model as it was (finding 8) ------------------------------------------------


class _ConvBn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.act = nn.ReLU()

    def forward(self, x, counts):
        counts.add_(1)  # an input changed in place
        return self.act(self.bn(self.conv(x)))


@pytest.mark.parametrize("raised", [ValueError, KeyboardInterrupt])
def test_a_hook_that_raises_leaves_running_statistics_and_inputs_as_they_were(raised):
    torch.manual_seed(0)
    model = _ConvBn()

    def refuse(module, args, output):
        raise raised("the hook refuses")

    model.act.register_forward_hook(refuse)  # after batch norm ran, outside any compiled region
    counts = torch.zeros(3, dtype=torch.long)
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    expected = bw.BwdWidgetsError if raised is ValueError else KeyboardInterrupt
    with pytest.raises(expected) as caught:
        bw.extract(model, torch.randn(2, 3, 8, 8), counts)
    if expected is bw.BwdWidgetsError:
        assert str(caught.value).startswith("torch could not capture _ConvBn: ValueError: the hook refuses")
        assert "\n" not in str(caught.value) and caught.value.__suppress_context__
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, before[name]), f"{name} changed"
    assert torch.equal(counts, torch.zeros(3, dtype=torch.long)), "the input changed in place"
