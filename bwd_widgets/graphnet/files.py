"""The files of one GraphNet sample, as GraphNet's extractor writes them: `model.py`, the metas, `graph_net.json`.

Also the rewrites that let GraphNet's own tools run a graph we write (inputs copied into their recorded
strides, range checks on sizes passed in dropped, a boolean first output moved). Where samples go and who
owns them is `graphnet_writer`'s job.

What GraphNet's metas cannot hold: a layout. GraphNet's extractor writes none and its loaders build every
tensor contiguous; we add `stride` (its loaders ignore the key, ours builds the tensor in it) and, where the
graph is not shown to run on contiguous inputs, copy those inputs into their layout in `model.py`. Not held
by either: a storage offset, and memory shared by several elements (a 0 in `stride`: built contiguous); a graph
that reads an input's layout without failing on another (`as_strided` on an input; none in the 16 shared
samples) runs under GraphNet's loaders on other values than it recorded.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING

import torch

from ..core.codegen import copy_graph_module
from ..core.compat import op_schema, pytree
from .sample import embedding_rows

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from pathlib import Path

INLINE_DATA_LIMIT = 4096
INLINE_FLOAT_LIMIT = 64
LAYOUT_NOTE = (
    "    # stride: GraphNet's loaders ignore it and build this tensor contiguous (model.py copies it where needed)"
)
SHARED_MEMORY_NOTE = (
    "    # stride: elements share memory (a 0 step); GraphNet's loaders and ours build this tensor contiguous"
)
"""What a sample says of a layout GraphNet's metas cannot hold, above its `stride`."""
MARKER = "bwd_widgets"
"""The key in `graph_net.json` that says bwd_widgets wrote the folder: name, split, run, settings, files."""


def _literal(value: object) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return f"float('{value}')"
    return repr(value)


def _list_literal(values: Iterable[object]) -> str:
    return "[" + ", ".join(_literal(v) for v in values) + "]"


FAKE_INDEX_NOTE = (
    "    # fake mode holds no values: GraphNet's loaders draw integers in [min_val, max_val], here the rows of the "
    "embedding table it indexes"
)
FAKE_ZERO_NOTE = (
    "    # fake mode holds no values: GraphNet's loaders draw integers in [min_val, max_val], here 0, an index "
    "valid wherever it indexes"
)


_DRAWN_INTEGERS = (torch.int8, torch.int16, torch.int32, torch.int64)
"""The dtypes GraphNet's loaders draw inside `min_val`/`max_val` (and as floats without them)."""


def meta_class(name: str, value: object, original_name: str | None = None, rows: int | None = None) -> str:
    """One `Program_weight_tensor_meta_<name>` class for a real or fake value. A fake integer tensor gets a range
    (GraphNet's loaders draw integers without one as floats): the `rows` of the embedding table it indexes, else 0."""
    lines = [f"class Program_weight_tensor_meta_{name}:", f'    name = "{name}"']
    if original_name and original_name != name:
        lines.append(f"    original_name = {original_name!r}")
    if isinstance(value, torch.Tensor):
        fake = _is_fake(value)
        lines += [
            f"    shape = {list(int(s) for s in value.shape)}",
            f'    dtype = "{value.dtype}"',
            '    device = "cpu"',
        ]
        if not value.is_contiguous() and value.numel():
            lines.append(LAYOUT_NOTE if 0 not in value.stride() else SHARED_MEMORY_NOTE)
            lines.append(f"    stride = {list(value.stride())}")
        flat = None if fake else value.detach().cpu().reshape(-1)
        mean = std = data = None
        extra = []
        if flat is not None and flat.numel():
            if value.is_floating_point():
                as_float = flat.double()
                mean = round(float(as_float.mean()), 6)
                std = round(float(as_float.std()), 6) if flat.numel() > 1 else 0.0
                if std == 0.0 and bool((flat == flat[0]).all()):
                    mean = float(flat[0])  # exact: readers fill a constant tensor (all-ones tangents) from mean
                if flat.numel() <= INLINE_FLOAT_LIMIT:
                    data = flat.tolist()
            elif not value.is_complex():
                if flat.numel() <= INLINE_DATA_LIMIT:
                    data = flat.tolist()
                extra = [f"    min_val = {_literal(flat.min().item())}", f"    max_val = {_literal(flat.max().item())}"]
        if flat is None and value.dtype in _DRAWN_INTEGERS:
            extra = [
                FAKE_INDEX_NOTE if rows else FAKE_ZERO_NOTE,
                "    min_val = 0",
                f"    max_val = {max(rows or 1, 1) - 1}",
            ]
        lines += [f"    mean = {_literal(mean)}", f"    std = {_literal(std)}"]
        lines.append(f"    data = {_list_literal(data) if data is not None else None}")
        lines += extra
    else:
        lines += [
            "    shape = []",
            '    dtype = "torch.int64"',
            '    device = "cpu"',
            "    mean = None",
            "    std = None",
        ]
        lines.append(f"    data = [{int(value)}]" if isinstance(value, int) else "    data = None")
    return "\n".join(lines) + "\n"


def _is_fake(tensor: torch.Tensor) -> bool:
    from ..core.compat import FakeTensor

    return isinstance(tensor, FakeTensor) or tensor.device.type == "meta"


def sample_files(code: str, names: list, values: list, original_names: dict) -> dict[str, str]:
    """The files of one sample but `graph_net.json`, which is written last.

    As GraphNet's extractor writes them: every graph input in `weight_meta.py`, an empty `input_meta.py`
    and an empty `input_tensor_constraints.py` (static shapes have no constraints).
    """
    shapes = {n: list(v.shape) for n, v in zip(names, values) if isinstance(v, torch.Tensor)}
    rows = embedding_rows(code, shapes)
    metas = "\n\n".join(meta_class(n, v, original_names.get(n), rows.get(n)) for n, v in zip(names, values))
    return {"model.py": code, "weight_meta.py": metas, "input_meta.py": "", "input_tensor_constraints.py": ""}


def write_sample(
    directory: Path,
    code: str,
    names: list,
    values: list,
    original_names: dict,
    info: dict,
    marker: dict | None = None,
    check: Callable[[Path], None] | None = None,
) -> None:
    """Write one sample folder; `graph_net.json` last, as GraphNet's completion marker.

    `check`, if given, runs on the folder before `graph_net.json` is written (validation, which may add
    `graph_hash.txt`); the marker lists every file the folder then holds.
    """
    directory.mkdir(parents=True, exist_ok=True)
    files = sample_files(code, names, values, original_names)
    for file_name, text in files.items():
        (directory / file_name).write_text(text)
    if check is not None:
        check(directory)
    if marker is not None:
        written = sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file())
        info = {**info, MARKER: {**marker, "files": written}}
    (directory / "graph_net.json").write_text(json.dumps(info, indent=4) + "\n")


def _runs_on(gm: torch.fx.GraphModule, values: list, recorded_strides: bool) -> bool:
    """Whether the graph runs on fake inputs of these shapes, contiguous or in their recorded strides.

    Only what a non-contiguous input reaches runs (`_LayoutRun`): every other node sees what it saw when traced.
    """
    from ..core.compat import FakeTensorMode

    placeholders = gm.graph.find_nodes(op="placeholder")
    changed = {n for n, v in zip(placeholders, values) if isinstance(v, torch.Tensor) and not v.is_contiguous()}
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        try:
            _LayoutRun(gm, changed, until_recorded=not recorded_strides).run(*fake_inputs(values, recorded_strides))
        except Exception:  # noqa: BLE001 - data-dependent ops and the like: this check cannot tell
            return False
    return True


def fake_inputs(values: list, recorded_strides: bool) -> list:
    """Empty tensors of the inputs' shapes and dtypes in the ambient fake mode, contiguous or in their recorded
    strides (other values as they are)."""
    return [
        (
            torch.empty_strided(v.shape, v.stride(), dtype=v.dtype)
            if recorded_strides
            else torch.empty(v.shape, dtype=v.dtype)
        )
        if isinstance(v, torch.Tensor)
        else v
        for v in values
    ]


class _LayoutRun(torch.fx.Interpreter):
    """Runs the nodes that depend on a `changed` input; any other stands in with an empty tensor in the layout
    torch recorded for it (`meta["val"]`), made only if a node that runs reads it; a node with no such record
    runs. The graph's output is not gathered: the run is asked only whether it raises.

    until_recorded: a node whose output comes out as torch recorded it (shape, strides, dtype, device: all a
    fake tensor is) changes nothing downstream, so the inputs' new layout reaches no further through it.
    """

    def __init__(self, gm: torch.fx.GraphModule, changed: set[torch.fx.Node], until_recorded: bool = False):
        super().__init__(gm)
        self.extra_traceback = False
        self.changed, self.until_recorded = set(changed), until_recorded
        self.ran: list[torch.fx.Node] = []
        self.stand_ins: dict[torch.fx.Node, object] = {}

    def run_node(self, n: torch.fx.Node) -> object:
        if n.op == "output":
            return None
        reached = n in self.changed or any(source in self.changed for source in n.all_input_nodes)
        if not reached and _stands_in(n):
            return _Recorded(n)
        if n.op != "placeholder":
            self.ran.append(n)
        value = super().run_node(n)
        if reached and n.op != "placeholder" and not (self.until_recorded and _as_recorded(value, n.meta.get("val"))):
            self.changed.add(n)
        return value

    def fetch_args_kwargs_from_env(self, n: torch.fx.Node) -> tuple:
        args, kwargs = super().fetch_args_kwargs_from_env(n)
        made: tuple = pytree.tree_map(self._made, (args, kwargs))
        return made

    def _made(self, value: object) -> object:
        if not isinstance(value, _Recorded):
            return value
        if value.node not in self.stand_ins:
            self.stand_ins[value.node] = _stand_in(value.node.meta["val"])
        return self.stand_ins[value.node]


def _stands_in(n: torch.fx.Node) -> bool:
    """Whether a node not reached may stand in with its recorded value: an op that writes into none of its
    arguments (a write would change what a reached node reads), with a value recorded that can be made."""
    if n.op not in ("call_function", "call_method", "call_module") or "val" not in n.meta:
        return False
    schema = op_schema(n.target)
    return not (schema is not None and schema.is_mutable) and _can_stand_in(n.meta["val"])


class _Recorded:
    """A node not run: its recorded value stands in, made when a node that runs reads it."""

    __slots__ = ("node",)

    def __init__(self, node: torch.fx.Node) -> None:
        self.node = node


def _can_stand_in(value: object) -> bool:
    """Whether `_stand_in` can make a value like this recorded one (static sizes; tensors, tuples, numbers)."""
    if isinstance(value, torch.Tensor):
        return all(type(n) is int for n in (*value.shape, *value.stride()))  # symbolic sizes are the trace's own
    if isinstance(value, (tuple, list)):
        return all(_can_stand_in(v) for v in value)
    return value is None or type(value) in (int, float, bool)


def _stand_in(value: object) -> object:
    """An empty tensor like each tensor of a recorded value (tuples of them too), in the ambient fake mode."""
    if isinstance(value, torch.Tensor):
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=value.device)
    if isinstance(value, (tuple, list)):
        return type(value)(_stand_in(v) for v in value)
    return value


def _as_recorded(value: object, recorded: object) -> bool:
    """Whether a fake value has the shape, strides, offset, dtype and device torch recorded (tuples of them too)."""
    if isinstance(value, torch.Tensor) and isinstance(recorded, torch.Tensor):
        if not all(type(n) is int for n in (*recorded.shape, *recorded.stride(), recorded.storage_offset())):
            return False  # symbolic sizes belong to the trace's own shape environment
        return (value.shape, value.stride(), value.storage_offset(), value.dtype, value.device) == (
            recorded.shape,
            recorded.stride(),
            recorded.storage_offset(),
            recorded.dtype,
            recorded.device,
        )
    if isinstance(value, (tuple, list)) and isinstance(recorded, (tuple, list)) and len(value) == len(recorded):
        return all(_as_recorded(v, r) for v, r in zip(value, recorded))
    if value is None or type(value) in (int, float, bool):
        return type(value) is type(recorded) and value == recorded  # a symbolic size is never "as recorded"
    return False


def _runs_on_contiguous_copies(gm: torch.fx.GraphModule, values: list) -> bool:
    """Whether the graph runs on contiguous copies of real inputs, as GraphNet's loaders build them.

    Copies even of contiguous inputs: a forward graph writes into some (batch norm's statistics).
    """
    inputs = [
        v.detach().clone(memory_format=torch.contiguous_format) if isinstance(v, torch.Tensor) else v for v in values
    ]
    try:
        with torch.no_grad():
            gm(*inputs)
    except Exception:  # noqa: BLE001 - the layout, or anything else: only a run that succeeds proves the copy unneeded
        return False
    return True


def _layout_matters(gm: torch.fx.GraphModule, values: list) -> bool:
    """GraphNet's loaders build inputs contiguous: can the graph not be shown to run on those?

    Fake tensors tell cheaply, but not for graphs they cannot run at all (data-dependent values: a captured
    `.item()`); then real values run once on contiguous copies, and without real values (fake mode) the graph is
    taken to need its recorded layout: the copy is always safe, a graph GraphNet cannot run is not.
    """
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    if all(v.is_contiguous() for v in tensors):
        return False
    if _runs_on(gm, values, recorded_strides=False):
        return False
    if _runs_on(gm, values, recorded_strides=True):
        return True
    return any(_is_fake(v) for v in tensors) or not _runs_on_contiguous_copies(gm, values)


def _is_bool_tensor(value: object) -> bool:
    val = value.meta.get("val") if isinstance(value, torch.fx.Node) else None
    return isinstance(val, torch.Tensor) and val.dtype == torch.bool


def for_graphnet_tools(gm: torch.fx.GraphModule, values: list) -> tuple[torch.fx.GraphModule, list[str]]:
    """The graph as GraphNet's own tools can run it, and what was changed (nothing, most often).

    `values` are the graph's inputs as they will be written (real values carry the layout that ran).

    GraphNet's loaders build every input contiguous (they ignore `stride`), so when the graph is not shown to
    run on such inputs (`_layout_matters`), its non-contiguous inputs are copied into their recorded layout first;
    they build a size passed in (`sym_size_int`) as a 0-d tensor, which `_assert_scalar` refuses, so the
    range checks torch adds on such sizes are dropped (they compute nothing); GraphNet's runner reads the first
    output with `argmin`, which refuses booleans, so a boolean first output (a mask passed across a graph break)
    trades places with the first output that is not one.
    """
    restride = []
    if _layout_matters(gm, values):
        restride = [
            (node, value)
            for node, value in zip(gm.graph.find_nodes(op="placeholder"), values)
            if isinstance(value, torch.Tensor) and value.numel() and not value.is_contiguous()
        ]
    outputs = gm.graph.output_node().args[0]
    swap = None
    if isinstance(outputs, (tuple, list)) and outputs and _is_bool_tensor(outputs[0]):
        swap = next((i for i, o in enumerate(outputs) if isinstance(o, torch.fx.Node) and not _is_bool_tensor(o)), None)
    size_inputs = {
        node.name
        for node, value in zip(gm.graph.find_nodes(op="placeholder"), values)
        if isinstance(value, (int, torch.SymInt)) and not isinstance(value, bool)
    }
    if not restride and swap is None and not _size_checks(gm.graph, size_inputs):
        return gm, []
    result = copy_graph_module(gm)
    changes = []
    by_name = {node.name: node for node in result.graph.find_nodes(op="placeholder")}
    anchor = next(node for node in result.graph.nodes if node.op != "placeholder")
    for original, val in restride:
        changes.append(_copy_into_recorded_layout(result.graph, by_name[original.name], val, anchor))
    dropped = _size_checks(result.graph, size_inputs)
    for check in dropped:
        _erase_with_unused_inputs(result.graph, check)
    if dropped:
        names = ", ".join(sorted(size_inputs))
        changes.append(
            f"{len(dropped)} range checks on the sizes {names} are dropped: GraphNet passes sizes as tensors"
        )
    if swap is not None:
        output = result.graph.output_node()
        results = output.args[0]
        assert isinstance(results, (tuple, list))  # checked above, on the graph this one copies
        moved = list(results)
        moved[0], moved[swap] = moved[swap], moved[0]
        output.args = (tuple(moved),)
        changes.append(f"outputs 0 and {swap} trade places: the first output is a boolean tensor")
    result.recompile()
    return result, changes


def _copy_into_recorded_layout(
    graph: torch.fx.Graph, node: torch.fx.Node, value: torch.Tensor, anchor: torch.fx.Node
) -> str:
    """Have the graph copy input `node` into the strides `value` has, before `anchor`; says what it did."""
    device = torch.device("cpu") if value.device.type == "meta" else value.device
    with graph.inserting_before(anchor):
        empty = graph.call_function(
            torch.ops.aten.empty_strided.default,
            (list(value.shape), list(value.stride())),
            {"dtype": value.dtype, "device": device},
        )
        laid_out = graph.call_function(torch.ops.aten.copy.default, (empty, node))
    node.replace_all_uses_with(laid_out, delete_user_cb=lambda user: user is not laid_out)
    return f"{node.name} is copied into its recorded strides {list(value.stride())}"


def _size_checks(graph: torch.fx.Graph, size_inputs: set[str]) -> list[torch.fx.Node]:
    """The `_assert_scalar` nodes that check sizes passed in as inputs (torch's ranges for data-dependent sizes)."""
    if not size_inputs:
        return []
    checks = []
    assert_scalar = torch.ops.aten._assert_scalar.default  # noqa: SLF001 - an aten operator, no private attribute
    for check in graph.find_nodes(op="call_function", target=assert_scalar):
        seen, todo = set(), list(check.all_input_nodes)
        while todo:
            node = todo.pop()
            if node in seen:
                continue
            seen.add(node)
            todo += node.all_input_nodes
        if any(node.op == "placeholder" and node.name in size_inputs for node in seen):
            checks.append(check)
    return checks


def _erase_with_unused_inputs(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    """Erase `node`, then whatever computed only its inputs (the comparisons a range check reads)."""
    todo, erased = [node], set()
    while todo:
        current = todo.pop()
        if current in erased or current.op != "call_function" or current.users:
            continue
        todo += current.all_input_nodes
        graph.erase_node(current)
        erased.add(current)


def placeholder_values(gm: torch.fx.GraphModule, real_values: list | None) -> tuple[list[str], list]:
    """The graph's input names, and the values written for them: the real ones when they match, else the recorded."""
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    names = [n.name for n in placeholders]
    if real_values is not None and len(real_values) == len(placeholders):
        return names, list(real_values)
    return names, [n.meta.get("val") for n in placeholders]
