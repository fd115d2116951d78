"""GraphNet's validation of a written sample, in this process, and the `graph_hash.txt` it writes.

`python -m graph_net.torch.validate` checks a sample in three processes (`graph_net.torch.single_device_runner`):
it runs as one Dynamo graph with no break; it re-extracts (Dynamo traces it again, GraphNet's extractor
renames the placeholders and writes the code, whose sha256 becomes `graph_hash.txt`, the key of GraphNet's
duplicate checks); the re-extracted sample runs as one graph too. We take the same steps where the sample
was written, one Dynamo trace serving the first two (the graph count and break reasons `torch._dynamo.explain`
reports, read from the same graphs, without its reset of every compiled model in the process).

When GraphNet is importable its own extractor and loaders do the work, so its hash cannot drift from ours;
otherwise our implementation below, which a test holds equal to GraphNet's on real samples.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypedDict

import torch

from ..core.capture import own_dynamo_entries
from ..core.codegen import graphnet_model_code
from ..core.compat import dynamo_config
from ..core.errors import ValidationError, one_line
from .files import sample_files
from .sample import load_graphnet_sample

if TYPE_CHECKING:
    from collections.abc import Callable

HASH_FILE = "graph_hash.txt"
GRAPHNET_DYNAMO_CONFIG = {
    "capture_scalar_outputs": True,
    "capture_dynamic_output_shape_ops": True,
    "capture_sparse_compute": True,
    "raise_on_ctx_manager_usage": False,
    "allow_rnn": True,
}
"""What importing GraphNet's extractor sets in `torch._dynamo.config`, so its validator traces under it too."""
STABLE_API_REPLACEMENTS = (
    (r"torch\._C\._nn\.avg_pool2d\(", "torch.nn.functional.avg_pool2d("),
    (r"torch\._C\._fft\.fft_irfft\(", "torch.fft.irfft("),
    (r"torch\._C\._fft\.fft_rfft\(", "torch.fft.rfft("),
    (r"torch\._C\._fft\.fft_fftn\(", "torch.fft.fftn("),
    (r"torch\._C\._special\.special_logit\(", "torch.special.logit("),
    (r"torch\._C\._linalg\.linalg_vector_norm\(", "torch.linalg.vector_norm("),
    (r"torch\._C\._linalg\.linalg_norm\(", "torch.linalg.norm("),
    (r"torch\._C\._nn\.softplus\(", "torch.nn.functional.softplus("),
    (r"torch\._C\._nn\.one_hot\(", "torch.nn.functional.one_hot("),
    (r"torch\._C\._set_grad_enabled\(", "torch.set_grad_enabled("),
    (r"torch\._C\.set_grad_enabled\(", "torch.set_grad_enabled("),
    (r"torch\._C\._nn\.pad\(", "torch.nn.functional.pad("),
    (r"torch\._C\._nn\.gelu\(", "torch.nn.functional.gelu("),
    (r"torch\._C\._nn\.scaled_dot_product_attention\(", "torch.nn.functional.scaled_dot_product_attention("),
    (r"torch\._C\._nn\.linear\(", "torch.nn.functional.linear("),
)
"""GraphNet's `serialize_graph_module_to_str`: private torch calls in Dynamo's code written as public ones."""


Outcome = Literal["passed", "failed"]
"""A written sample's result under GraphNet's validation steps: every folder passed, or one failed."""


class ValidationRecord(TypedDict, total=False):
    """What a batch record says of a sample's validation (`Validator.record`)."""

    validation: Outcome
    validated_folders: int
    validated_by: list[str]
    validation_failures: list[str]
    """One line per folder that failed; absent when all passed."""


@dataclass(frozen=True)
class Validation:
    """The outcome of GraphNet's validation steps on one sample folder."""

    folder: Path
    passed: bool
    graph_hash: str | None = None
    failure: str | None = None
    """One sentence: the step that failed and why."""
    by: str = "bwd_widgets"
    """Whose implementation ran the steps: 'graph_net' when GraphNet is importable, else 'bwd_widgets'."""


def graphnet_available() -> bool:
    """GraphNet's package is importable here (then its own extractor and loaders are used)."""
    try:
        return importlib.util.find_spec("graph_net.torch.extractor") is not None
    except (ImportError, ValueError):
        return False


# --- the placeholder renaming and code GraphNet's extractor writes ------------------------------------


def serialize_code(code: str) -> str:
    """GraphNet's `serialize_graph_module_to_str`, on the code of a graph module."""
    for pattern, replacement in STABLE_API_REPLACEMENTS:
        code = re.sub(pattern, replacement, code)
    return code


def rename_for_hash(gm: torch.fx.GraphModule) -> None:
    """As GraphNet's extractor with `placeholder_auto_rename`: placeholders become v0/v1, v2/v3, ... (target/name),
    and autocast entries and exits are dropped."""
    unique_id = 0
    for node in list(gm.graph.nodes):
        if node.op == "placeholder":
            node.target = f"v{unique_id}"
            unique_id += 1
            node.name = f"v{unique_id}"
            unique_id += 1
        if node.op == "call_function" and getattr(node.target, "__name__", None) in (
            "_enter_autocast",
            "_exit_autocast",
        ):
            node.replace_all_uses_with(node.args[0])
            gm.graph.erase_node(node)


def _write_reextraction(gm: torch.fx.GraphModule, example_inputs: list, folder: Path) -> str:
    """Our stand-in for GraphNet's extractor: rename, write the sample into `folder`, return the hashed code."""
    rename_for_hash(gm)
    code = serialize_code(gm.code)
    names, values = [], []
    inputs = iter(example_inputs)
    for node in gm.graph.find_nodes(op="placeholder"):
        value = next(inputs)
        names.append(str(node.target))
        values.append(torch.tensor(4) if isinstance(value, torch.SymInt) else value)
    folder.mkdir(parents=True, exist_ok=True)
    for file_name, text in sample_files(graphnet_model_code(code), names, values, {}).items():
        (folder / file_name).write_text(text)
    info = {"framework": "torch", "num_devices_required": 1, "num_nodes_required": 1, "dynamic": False}
    (folder / "graph_net.json").write_text(json.dumps({**info, "model_name": folder.name}, indent=4))
    return code


# --- loading and tracing a sample -----------------------------------------------------------------------


def _load(folder: Path, use_graphnet: bool) -> tuple[torch.nn.Module, dict[str, object]]:
    """The sample's module and its inputs by argument name, loaded as GraphNet's runner loads them."""
    if use_graphnet:
        from graph_net.torch import utils
        from graph_net.torch.single_device_runner import load_class_from_file

        model = load_class_from_file(str(folder / "model.py"), class_name="GraphModule")()
        weights = utils.load_converted_from_text(str(folder))["weight_info"]
        return model, {name: utils.replay_tensor(info) for name, info in weights.items()}
    sample = load_graphnet_sample(folder)
    inputs = (t.contiguous() if isinstance(t, torch.Tensor) else t for t in sample.inputs)  # as GraphNet builds them
    return sample.module, dict(zip((meta.name for meta in sample.metas), inputs))


def _trace(model: torch.nn.Module, inputs: dict, then: Callable | None = None) -> int:
    """Run `model` once under Dynamo; refuse more than one graph or any break, as GraphNet's runner does.

    `then(gm, example_inputs)` sees each graph Dynamo makes. Returns how many graphs there were.
    """
    graphs, breaks = [], []

    def backend(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        graphs.append(gm)
        reason = getattr(gm, "compile_subgraph_reason", None)
        if reason is not None and reason.graph_break:
            breaks.append(reason)
        result = then(gm, example_inputs) if then is not None else None
        return result if callable(result) else gm.forward

    with own_dynamo_entries():
        torch.compile(model, backend=backend, dynamic=False)(**inputs)
    if len(graphs) != 1 or breaks:
        why = "; ".join(one_line(getattr(b, "reason", b)) for b in breaks[:2])
        raise ValidationError(
            f"it does not run as one graph: Dynamo made {len(graphs)} graph(s){f' ({why})' if why else ''}."
        )
    return len(graphs)


def _first_output(model: torch.nn.Module, inputs: dict) -> None:
    """As GraphNet's runner reads a sample's result: the first of the tuple, through argmin and argmax."""
    first = model(**inputs)[0]
    torch.argmin(first), torch.argmax(first)


def _hash_and_reextract(model: torch.nn.Module, inputs: dict, workspace: Path, use_graphnet: bool) -> tuple[str, Path]:
    """Step 2: trace with the extractor that renames placeholders; returns the hash and the re-extracted folder."""
    codes: list[str] = []
    if use_graphnet:
        from graph_net.torch.extractor import GraphExtractor

        extractor = GraphExtractor(
            name="temp",
            dynamic=False,
            mut_graph_codes=codes,
            placeholder_auto_rename=True,
            workspace_path=str(workspace),
        )

        def then(gm: torch.fx.GraphModule, example_inputs: list) -> Callable | None:
            with contextlib.redirect_stdout(io.StringIO()):  # it prints a line per graph
                compiled: Callable | None = extractor(gm, example_inputs)
            return compiled
    else:

        def then(gm: torch.fx.GraphModule, example_inputs: list) -> Callable | None:
            codes.append(_write_reextraction(gm, example_inputs, workspace / "temp"))
            return None

    _trace(model, inputs, then)
    return hashlib.sha256(codes[0].encode()).hexdigest(), workspace / "temp"


def _steps(folder: Path, use_graphnet: bool) -> str:
    """GraphNet's three validation steps on `folder`; returns the graph hash, raises ValidationError."""
    step = "load it"
    try:
        model, inputs = _load(folder, use_graphnet)
        step = "run it as one graph and re-extract it"
        with tempfile.TemporaryDirectory(prefix="bwd_widgets_validate_") as workspace:
            graph_hash, reextracted = _hash_and_reextract(model, inputs, Path(workspace), use_graphnet)
            _first_output(model, inputs)
            step = "run the re-extracted sample"
            again, again_inputs = _load(reextracted, use_graphnet)
            _trace(again, again_inputs)
            _first_output(again, again_inputs)
    except ValidationError:
        raise
    except Exception as error:  # noqa: BLE001 - a sample's own failure, in one sentence
        raise ValidationError(f"could not {step}: {one_line(error)}") from None
    return graph_hash


def _graphnet_context() -> contextlib.AbstractContextManager:
    """Trace under GraphNet's Dynamo settings, and undo what importing GraphNet sets globally."""
    patched: contextlib.AbstractContextManager = dynamo_config.patch(GRAPHNET_DYNAMO_CONFIG)
    return patched


def validate_sample(folder: str | Path, *, write_hash: bool = True, use_graphnet: bool | None = None) -> Validation:
    """Run GraphNet's validation steps on a sample folder; on success write its `graph_hash.txt` as GraphNet does.

    use_graphnet: None to use GraphNet's own code when it is importable; True or False to choose.
    """
    folder = Path(folder)
    chosen = graphnet_available() if use_graphnet is None else use_graphnet
    by = "graph_net" if chosen else "bwd_widgets"
    with _graphnet_context():
        try:
            graph_hash = _steps(folder, chosen)
        except ValidationError as error:
            return Validation(folder, False, failure=str(error), by=by)
    if write_hash:
        (folder / HASH_FILE).write_text(graph_hash)
    return Validation(folder, True, graph_hash=graph_hash, by=by)


def graph_hash(folder: str | Path, *, use_graphnet: bool | None = None) -> str:
    """The `graph_hash.txt` GraphNet's validator writes for a sample folder (raises ValidationError if it fails)."""
    outcome = validate_sample(folder, write_hash=False, use_graphnet=use_graphnet)
    if not outcome.passed:
        raise ValidationError(f"{folder}: {outcome.failure}")
    assert outcome.graph_hash is not None
    return outcome.graph_hash


class Validator:
    """Validates each folder a writer hands it (`write_sample(check=...)`), keeping every outcome."""

    def __init__(self, use_graphnet: bool | None = None):
        self.use_graphnet = use_graphnet
        self.outcomes: list[Validation] = []

    def __call__(self, folder: Path) -> None:
        self.outcomes.append(validate_sample(folder, use_graphnet=self.use_graphnet))

    def record(self, relative_to: Path) -> ValidationRecord:
        """What a batch record says: passed or failed, how many folders, and each failure in one line."""
        failures = [
            f"{o.folder.relative_to(relative_to).as_posix()}: {o.failure}" for o in self.outcomes if not o.passed
        ]
        result: ValidationRecord = {
            "validation": "failed" if failures else "passed",
            "validated_folders": len(self.outcomes),
            "validated_by": sorted({o.by for o in self.outcomes}),
        }
        if failures:
            result["validation_failures"] = failures
        return result


def validate_or_raise(folder: Path) -> None:
    """A writer's check (`write_sample(check=...)`): validate, or stop the write with one sentence."""
    outcome = validate_sample(folder)
    if not outcome.passed:
        raise ValidationError(f"the sample {folder.name} failed GraphNet's validation: {outcome.failure}")
