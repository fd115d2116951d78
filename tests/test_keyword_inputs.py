"""Keyword inputs and output choices: models called as transformers models are, `output=` as chosen."""

import pytest
import torch
import transformers
from IPython.utils.capture import capture_output
from ipython_shell import notebook_shell
from torch import nn

import bwd_widgets as bw
from bwd_widgets.core.errors import CallError, OutputChoiceError


class Tagger(nn.Module):
    """A model in transformers' shape: keyword inputs with defaults, a dict output holding its loss."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(4, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, x, mask=None, labels=None, scale: float = 1.0):
        hidden = self.embed(x).tanh() * scale
        if mask is not None:
            hidden = hidden * mask
        logits = self.head(hidden)
        out = {"logits": logits, "hidden": hidden}
        if labels is not None:
            out["loss"] = nn.functional.cross_entropy(logits, labels)
        return out


def _inputs():
    torch.manual_seed(0)
    return torch.randn(5, 4), torch.randint(0, 3, (5,))


def _replayed(extraction):
    """Gradients from running each backward graph on its own real inputs, by gradient key."""
    grads = {}
    for partition in extraction.partitions:
        for value, gradient in zip(partition.backward(*partition.backward_inputs), partition.gradients):
            grads[gradient.key] = value
    return grads


def _eager(model, pick, **inputs):
    model.zero_grad()
    leaves = {k: v.detach().requires_grad_(True) for k, v in inputs.items() if v.is_floating_point()}
    outputs = pick(model(**{**inputs, **leaves}))
    tensors = [outputs] if isinstance(outputs, torch.Tensor) else list(outputs)
    torch.autograd.backward(tensors, [torch.ones_like(t) for t in tensors])
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    grads.update({k: v.grad for k, v in leaves.items()})
    return grads


def test_keyword_inputs_give_the_loss_backward_named_by_argument():
    model, (x, labels) = Tagger(), _inputs()
    trained = bw.extract(model, x=x, labels=labels)
    assert trained.requires_grad["x"] is False, "a loss's data batch gets no gradient by default"
    extraction = bw.extract(model, x=x, labels=labels, requires_grad="floating")  # as _eager gives x one
    (partition,) = extraction.partitions
    assert [i.name for i in partition.inputs if i.kind == "input"] == ["x", "labels"]
    assert len(partition.tangents) == 1, "only the loss gets a tangent"
    assert any("the model's loss" in note for note in extraction.notes)
    expected = _eager(model, lambda out: out["loss"], x=x, labels=labels)
    replayed = _replayed(extraction)
    assert set(replayed) == set(expected)
    for key, value in replayed.items():
        torch.testing.assert_close(value, expected[key])
        torch.testing.assert_close(extraction.autograd_gradients[key], expected[key])


@pytest.mark.parametrize(
    "output, pick, tangents",
    [
        ("logits", lambda out: out["logits"], 1),
        (lambda out: out["hidden"].square().mean(), lambda out: out["hidden"].square().mean(), 1),
    ],
)
def test_output_picks_the_part_the_backward_starts_from(output, pick, tangents):
    model, (x, labels) = Tagger(), _inputs()
    extraction = bw.extract(model, x=x, labels=labels, output=output)
    (partition,) = extraction.partitions
    assert len(partition.tangents) == tangents
    assert any("the backward starts from output=" in note for note in extraction.notes)
    expected = _eager(model, pick, x=x, labels=labels)
    for key, value in _replayed(extraction).items():
        torch.testing.assert_close(value, expected[key])


def test_without_a_loss_every_differentiable_output_gets_a_tangent_and_the_note_names_them():
    model, (x, _) = Tagger(), _inputs()
    extraction = bw.extract(model, x)
    assert len(extraction.partitions[0].tangents) == 2
    assert any("logits" in note and "hidden" in note for note in extraction.notes)


def test_keywords_that_fill_leading_parameters_are_the_positional_call():
    model, (x, _) = Tagger(), _inputs()
    by_keyword, positional = bw.extract(model, x=x), bw.extract(model, x)
    assert by_keyword.partitions[0].backward_code == positional.partitions[0].backward_code
    assert [i.name for i in by_keyword.partitions[0].inputs] == [i.name for i in positional.partitions[0].inputs]


def test_fake_mode_and_reruns_take_keywords():
    model, (x, labels) = Tagger(), _inputs()
    fake = bw.extract(model, x=x, mask=torch.ones(5, 8), labels=labels, mode="fake")
    names = [i.name for i in fake.partitions[0].inputs if i.kind == "input"]
    assert names == ["x", "mask", "labels"]
    assert bw.compare(model, x=x, labels=labels, partitioners=("default", 0.5)).rows
    assert len(bw.sweep(model, x=x, labels=labels, budgets=(0.0, 1.0), progress=False).points) == 2


def test_a_model_keyword_named_like_an_option_goes_through_model_kwargs():
    class Named(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x, name=None):
            return self.lin(x) * (2.0 if name else 1.0)

    extraction = bw.extract(Named(), torch.randn(2, 4), model_kwargs={"name": "twice"}, name="mine")
    assert extraction.model_name == "mine"


def test_bad_keywords_and_outputs_are_one_sentence():
    model, (x, labels) = Tagger(), _inputs()
    with pytest.raises(CallError, match="do not fit Tagger's forward: got an unexpected keyword argument 'labelz'"):
        bw.extract(model, x=x, labelz=labels)
    with pytest.raises(OutputChoiceError, match=r"has no 'lozz' \(it has logits, hidden, loss\)"):
        bw.extract(model, x=x, labels=labels, output="lozz")


def _tiny_gpt2():
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=64, n_embd=32, n_layer=1, n_head=4, n_positions=32)
    config.loss_type = "ForCausalLM"
    return transformers.GPT2LMHeadModel(config).eval(), torch.randint(0, 64, (2, 8))


@pytest.mark.parametrize("mode", ["real", "fake"])
def test_a_transformers_model_called_as_its_docs_call_it(mode, tmp_path):
    model, ids = _tiny_gpt2()
    extraction = bw.extract(model, input_ids=ids, labels=ids, mode=mode)
    (partition,) = extraction.partitions  # one graph: the loss, no break at transformers' logging
    assert [i.name for i in partition.inputs if i.kind == "input"] == ["input_ids", "labels"]
    assert len(partition.tangents) == 1
    lines = [s.source_line for s in partition.saved_tensors if s.producer]
    assert lines and all("/transformers/" in line for line in lines), lines[:3]  # the model's own code
    assert any("modeling_gpt2.py:" in line for line in lines)
    written = extraction.save_graphnet(tmp_path, "gpt2")
    # GraphNet's extractor lists every primal in weight_meta.py (input_meta.py stays empty): by argument name
    metas = "".join(f.read_text() for f in written["train_forward"].rglob("*_meta.py"))
    assert "original_name = 'input_ids'" in metas and "original_name = 'labels'" in metas
    if mode == "real":
        model.zero_grad()
        model(input_ids=ids, labels=ids).loss.backward()
        for key, value in _replayed(extraction).items():
            torch.testing.assert_close(value, dict(model.named_parameters())[key].grad, rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def shell():
    model, ids = _tiny_gpt2()
    with notebook_shell(lm=model, ids=ids, batch={"input_ids": ids, "labels": ids}) as ip:
        yield ip


@pytest.mark.parametrize(
    "line",
    [
        "g = %bwd_extract --fake --no-display lm(input_ids=ids, labels=ids)",
        "g = %bwd_extract lm(input_ids=ids, labels=ids) --fake --no-display",
        "g = %bwd_extract --no-display --fake lm(**batch)",
    ],
)
def test_the_magic_takes_keyword_inputs_in_both_option_orders(shell, line):
    with capture_output() as captured:
        result = shell.run_cell(line)
    assert result.success, captured.stdout + captured.stderr
    (partition,) = shell.user_ns["g"].partitions
    assert [i.name for i in partition.inputs if i.kind == "input"] == ["input_ids", "labels"]
    assert len(partition.tangents) == 1


def test_the_line_magic_output_option_picks_a_part(shell):
    with capture_output() as captured:
        result = shell.run_cell("g = %bwd_extract --fake --no-display --output logits lm(input_ids=ids, labels=ids)")
    assert result.success, captured.stdout + captured.stderr
    assert any("output='logits'" in note for note in shell.user_ns["g"].notes)


class LossDict(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(4, 3)

    def forward(self, x, labels):
        logits = self.head(x)
        return {"logits": logits, "loss": nn.functional.cross_entropy(logits, labels)}


@pytest.mark.parametrize("route", ["fx", "dynamo"])
def test_both_routes_start_the_backward_from_the_loss(route):
    model, (x, labels) = LossDict(), _inputs()
    if route == "dynamo":
        model.register_forward_hook(lambda module, args, out: None)  # a hook: torch.fx does not take it
    extraction = bw.extract(model, x, labels)
    (partition,) = extraction.partitions
    assert len(partition.tangents) == 1
    assert any("the model's loss" in note for note in extraction.notes)
    expected = _eager(model, lambda out: out["loss"], x=x, labels=labels)
    for key, value in _replayed(extraction).items():
        torch.testing.assert_close(value, expected[key])
