"""The model zoo (issue 17): real model classes as their docs call them, every check on each.

transformers: language models with and without tied weights, a mixture of experts, encoder-decoders,
masked-LM and classification encoders, a vision transformer and a speech model, each built from a small
config with random weights. timm and torchvision (with `BWD_ZOO=all`): CNNs (ResNet, ConvNeXt,
MobileNetV3, EfficientNet), a vision transformer and a segmentation head, random weights, 32-64 px
images, called `model(x)`. PyPI's torchvision does not load beside the local torch 2.13.0 CPU build, so
the vision models run in the newest-torch job (scripts/test_newest_torch.sh sets BWD_ZOO=all); the
checks live in zoo_models.py.

Issue 43's second zoo adds the families that broke as their libraries' docs call them, each through every check:
recurrent language models (nn.LSTM, nn.GRU; Dynamo leaves RNNs out unless `allow_rnn`), diffusers models (outputs
registered with torch's pytree without a keys function), transformers models under
`gradient_checkpointing_enable()` (Dynamo breaks at a checkpoint with a side effect unless
`skip_fwd_side_effects_in_bwd_under_checkpoint`), speech models that set `requires_grad` on their features, and
`torch.compile(model)` handed to extract.
"""

import functools

import pytest
import torch
import zoo_models as zoo

import bwd_widgets as bw
from bwd_widgets.core.compat import dynamo_config
from bwd_widgets.core.errors import ExtractionFailed

ENTRIES = zoo.tested()
NAMES = [entry.name for entry in ENTRIES]
CHECKPOINTED = [entry.name for entry in zoo.CHECKPOINTED]


@functools.cache
def real(name):
    """One real-mode extraction per model, shared by the checks below (eager gradients computed apart)."""
    entry = zoo.BY_NAME[name]
    model, inputs = entry.make()
    extraction = zoo.extract(entry, model, inputs)
    return entry, model, inputs, extraction


@pytest.mark.parametrize("name", NAMES)
def test_backward_replayed_on_its_own_inputs_gives_eager_gradients(name):
    entry, model, inputs, extraction = real(name)
    zoo.check_replay(entry, model, inputs, extraction)


@pytest.mark.parametrize("name", NAMES)
def test_arguments_are_named_as_the_forward_names_them(name):
    zoo.check_argument_names(*real(name))


@pytest.mark.parametrize("name", NAMES)
def test_one_gradient_per_parameter_by_its_first_name(name):
    zoo.check_gradient_names(*real(name))


@pytest.mark.parametrize("name", NAMES)
def test_fake_mode_extracts_the_same_backward(name):
    zoo.check_fake(*real(name))


@pytest.mark.parametrize("name", NAMES)
def test_min_cut_at_half_budget_replays_eager_gradients(name):
    zoo.check_min_cut(*real(name))


@pytest.mark.parametrize("name", NAMES)
def test_graphnet_samples_load_back_and_run(name, tmp_path):
    extraction = real(name)[3]
    if any(_replays_a_saved_generator_state(p.backward) for p in extraction.partitions):
        pytest.xfail(  # torch 2.13 and 2.14 recompute a checkpointed region's random ops this way; 2.15 does not
            "a written sample whose backward replays a saved generator state (run_with_rng_state) fails to run: "
            "'Invalid mt19937 state', the sample's input for that state is not a valid one (issue 43)"
        )
    zoo.check_graphnet(*real(name), tmp_path)


def _replays_a_saved_generator_state(backward: torch.fx.GraphModule) -> bool:
    from bwd_widgets.core.compat import run_with_rng_state

    return any(node.target is run_with_rng_state for node in backward.graph.nodes)


@pytest.mark.parametrize("name", NAMES)
def test_widget_payload_builds(name):
    zoo.check_payload(*real(name))


def test_layerdrop_in_training_mode_leaves_gradients_outside_the_graphs_and_says_which():
    """BART in training mode draws LayerDrop's branch per layer: torch breaks the graph there and runs the
    rest of the loop eagerly, so some gradients come from no backward graph; the notes name them."""
    entry = zoo.BY_NAME["bart"]
    model, inputs = entry.make()
    extraction = zoo.extract(entry, model.train(), inputs)
    assert len(extraction.partitions) > 1
    assert extraction.gradients_outside_graphs
    assert any("come from code that ran outside every compiled region" in note for note in extraction.notes)


# Issue 43, items 14-18: what each family needs beyond the checks above.


@pytest.mark.parametrize("name", [entry.name for entry in zoo.RECURRENT])
def test_recurrent_models_have_their_rnn_in_the_graphs_and_dynamos_setting_as_it_was(name):
    """Both forward signatures of torch's word-language-model example extract, the recurrent layers inside the
    graphs. torch.compile leaves RNNs out of its graphs unless `allow_rnn` is set, whichever signature: the torch.fx
    route refuses the layer (the plain signature), so both go through Dynamo, whose hint names the setting; the
    capture sets it for its own trace only, says so, and names it in `torch_compile_settings`."""
    entry, model, inputs, extraction = real(name)
    assert dynamo_config.allow_rnn is False
    assert not extraction.gradients_outside_graphs
    assert {g.key for g in extraction.gradients} >= {n for n, _ in model.rnn.named_parameters(prefix="rnn")}
    said = [note for note in extraction.notes if "torch._dynamo.config.allow_rnn" in note]
    assert len(said) == 1, extraction.notes
    assert extraction.torch_compile_settings == {"allow_rnn": True}


@pytest.mark.parametrize("allow_rnn", [True, False])
def test_a_users_own_allow_rnn_is_kept(allow_rnn):
    """The user's setting, whichever it is, is the setting after the extraction; set by the user, no note."""
    entry = zoo.BY_NAME["lstm_lm_state"]
    model, inputs = entry.make()
    with dynamo_config.patch(allow_rnn=allow_rnn):
        extraction = zoo.extract(entry, model, inputs, mode="fake")
        assert dynamo_config.allow_rnn is allow_rnn
    assert extraction.backward_node_count > 0
    assert any("allow_rnn" in note for note in extraction.notes) is not allow_rnn


@pytest.mark.parametrize("name", [entry.name for entry in zoo.DIFFUSERS])
def test_diffusers_outputs_name_their_parts_without_a_pytree_keys_function(name):
    """diffusers' `BaseOutput` registers flatten and unflatten only: pytree refuses a key path through it
    (`Did not find a flatten_with_keys_fn`), so the capture failed on the Dynamo route; its parts are named by key,
    at the top and nested, and `output=` still picks one."""
    from bwd_widgets.core.outputs import differentiable_leaves

    entry, model, inputs, extraction = real(name)
    output = zoo.call_model(entry, model, inputs)
    assert [path for path, _ in differentiable_leaves(output)] == ["sample"]
    assert [path for path, _ in differentiable_leaves((output, [output]))] == ["[0].sample", "[1][0].sample"]
    picked = zoo.extract(entry, model, inputs, output="sample", mode="fake")
    assert picked.backward_node_count == extraction.backward_node_count


@pytest.mark.parametrize("name", [entry.name for entry in zoo.SPEECH if entry.output != "loss"])
def test_a_model_setting_requires_grad_on_its_features_is_pointed_at_requires_grad(name):
    """Wav2Vec2's feature encoder sets `requires_grad = True` on its features in training, which torch refuses on
    a tensor computed from an input that has a gradient, and where the backward does not start from a loss extract
    gives floating inputs one by default: one sentence says so and names the argument that changes it; the model
    is as it was."""
    entry = zoo.BY_NAME[name]
    model, inputs = entry.make()
    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    with pytest.raises(ExtractionFailed) as caught:
        zoo.extract(entry, model, inputs)
    message = str(caught.value)
    assert "\n" not in message and message.endswith(".") and "Traceback" not in message
    assert "requires_grad={'input_values': False}" in message and "hidden_states.requires_grad = True" in message
    assert {n: p.requires_grad for n, p in model.named_parameters()} == flags and model.training


@pytest.mark.parametrize("name", [entry.name for entry in zoo.SPEECH if entry.output == "loss"])
def test_a_speech_model_called_with_labels_extracts_as_a_training_step(name):
    """As its docs call it (labels given), the backward starts from the CTC loss: the audio batch, made without
    requires_grad, gets no gradient (issue 43, items 12 and 16), so the feature encoder's own flag is torch's to
    take, and the model is as it was."""
    entry = zoo.BY_NAME[name]
    model, inputs = entry.make()
    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    extraction = zoo.extract(entry, model, inputs)
    assert extraction.requires_grad["input_values"] is False and extraction.backward_node_count > 0
    assert "input_values" not in extraction.autograd_gradients
    assert not any(g.kind == "input" and g.key == "input_values" for g in extraction.gradients)
    assert not any("gets a gradient" in note for note in extraction.notes), extraction.notes
    assert {n: p.requires_grad for n, p in model.named_parameters()} == flags and model.training


def test_the_requires_grad_the_message_names_extracts_the_speech_model():
    entry = zoo.BY_NAME["wav2vec2"]
    model, inputs = entry.make()
    extraction = zoo.extract(entry, model, inputs, requires_grad={"input_values": False})
    assert extraction.backward_node_count > 0 and extraction.partitions
    assert not any(g.kind == "input" and g.key == "input_values" for g in extraction.gradients)


@pytest.mark.parametrize("name", CHECKPOINTED)
def test_gradient_checkpointing_is_captured_whole_and_dynamos_setting_left_as_it_was(name):
    """`gradient_checkpointing_enable()`: one compiled region holding every layer, which recomputes what the
    checkpoint tags; where Dynamo broke the graph at the checkpoint (Mixtral's layers record router logits, a side
    effect), the capture set `skip_fwd_side_effects_in_bwd_under_checkpoint` for itself, and a note says so."""
    entry, model, inputs, extraction = real(name)
    assert dynamo_config.skip_fwd_side_effects_in_bwd_under_checkpoint is False
    assert len(extraction.partitions) == 1 and not extraction.gradients_outside_graphs
    assert extraction.recomputed
    said = [n for n in extraction.notes if "torch._dynamo.config.skip_fwd_side_effects_in_bwd_under_checkpoint" in n]
    assert len(said) == (1 if name == "mixtral_moe_checkpointed" else 0), extraction.notes


@pytest.mark.parametrize("name", ["gpt2", "bert_classifier"])
def test_a_compiled_transformers_model_is_named_as_the_model(name):
    """`bw.extract(torch.compile(model), **batch)`: the module torch.compile wraps is traced, its arguments named
    as its forward names them and its parameters without `_orig_mod.`, as extracting the model itself."""
    entry, model, inputs, extraction = real(name)
    compiled = zoo.extract(entry, torch.compile(model), inputs)
    assert sorted(g.key for g in compiled.gradients) == sorted(g.key for g in extraction.gradients)
    names = {s.name for p in compiled.partitions for s in p.inputs}
    assert names == {s.name for p in extraction.partitions for s in p.inputs}
    assert not any("_orig_mod" in n for n in names) and "args" not in names
    assert compiled.backward_node_count == extraction.backward_node_count
    unnamed = bw.extract(torch.compile(model), **inputs, output=entry.output, mode="fake")
    assert unnamed.model_name == type(model).__name__
