"""The model zoo (issue 17): real model classes as their docs call them, every check on each.

transformers: language models with and without tied weights, a mixture of experts, encoder-decoders,
masked-LM and classification encoders, a vision transformer and a speech model, each built from a small
config with random weights. timm and torchvision (with `BWD_ZOO=all`): CNNs (ResNet, ConvNeXt,
MobileNetV3, EfficientNet), a vision transformer and a segmentation head, random weights, 32-64 px
images, called `model(x)`. PyPI's torchvision does not load beside the local torch 2.13.0 CPU build, so
the vision models run in the newest-torch job (scripts/test_newest_torch.sh sets BWD_ZOO=all); the
checks live in zoo_models.py.
"""

import functools
import os

import pytest
import zoo_models as zoo

ENTRIES = zoo.TRANSFORMERS + (zoo.VISION if os.environ.get("BWD_ZOO") == "all" else [])
NAMES = [entry.name for entry in ENTRIES]


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
    zoo.check_graphnet(*real(name), tmp_path)


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
