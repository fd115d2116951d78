"""Tied and shared parameters: one gradient each, counted once, named by the model's first name for it
(the others listed as aliases), on the torch.fx and the Dynamo route, in real and fake mode."""

import pytest
import torch
from torch import nn

import bwd_widgets as bw
from bwd_widgets.core.capture import CaptureSession, own_dynamo_entries
from bwd_widgets.core.naming import TensorNames, data_key, nested_argument, wrapper_argument
from bwd_widgets.core.partitioners import resolve_partitioner
from bwd_widgets.views.payload import graph_payload


class Tied(nn.Module):
    """An embedding whose weight is also the output layer's (`o.weight = e.weight`)."""

    def __init__(self):
        super().__init__()
        self.e = nn.Embedding(10, 4)
        self.l = nn.Linear(4, 4)
        self.o = nn.Linear(4, 10, bias=False)
        self.o.weight = self.e.weight

    def forward(self, x):
        return self.o(torch.tanh(self.l(self.e(x))))


class Shared(nn.Module):
    """One Linear reached at two paths (`a` and `b`), called twice."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = self.a

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def _gradient_keys(extraction):
    return [g.key for p in extraction.partitions for g in p.gradients]


# capture_scalars=False leaves torch.fx out: Dynamo's route
ROUTES = [pytest.param(True, id="fx"), pytest.param(False, id="dynamo")]


@pytest.mark.parametrize("fx", ROUTES)
@pytest.mark.parametrize("mode", ["real", "fake"])
def test_tied_weight_has_one_gradient_named_first(fx, mode):
    torch.manual_seed(0)
    model = Tied()
    extraction = bw.extract(model, torch.randint(0, 10, (2, 3)), mode=mode, capture_scalars=fx)
    partition = extraction.partitions[0]
    kinds = [s.kind for s in partition.inputs]
    if fx:  # torch.fx's primals: parameters first, then the arguments
        assert kinds == ["parameter"] * 3 + ["input"]
    keys = _gradient_keys(extraction)
    assert sorted(keys) == sorted(dict(model.named_parameters())) == ["e.weight", "l.bias", "l.weight"]
    (tied,) = [g for g in partition.gradients if g.key == "e.weight"]
    assert tied.grad_of == "e.weight" and tied.aliases == ("o.weight",)
    (source,) = [s for s in partition.inputs if s.name == "e.weight"]
    assert source.aliases == ("o.weight",)
    if mode == "real":
        assert set(keys) == set(extraction.autograd_gradients)
        outputs = partition.backward(*partition.backward_inputs)
        for output, gradient in zip(outputs, partition.gradients):
            torch.testing.assert_close(output, extraction.autograd_gradients[gradient.key])


@pytest.mark.parametrize("fx", ROUTES)
def test_tied_weight_on_the_meta_device(fx):
    """Meta-device weights, faked once per tensor: one fake for both names, kept a parameter."""
    with torch.device("meta"):
        model = Tied()
    extraction = bw.extract(model, torch.randint(0, 10, (2, 3)), mode="fake", capture_scalars=fx)
    partition = extraction.partitions[0]
    if fx:
        assert [s.kind for s in partition.inputs] == ["parameter"] * 3 + ["input"]
    assert {g.key: g.aliases for g in partition.gradients} == {"e.weight": ("o.weight",), "l.weight": (), "l.bias": ()}
    assert model.o.weight is model.e.weight and model.e.weight.is_meta


@pytest.mark.parametrize("fx", ROUTES)
def test_tied_weight_counts_once_in_saved_bytes(fx):
    model = Tied()
    extraction = bw.extract(model, torch.randint(0, 10, (2, 3)), capture_scalars=fx)
    partition = extraction.partitions[0]
    inputs = [s for s in partition.saved_tensors if not s.is_activation and s.kind != "symint"]
    sources = [s.source for s in inputs]
    assert len(sources) == len(set(sources))
    assert partition.saved_input_bytes == sum(s.bytes for s in inputs)
    # views of the tied weight (Linear's t(weight)) add nothing on top of it
    views = [s for s in partition.saved_tensors if s.alias_of == "e.weight"]
    assert all(s.activation_bytes == 0 for s in views)
    for saved in inputs:
        if saved.source == "e.weight":
            assert saved.source_aliases == ("o.weight",)


class TiedProduct(nn.Module):
    """The tied weight saved as itself: `mul`'s backward for `h` needs it."""

    def __init__(self):
        super().__init__()
        self.e = nn.Embedding(10, 4)
        self.o = nn.Linear(4, 10, bias=False)
        self.o.weight = self.e.weight

    def forward(self, x):
        return (self.e(x).tanh().unsqueeze(-2) * self.o.weight).sum(-1)


@pytest.mark.parametrize("fx", ROUTES)
def test_the_widget_names_a_saved_tied_weight_by_both_names(fx):
    extraction = bw.extract(TiedProduct(), torch.randint(0, 10, (2, 3)), capture_scalars=fx)
    rows = [row for row in graph_payload(extraction)["saved"] if row["source"] == "e.weight"]
    assert rows and all(row["source_aliases"] == ["o.weight"] for row in rows)
    assert all(row["source_aliases"] == [] for row in graph_payload(extraction)["saved"] if row["source"] == "x")


@pytest.mark.parametrize("fx", ROUTES)
def test_module_shared_at_two_paths(fx):
    torch.manual_seed(0)
    model = Shared()
    extraction = bw.extract(model, torch.randn(3, 4), capture_scalars=fx)
    partition = extraction.partitions[0]
    assert sorted(_gradient_keys(extraction)) == ["a.bias", "a.weight", "x"] == sorted(extraction.autograd_gradients)
    aliases = {g.key: g.aliases for g in partition.gradients}
    assert aliases == {"a.weight": ("b.weight",), "a.bias": ("b.bias",), "x": ()}
    outputs = partition.backward(*partition.backward_inputs)
    for output, gradient in zip(outputs, partition.gradients):
        torch.testing.assert_close(output, extraction.autograd_gradients[gradient.key])


def test_tensor_names_first_name_wins():
    model = Tied()
    names = TensorNames(model)
    assert names.lookup(model.o.weight) == ("parameter", "e.weight", ("o.weight",))
    assert names.lookup(model.l.bias) == ("parameter", "l.bias", ())
    assert names.lookup(torch.zeros(1)) is None and names.lookup(3) is None
    assert names.tied() == {id(model.e.weight)}


def _captured_inputs(session, compiled, *args, **kwargs):
    with torch._functorch.config.patch(force_non_lazy_backward_lowering=True), own_dynamo_entries():
        compiled(*args, **kwargs)
    session.finish()
    return session.regions[0].trace.inputs


def test_a_wrapper_is_named_by_the_users_model():
    """Compiled through a wrapper (Sequential, a closure), parameters keep the user's model's names."""
    inner = Tied()
    wrapper = nn.Sequential(inner)
    session = CaptureSession(resolve_partitioner("default"), False, module=inner)
    inputs = _captured_inputs(session, session.compile_dynamo(wrapper), torch.randint(0, 10, (2, 3)))
    assert {s.name for s in inputs if s.kind == "parameter"} == {"e.weight", "l.weight", "l.bias"}
    assert all(s.key == s.name for s in inputs if s.kind == "parameter")

    session = CaptureSession(resolve_partitioner("default"), False, module=inner)
    inputs = _captured_inputs(session, session.compile_dynamo(lambda x: inner(x)), torch.randint(0, 10, (2, 3)))
    assert {s.name for s in inputs if s.kind == "parameter"} == {"e.weight", "l.weight", "l.bias"}


GLOBAL_MODEL = Tied()


def _calls_the_global(x):
    return GLOBAL_MODEL(x)


def test_a_global_model_is_named_as_itself():
    session = CaptureSession(resolve_partitioner("default"), False, module=GLOBAL_MODEL)
    inputs = _captured_inputs(session, session.compile_dynamo(_calls_the_global), torch.randint(0, 10, (2, 3)))
    assert {s.name for s in inputs if s.kind == "parameter"} == {"e.weight", "l.weight", "l.bias"}


class WithLabels(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 4)

    def forward(self, x, mask=None, labels=None):
        return (self.l(x) - labels).pow(2).mean()


def test_wrapper_arguments_are_named_by_the_signature_and_keywords():
    model = WithLabels()
    session = CaptureSession(resolve_partitioner("default"), False, signature=["x", "mask", "labels"], module=model)

    def select(*args, **kwargs):
        return model(*args, **kwargs)

    x, labels = torch.randn(2, 4, requires_grad=True), torch.randn(2, 4, requires_grad=True)
    inputs = _captured_inputs(session, session.compile_dynamo(select), x, labels=labels)
    named = {(s.kind, s.name, s.key) for s in inputs}
    assert named == {
        ("parameter", "l.weight", "l.weight"),
        ("parameter", "l.bias", "l.bias"),
        ("input", "x", "x"),
        ("input", "labels", "labels"),
    }


def test_an_alias_of_an_argument_is_that_argument():
    """A compiled region hands an input on as a new alias of it: the same elements, so the same name."""
    x = torch.randn(2, 3)
    assert data_key(x.view_as(x)) == data_key(x)
    assert data_key(x.clone()) != data_key(x) and data_key(x[:1]) != data_key(x)


def test_wrapper_argument_names():
    signature = ["input_ids", "attention_mask"]
    assert wrapper_argument("L['args'][1]", signature) == "attention_mask"
    assert wrapper_argument("L['args'][3]", signature) == "input_3"
    assert wrapper_argument("L['kwargs']['labels']", signature) == "labels"
    assert wrapper_argument("L['x']", signature) is None
    # a decorator's wrapper(*args) compiled on its own after a graph break: not the model's arguments
    assert nested_argument("L['args'][0]") == "args[0]" and nested_argument("L['x']") is None


def _transformers():
    return pytest.importorskip("transformers")  # the test extra


def _tiny_llama(layers=2):
    transformers = _transformers()
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    with torch.device("meta"):
        return transformers.LlamaForCausalLM(config)


def test_meta_device_tied_llama_in_fake_mode():
    model = _tiny_llama()
    assert model.lm_head.weight is model.model.embed_tokens.weight and model.lm_head.weight.is_meta
    extraction = bw.extract(model, torch.randint(0, 64, (2, 8)), mode="fake")
    keys = _gradient_keys(extraction)
    assert len(keys) == len(set(keys))
    assert set(keys) == set(dict(model.named_parameters()))
    tied = [g for p in extraction.partitions for g in p.gradients if g.aliases]
    assert [(g.key, g.aliases) for g in tied] == [("model.embed_tokens.weight", ("lm_head.weight",))]
    assert model.lm_head.weight.is_meta  # the model's own tensors are back


def test_meta_device_tied_gpt2_in_fake_mode():
    transformers = _transformers()
    config = transformers.GPT2Config(vocab_size=64, n_embd=32, n_layer=1, n_head=4, n_positions=64)
    with torch.device("meta"):
        model = transformers.GPT2LMHeadModel(config)
    extraction = bw.extract(model, torch.randint(0, 64, (2, 8)), mode="fake")
    keys = _gradient_keys(extraction)
    assert sorted(keys) == sorted(dict(model.named_parameters()))


@pytest.mark.parametrize("name", ["t5", "roberta"])
def test_tied_transformers_models_named_as_autograd_names_them(name):
    """Dynamo reaches T5's shared embedding as `encoder.embed_tokens.weight` and RoBERTa's bias as
    `lm_head.decoder.bias`; the model (and autograd's gradients) call them `shared.weight`, `lm_head.bias`."""
    transformers = _transformers()
    torch.manual_seed(0)
    ids = torch.randint(0, 64, (2, 8))
    if name == "t5":
        config = transformers.T5Config(
            vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_heads=4, decoder_start_token_id=0
        )
        model, args = transformers.T5ForConditionalGeneration(config), (ids, None, ids)
    else:
        config = transformers.RobertaConfig(
            vocab_size=64,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=4,
            max_position_embeddings=64,
        )
        model, args = transformers.RobertaForMaskedLM(config), (ids,)
    model.eval()
    extraction = bw.extract(model, *args)
    keys = _gradient_keys(extraction)
    assert len(keys) == len(set(keys))
    assert set(keys) == set(extraction.autograd_gradients) == set(dict(model.named_parameters()))
