"""See what PyTorch autograd does in backward: graphs, saved tensors, partitioners."""

from ._analysis import GradientOutput, SavedTensor, TensorInfo
from ._errors import (
    BwdWidgetsError,
    ExtractionFailed,
    NoDifferentiableOutputError,
    NothingRequiresGradError,
    PartitionerError,
    SampleError,
)
from ._extract import clear_trace_cache, default_requires_grad, extract
from ._extraction import BackwardExtraction, GraphPair

__all__ = [
    "BackwardExtraction",
    "BwdWidgetsError",
    "ExtractionFailed",
    "GradientOutput",
    "GraphPair",
    "NoDifferentiableOutputError",
    "NothingRequiresGradError",
    "PartitionerError",
    "SampleError",
    "SavedTensor",
    "TensorInfo",
    "clear_trace_cache",
    "default_requires_grad",
    "extract",
]

from ._graphnet import GraphNetSample, TensorMeta, load_graphnet_sample  # noqa: E402
from ._studio import Comparison, Sweep, SweepPoint, compare, diff, repartition, sweep  # noqa: E402

__all__ += [
    "Comparison", "GraphNetSample", "Sweep", "SweepPoint", "TensorMeta",
    "compare", "diff", "load_graphnet_sample", "repartition", "sweep",
]


def load_ipython_extension(shell):
    """`%load_ext bwd_widgets`: registers %bwd_extract and %%bwd_extract."""
    from ._magic import load

    load(shell)


def unload_ipython_extension(shell):
    from ._magic import unload

    unload(shell)


def __getattr__(name):
    """The widget imports ipywidgets and the built front end: load it only when asked for."""
    if name in ("BackwardGraphWidget", "show"):
        from . import _widget

        return getattr(_widget, name)
    raise AttributeError(f"module 'bwd_widgets' has no attribute {name!r}")


__all__ += ["BackwardGraphWidget", "show"]
