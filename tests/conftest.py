import pytest

from shared_data import shared_path


@pytest.fixture(scope="session")
def conv_bn_dir():
    return shared_path("reference", "conv_bn")


@pytest.fixture(scope="session")
def samples_dir():
    return shared_path("graphnet_samples")


@pytest.fixture(scope="session")
def course_models():
    """The course's small models, extracted once under the default partitioner: tests re-partition them
    with `rerun`, which leaves these extractions as they are."""
    import torch

    import bwd_widgets as bw
    from bwd_widgets.examples import MLP, Block, ConvBN, Transformer

    from models import GraphBreak

    torch.manual_seed(0)
    return {
        "MLP": bw.extract(MLP(width=16, depth=4), torch.randn(8, 16)),
        "Block": bw.extract(Block(width=32), torch.randn(2, 16, 32)),
        "Transformer": bw.extract(Transformer(width=32, depth=2), torch.randint(0, 64, (4, 32))),
        "ConvBN": bw.extract(ConvBN(), torch.randn(2, 3, 16, 16)),
        "GraphBreak": bw.extract(GraphBreak(), torch.randn(3, 4)),
    }
