import pytest

from shared_data import shared_path


@pytest.fixture(scope="session")
def conv_bn_dir():
    return shared_path("reference", "conv_bn")


@pytest.fixture(scope="session")
def samples_dir():
    return shared_path("graphnet_samples")
