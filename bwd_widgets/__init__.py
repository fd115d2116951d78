"""See what PyTorch autograd does in backward: graphs, saved tensors, partitioners.

This module is the public façade. The layers are folders, each importing only those below it:
`core` (torch only) and `examples` < `graphnet` < `extraction` < `studio`, `batch` (the operations) < `views` <
`jupyter`; `cli` sits beside the views and uses the operations (docs/architecture.md).
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.machinery
import sys
from typing import TYPE_CHECKING, cast

from .batch import extract_many
from .core.analysis import GradientOutput, SavedTensor, TensorInfo
from .core.compat import UntestedTorchWarning, check_torch_version
from .core.errors import (
    AdviceError,
    BatchError,
    BwdWidgetsError,
    CallError,
    ExtractionFailed,
    FrontEndNotBuiltError,
    MeasureNeedsRealModeError,
    NoDifferentiableOutputError,
    NothingRequiresGradError,
    OutputChoiceError,
    OutputError,
    PartitionerError,
    SampleError,
    SamplePassError,
    SnapshotError,
    TraceError,
    ValidationError,
)
from .core.kinds import InputSource
from .core.memory_snapshot import MemorySnapshot, iter_memory_snapshot, load_memory_snapshot
from .core.partitioners import Partitioner, partitioner_names, register_partitioner
from .core.trace import Partition, Trace
from .extraction import extract as extractor
from .extraction.display_hook import set_provider
from .extraction.extract import clear_trace_cache, default_requires_grad
from .extraction.loaded_trace import TraceLoad, TraceRegion, load_trace
from .extraction.result import BackwardExtraction
from .graphnet.sample import GraphNetSample, TensorMeta, load_graphnet_sample
from .graphnet.validate import Validation, graph_hash, validate_sample
from .studio.advisor import Advice, Plan, advise
from .studio.compare import Comparison, Sweep, SweepPoint, compare, diff, sweep
from .views import plot

if TYPE_CHECKING:
    import types
    from collections.abc import Callable
    from pathlib import Path

    from IPython.core.interactiveshell import InteractiveShell

    from .jupyter.widget import BackwardGraphWidget

__all__ = [
    "Advice",
    "BackwardExtraction",
    "BackwardGraphWidget",
    "BatchError",
    "BwdWidgetsError",
    "CallError",
    "AdviceError",
    "Comparison",
    "ExtractionFailed",
    "FrontEndNotBuiltError",
    "GradientOutput",
    "GraphNetSample",
    "InputSource",
    "NoDifferentiableOutputError",
    "NothingRequiresGradError",
    "OutputChoiceError",
    "OutputError",
    "Partition",
    "Partitioner",
    "MeasureNeedsRealModeError",
    "MemorySnapshot",
    "PartitionerError",
    "Plan",
    "SampleError",
    "SamplePassError",
    "SnapshotError",
    "SavedTensor",
    "Sweep",
    "SweepPoint",
    "TensorInfo",
    "TensorMeta",
    "Trace",
    "TraceError",
    "TraceLoad",
    "TraceRegion",
    "UntestedTorchWarning",
    "Validation",
    "ValidationError",
    "advise",
    "clear_trace_cache",
    "compare",
    "default_requires_grad",
    "diff",
    "extract",
    "extract_many",
    "graph_hash",
    "iter_memory_snapshot",
    "load_graphnet_sample",
    "load_memory_snapshot",
    "load_trace",
    "partitioner_names",
    "plot",
    "register_partitioner",
    "save_svg",
    "show",
    "sweep",
    "to_dot",
    "to_html",
    "validate_sample",
]


def to_dot(extraction: BackwardExtraction, graph_index: int = 0) -> str:
    """The backward graph as Graphviz DOT text, clustered by module."""
    from .views.dot import to_dot

    return to_dot(extraction, graph_index)


def save_svg(extraction: BackwardExtraction, path: str | Path, graph_index: int = 0) -> Path:
    """A static SVG through Graphviz's `dot` program (apt install graphviz)."""
    from .views.dot import save_svg

    return save_svg(extraction, path, graph_index)


def to_html(extraction: BackwardExtraction, path: str | Path, graph_index: int = 0) -> Path:
    """One self-contained HTML file with the same viewer: no kernel, no network."""
    from .views.html import to_html

    return to_html(extraction, path, graph_index)


def show(target: object, *example_inputs: object, **extract_kwargs: object) -> BackwardGraphWidget:
    """The widget for an extraction, a comparison, a sweep, an advice, or `show(model, *inputs, **extract_kwargs)`
    (which keeps the model, so the partitions tab can advise)."""
    from .jupyter.widget import show

    return show(target, *example_inputs, **extract_kwargs)


@functools.wraps(extractor.extract)
def extract(model: object, *example_inputs: object, **options: object) -> BackwardExtraction:
    # `extractor.extract`; in a Jupyter kernel the cell shows the stage and seconds while it runs, in an
    # output emptied at the end (jupyter/progress.py passing_status): a big model is tens of seconds of silence
    # otherwise, and a notebook keeps nothing of it.
    from .jupyter.progress import passing_status

    with passing_status(model, options.get("mode", "real"), cast("str | None", options.get("name"))):
        return extractor.extract(model, *example_inputs, **options)  # type: ignore[arg-type]


def load_ipython_extension(shell: InteractiveShell) -> None:
    """`%load_ext bwd_widgets`: registers %bwd_extract and %%bwd_extract."""
    from .jupyter.magic import load

    load(shell)


def unload_ipython_extension(shell: InteractiveShell) -> None:
    from .jupyter.magic import unload

    unload(shell)


def _display_of(obj: object) -> Callable[[], object] | None:
    """Results that end a cell in a Jupyter kernel show as the widget (the Jupyter layer decides)."""
    from .jupyter.display import display_of

    return display_of(obj)


set_provider(_display_of)
check_torch_version()  # one warning, not an error, when torch is outside the tested range


def __getattr__(name: str) -> object:
    """The widget class imports ipywidgets and the built front end: load it only when asked for (without a built
    front end, FrontEndNotBuiltError says so in one sentence)."""
    if name == "BackwardGraphWidget":
        from .jupyter.widget import BackwardGraphWidget

        return BackwardGraphWidget
    raise AttributeError(f"module 'bwd_widgets' has no attribute {name!r}")


# Module paths from before the layers became folders: `import bwd_widgets.graphnet_pass` (GraphNet's driver loads
# the sample pass by its file) and the like still work, and give the module that moved.
MOVED_MODULES = {
    "bwd_widgets.extractor": "bwd_widgets.extraction.extract",
    "bwd_widgets.trace_cache": "bwd_widgets.extraction.cache",
    "bwd_widgets.requires_grad": "bwd_widgets.extraction.requires_grad",
    "bwd_widgets.display_hook": "bwd_widgets.extraction.display_hook",
    "bwd_widgets.graphnet_files": "bwd_widgets.graphnet.files",
    "bwd_widgets.graphnet_writer": "bwd_widgets.graphnet.writer",
    "bwd_widgets.graphnet_validate": "bwd_widgets.graphnet.validate",
    "bwd_widgets.graphnet_pass": "bwd_widgets.batch.sample_pass",
    "bwd_widgets.forked": "bwd_widgets.studio.forked",
    "bwd_widgets.advisor": "bwd_widgets.studio.advisor",
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old module path and loads it as the module now at the new one."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        old = next((o for o in MOVED_MODULES if fullname == o or fullname.startswith(o + ".")), None)
        if old is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=fullname == old)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        old = next(o for o in MOVED_MODULES if spec.name == o or spec.name.startswith(o + "."))
        return importlib.import_module(MOVED_MODULES[old] + spec.name[len(old) :])

    def exec_module(self, module: types.ModuleType) -> None:
        """The module is the moved one, already run."""


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModules())
