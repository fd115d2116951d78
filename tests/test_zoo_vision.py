"""The vision zoo (issue 17): timm and torchvision models called as their docs call them, `model(x)`.

CNNs (ResNet, ConvNeXt, MobileNetV3, EfficientNet), a vision transformer and a segmentation head, each
built with random weights (`pretrained=False`, `weights=None`), in training mode (batch norm on batch
statistics), on 32-64 px images. Runs only where torchvision imports: torch 2.14.1 with torchvision
0.29.1 (PyPI's torchvision does not load beside the local 2.13.0 CPU build); the checks live in
zoo_models.py, as for test_zoo.py.
"""

import functools

import pytest
import zoo_models as zoo

NAMES = [entry.name for entry in zoo.VISION]


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
