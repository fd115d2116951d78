"""A training step as it is (issue 43, item 12): where the backward starts from a loss, a data batch the user
made without `requires_grad` gets no gradient, as `loss.backward()` gives it none; where it does not, every
floating-point input gets one (GraphNet's rule, the old default, still reachable as `requires_grad="floating"`);
a note names every input a rule gave a gradient; the magic takes `--requires-grad`.

What autograd does is the reference: each case runs the same step eagerly and compares which inputs got a `.grad`.
"""

import itertools

import pytest
import torch
import torch.nn.functional as F
from IPython.core.error import UsageError
from ipython_shell import notebook_shell
from torch import nn

import bwd_widgets as bw
from bwd_widgets.core.errors import BwdWidgetsError
from bwd_widgets.core.kinds import MODES
from bwd_widgets.extraction.requires_grad import RULES


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


class WithLoss(nn.Module):
    """A model returning its loss beside its logits, as transformers' models do when given labels."""

    def __init__(self) -> None:
        super().__init__()
        self.net = _net()

    def forward(self, xb: torch.Tensor, yb: torch.Tensor) -> dict:
        logits = self.net(xb)
        return {"loss": F.cross_entropy(logits, yb), "logits": logits}


def _function_step():
    net = _net()
    return lambda xb, yb: F.cross_entropy(net(xb), yb)


STEPS = {"a function returning the loss": _function_step, "a module whose output holds the loss": WithLoss}


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(5, 8), torch.randint(0, 4, (5,))


def _eager_input_grads(step, xb: torch.Tensor, yb: torch.Tensor) -> set[str]:
    out = step(xb, yb)
    (out["loss"] if isinstance(out, dict) else out).backward()
    return {n for n, t in (("xb", xb), ("yb", yb)) if t.grad is not None}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("make", STEPS.values(), ids=STEPS.keys())
def test_a_data_batch_gets_no_gradient_where_the_backward_starts_from_a_loss(make, mode):
    step = make()
    xb, yb = _batch()
    extraction = bw.extract(step, xb, yb, mode=mode)
    assert {n for n in ("xb", "yb") if extraction.requires_grad[n]} == _eager_input_grads(step, xb, yb) == set()
    assert not any(g.kind == "input" for g in extraction.gradients)
    assert not any("gets a gradient" in note for note in extraction.notes), extraction.notes
    assert xb.grad is None or mode == "real"  # the eager reference above ran on xb without a gradient


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("rule", RULES)
def test_each_rule_by_name_on_a_loss_and_the_note_that_names_the_input(rule, mode):
    """ "floating" is the old default: the batch gets a gradient, and a note says which rule gave it one and how to
    give it none; "training" is the default on a loss."""
    step = _function_step()
    xb, yb = _batch()
    extraction = bw.extract(step, xb, yb, mode=mode, requires_grad=rule)
    assert extraction.requires_grad["xb"] is (rule == "floating") and extraction.requires_grad["yb"] is False
    said = [note for note in extraction.notes if "gets a gradient" in note]
    if rule == "floating":
        assert len(said) == 1 and said[0].startswith("xb gets a gradient (requires_grad='floating'")
        assert "requires_grad={'xb': False}" in said[0] and "--requires-grad training" in said[0]
        assert any(g.kind == "input" for g in extraction.gradients)
    else:
        assert said == []


@pytest.mark.parametrize("mode", MODES)
def test_where_the_backward_does_not_start_from_a_loss_floating_inputs_get_one_with_a_note(mode):
    net = _net()
    x = torch.randn(5, 8)
    extraction = bw.extract(net, x, mode=mode)
    assert extraction.requires_grad["input"] is True
    said = [note for note in extraction.notes if "gets a gradient" in note]
    assert said == [
        "input gets a gradient (every floating-point input gets one where the backward does not start from a loss; "
        "requires_grad={'input': False}, or --requires-grad training in the magic, gives a training step's data none)."
    ]


def test_a_batch_the_user_made_with_requires_grad_gets_one_on_a_loss_as_autograd_gives_it():
    step = _function_step()
    xb, yb = _batch()
    xb.requires_grad_()
    extraction = bw.extract(step, xb, yb)
    assert extraction.requires_grad["xb"] is True and "xb" in _eager_input_grads(step, xb.detach().requires_grad_(), yb)
    assert "xb gets a gradient as made (requires_grad=True)." in extraction.notes


def test_a_loss_reading_only_its_input_keeps_the_inputs_gradient_and_says_why():
    """Nothing else the call reads requires grad: the batch is what the backward differentiates."""
    extraction = bw.extract(lambda a: (a * a).sum(), torch.randn(3))
    assert extraction.requires_grad["a"] is True
    assert any(
        n.startswith("a gets a gradient (the backward starts from a loss, but nothing else") for n in extraction.notes
    )


@pytest.mark.parametrize("order", list(itertools.permutations([None, *RULES])), ids=str)
def test_each_choice_gets_its_own_trace_from_the_cache(order):
    """The trace cache keys a call by its gradients: the default and "floating" decide alike before a capture, not
    after (the default switches to the training rule on a loss), so each choice, in any order, gets its own."""
    model, (xb, yb) = WithLoss(), _batch()
    bw.clear_trace_cache()
    for choice in order:
        extraction = bw.extract(model, xb, yb, requires_grad=choice)
        assert extraction.requires_grad["xb"] is (choice == "floating"), (order, choice)
        assert ("xb" in extraction.autograd_gradients) is (choice == "floating")
        again = bw.extract(model, xb, yb, requires_grad=choice)
        assert again.partitions[0].trace is extraction.partitions[0].trace, "the same choice hits the cache"


@pytest.mark.parametrize("choice", ["train", "Floating", 3.5])
def test_a_rule_that_is_not_one_is_one_sentence(choice):
    with pytest.raises(BwdWidgetsError) as caught:
        bw.extract(_net(), torch.randn(2, 8), requires_grad=choice)
    message = str(caught.value)
    assert "\n" not in message and repr(choice) in message and "'training'" in message


@pytest.fixture(scope="module")
def shell():
    with notebook_shell(
        "import torch, torch.nn.functional as F\ntorch.manual_seed(0)\n"
        "encoder = torch.nn.Linear(8, 16)\ndecoder = torch.nn.Linear(16, 4)\n"
        "xb = torch.randn(5, 8)\nyb = torch.randint(0, 4, (5,))"
    ) as ip:
        yield ip


CELL = "loss = F.cross_entropy(decoder(encoder(xb)), yb)\n"
MAGIC_CHOICES = {
    "": False,
    "--requires-grad training": False,
    "--requires-grad floating": True,
    "--requires-grad xb": True,
}


@pytest.mark.parametrize("option, batch_gets_one", MAGIC_CHOICES.items())
def test_the_cell_magic_over_the_issues_training_step(shell, option, batch_gets_one):
    """The issue's own cell: `%%bwd_extract --output loss` over cross-entropy of the encoder-decoder on `xb`."""
    extraction = shell.run_cell_magic("bwd_extract", f"--output loss --no-display {option}", CELL)
    assert extraction.requires_grad["xb"] is batch_gets_one and extraction.requires_grad["yb"] is False
    assert all(extraction.requires_grad[f"{m}.{p}"] for m in ("encoder", "decoder") for p in ("weight", "bias"))
    assert shell.user_ns["xb"].grad is None and not shell.user_ns["xb"].requires_grad


@pytest.mark.parametrize("option, batch_gets_one", [("", True), ("--requires-grad training", False)])
def test_the_line_magic_takes_requires_grad(shell, option, batch_gets_one):
    extraction = shell.run_line_magic("bwd_extract", f"--no-display {option} encoder(xb)")
    assert extraction.requires_grad["input"] is batch_gets_one


@pytest.mark.parametrize("value", ["'x y'", "1x"])
def test_a_bad_requires_grad_option_is_one_sentence(shell, value):
    with pytest.raises(UsageError) as caught:
        shell.run_line_magic("bwd_extract", f"--no-display --requires-grad {value} encoder(xb)")
    assert "\n" not in str(caught.value) and "--requires-grad" in str(caught.value)
