"""Read a TORCH_TRACE folder (what `TORCH_TRACE=<dir>` writes, tlparse's input) without running any of it.

torch writes one log per process: a header line per entry (`V1205 ... file.py:123] {json}`), its payload on
the lines after it, each starting with a tab. The reader streams those lines and keeps only the payloads it
needs (AOT Autograd's joint, forward and backward graphs of each compiled region, the functorch config in
effect, min-cut's information where torch wrote it): a region is handed on as soon as its backward graph
has been read, and no file is ever held whole.

A trace is data from someone else's machine. Its graphs are parsed with `ast` and rebuilt as torch.fx graphs
node by node: an op is found by attribute lookup on `torch.ops` namespaces, a literal argument is read as a
literal, and anything else in the text (a call of anything but an op, an attribute of a builtin, an import)
refuses that graph with one sentence. Nothing of the text is executed, evaluated or compiled.
"""

from __future__ import annotations

import ast
import json
import operator
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.fx
import torch.fx.graph

from .compat import FakeTensorMode, _LazyGraphModule, op_packet, op_schema
from .text import visible

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

GRAPHS = ("aot_joint_graph", "aot_forward_graph", "aot_backward_graph", "dynamo_output_graph")
"""The entries of a compiled region that hold its graphs (torch's `trace_structured` names): AOT Autograd's, and
the graph Dynamo handed it (whose inputs AOT Autograd's `PlainAOTInput(idx=i)` refer to)."""
ARTIFACTS = ("torch._functorch.config", "min_cut_information")
"""The artifacts (`{"artifact": {"name": ...}}`) read besides the graphs."""
INDUCTOR_MARKS = ("after_pre_grad_graph", "inductor_post_grad_graph", "inductor_output_code")
"""Entries only Inductor writes for a region: the artifact of its pre-grad passes (before AOT Autograd traces), its
post-grad graph and its output code (after the partition). Any one, not its text, says Inductor compiled the region:
a compile that hits Inductor's caches writes no pre-grad graph, only the two that come after the AOT graphs."""

_HEADER = re.compile(r"^[VIWEC]\d{4} [\d:.]+ +\d+ [^\]]*\] (\{.*\})\s*$")
_ANNOTATION = re.compile(r"^([a-z0-9]+)\[([^\]]*)\]\[([^\]]*)\](.*)$")
_DTYPES = {abbr: dtype for dtype, abbr in vars(torch.fx.graph)["dtype_abbrs"].items()}
"""torch's own abbreviations (`f32`, `bf16`, `b8`), the ones its graph printer writes, read back."""
_CONSTANTS = {  # the only `torch.<name>` attributes a graph's literal arguments hold, besides dtypes
    "strided": torch.strided,
    "contiguous_format": torch.contiguous_format,
    "channels_last": torch.channels_last,
    "channels_last_3d": torch.channels_last_3d,
    "preserve_format": torch.preserve_format,
    "sparse_coo": torch.sparse_coo,
}
_FLOATS = {"inf": float("inf"), "-inf": float("-inf"), "nan": float("nan")}


class Refused(Exception):  # noqa: N818 - not an error of ours: one sentence saying what a trace's text was refused for
    """A graph text holding something other than what torch prints for a graph; its sentence says what."""


@dataclass
class RegionText:
    """The text torch wrote for one compiled region: its graphs, and what was in effect when it was compiled."""

    file: Path
    rank: int | None
    compile_id: str
    """`frame/compile`, with `_attempt` after a restart, as tlparse names it (`0/0`, `0/0_1`)."""
    graphs: dict[str, str] = field(default_factory=dict)
    """By entry name (`GRAPHS`): the printed graph."""
    functorch_config: dict | None = None
    min_cut_information: str | None = None
    inductor: bool = False
    """Whether Inductor compiled the region (one of `INDUCTOR_MARKS` in the trace)."""

    @property
    def complete(self) -> bool:
        return "aot_forward_graph" in self.graphs and "aot_backward_graph" in self.graphs


def trace_files(path: str | Path) -> list[Path]:
    """The logs of a TORCH_TRACE folder, in name order (a rank's log is named for it), or the one file given."""
    root = Path(path)
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise FileNotFoundError(f"no TORCH_TRACE folder or file at {root}")
    return sorted(p for p in root.iterdir() if p.is_file() and p.suffix == ".log")


_MARKS = tuple(name.encode() for name in (*GRAPHS, *ARTIFACTS, *INDUCTOR_MARKS))
"""Bytes a wanted header holds: any other header (most of a trace's) is passed over without being parsed."""


def _wanted(line: str) -> dict | None:
    match = _HEADER.match(line)
    if match is None:
        return None
    try:
        entry = json.loads(match.group(1))
    except ValueError:
        return None
    if not isinstance(entry, dict):
        return None
    artifact = entry.get("artifact")
    if any(name in entry for name in (*GRAPHS, *INDUCTOR_MARKS)):
        return entry
    if isinstance(artifact, dict) and artifact.get("name") in (*ARTIFACTS, *INDUCTOR_MARKS):
        return entry
    return None


def _compile_id(entry: dict) -> str | None:
    frame, compile_ = entry.get("frame_id"), entry.get("frame_compile_id")
    if not isinstance(frame, int) or not isinstance(compile_, int):
        return None
    attempt = entry.get("attempt", 0)
    return f"{frame}/{compile_}" + (f"_{attempt}" if attempt else "")


@dataclass
class RegionIndex:
    """Where one compiled region's entries lie in its log (byte spans of their payloads), not their text: a
    2 GB trace is indexed in one pass holding next to nothing, and a region's text is read when it is asked for."""

    file: Path
    rank: int | None
    compile_id: str
    spans: dict[str, tuple[int, int]] = field(default_factory=dict)
    """By entry name (`GRAPHS`, `ARTIFACTS`): the payload's first byte and the byte after its last (the last
    such entry of the region: torch writes min-cut's information again for each knapsack it runs)."""
    inductor: bool = False

    @property
    def complete(self) -> bool:
        return "aot_forward_graph" in self.spans and "aot_backward_graph" in self.spans

    @property
    def label(self) -> str:
        """`rank 1 0/0`, or `0/0` where the trace names no rank: how a list of regions names this one."""
        return f"rank {self.rank} {self.compile_id}" if self.rank is not None else self.compile_id

    def read(self) -> RegionText:
        """The region's text, read back from its spans."""
        region = RegionText(self.file, self.rank, self.compile_id, inductor=self.inductor)
        with self.file.open("rb") as log:
            for name, (start, end) in self.spans.items():
                log.seek(start)
                lines = log.read(end - start).decode("utf-8", errors="replace").splitlines()
                _take(region, name, "\n".join(line[1:] for line in lines))
        return region


def index_regions(path: str | Path) -> Iterator[RegionIndex]:
    """Each compiled region of each log, handed on once its backward graph is indexed (an inference-only region,
    with no backward graph, is handed on at the end of its file). One pass over the bytes; a header is parsed
    only where it names an entry wanted. An entry of a region already handed on (Inductor's post-grad graph and
    output code come after the AOT graphs) still marks it: read a region once the pass is done."""
    for file in trace_files(path):
        open_regions: dict[str, RegionIndex] = {}
        handed: dict[str, RegionIndex] = {}
        with file.open("rb") as log:
            offset, region, name, start = 0, None, "", 0
            for line in log:
                if line[:1] != b"\t":
                    if region is not None and offset > start:
                        region.spans[name] = (start, offset)
                        if region.complete and region.compile_id in open_regions:
                            handed[region.compile_id] = open_regions.pop(region.compile_id)
                            yield region
                    region, name = None, ""
                    entry = _wanted(line.decode("utf-8", errors="replace")) if any(m in line for m in _MARKS) else None
                    compile_id = _compile_id(entry) if entry is not None else None
                    if entry is not None and compile_id is not None:
                        rank = entry.get("rank") if isinstance(entry.get("rank"), int) else None
                        found = handed.get(compile_id) or open_regions.setdefault(
                            compile_id, RegionIndex(file, rank, compile_id)
                        )
                        keyed = [g for g in (*GRAPHS, *INDUCTOR_MARKS) if g in entry]
                        name = keyed[0] if keyed else entry["artifact"]["name"]
                        if name in INDUCTOR_MARKS:
                            found.inductor = True
                        else:
                            region = found
                    start = offset + len(line)
                offset += len(line)
            if region is not None and offset > start:
                region.spans[name] = (start, offset)
        yield from open_regions.values()


def _take(region: RegionText, name: str, text: str) -> None:
    if name in GRAPHS:
        region.graphs[name] = text
        return
    if name == "min_cut_information":
        region.min_cut_information = text
        return
    try:
        config = json.loads(text)
    except ValueError:
        return
    region.functorch_config = config if isinstance(config, dict) else None


# -- a graph's text, as a torch.fx graph -------------------------------------------------------------------------


@dataclass(frozen=True)
class Annotation:
    """What a printed annotation (`"f32[8, 64][64, 1]cpu"`) says of a value."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    device: str


def parse_annotation(text: str) -> Annotation:
    match = _ANNOTATION.match(text)
    if match is None:
        raise Refused(f"the annotation {text[:60]!r} is not a plain tensor's (dtype[shape][stride]device)")
    abbr, shape, stride, device = match.groups()
    if abbr not in _DTYPES:
        raise Refused(f"the dtype {abbr!r} of annotation {text[:60]!r} is not one torch prints")
    try:
        sizes = tuple(int(s) for s in shape.split(",") if s.strip())
        strides = tuple(int(s) for s in stride.split(",") if s.strip())
    except ValueError:
        raise Refused(f"the annotation {text[:60]!r} has symbolic sizes, which this reader does not take yet") from None
    return Annotation(_DTYPES[abbr], sizes, strides, device)


_RUN_NAMESPACES = ("aten", "prims")
"""The ops a loaded graph's values are made by running (on fake tensors): torch's own, never another library's or
an op a process registered with Python code of its own."""


def _same_tensor_meta(ran: object, annotated: torch.Tensor) -> bool:
    """Whether an op's run gave the tensor its annotation prints (dtype, shape, stride)."""
    return (
        isinstance(ran, torch.Tensor)
        and ran.dtype == annotated.dtype
        and ran.shape == annotated.shape
        and ran.stride() == annotated.stride()
    )


class GraphBuilder:
    """Builds one torch.fx graph from one printed graph's syntax tree; every value a fake tensor, under one
    FakeTensorMode shared by the region's graphs: the placeholders' made from their annotations, each op's by
    running torch's op on them (`_run`), its annotation where that cannot be done or prints otherwise."""

    def __init__(self, fake_mode: FakeTensorMode, device_map: dict[str, str]) -> None:
        self.fake_mode = fake_mode
        self.device_map = device_map
        """Devices this torch cannot make fake tensors on (`cuda` on a CPU build) and the one used instead."""
        self.graph = torch.fx.Graph()
        self.values: dict[str, torch.fx.Node] = {}
        self.lines: list[str] = []

    def build(self, text: str) -> torch.fx.GraphModule:
        self.lines = text.splitlines()
        try:
            tree = ast.parse(text)
        except SyntaxError as error:
            raise Refused(f"the graph text is not Python ({error.msg}, line {error.lineno})") from None
        except (ValueError, RecursionError, MemoryError):  # null bytes; nesting deeper than Python's parser goes
            raise Refused(
                "the graph text is not Python torch prints (null bytes, or nested past the parser's depth)"
            ) from None
        forward = _forward_def(tree)
        try:
            for argument in forward.args.args[1:]:
                if argument.annotation is not None:
                    self._placeholder(argument.arg, argument.annotation, argument.lineno)
            for statement in forward.body:
                self._statement(statement)
        except RecursionError:
            raise Refused("the graph text nests literals deeper than any graph torch prints") from None
        return _LazyGraphModule(torch.nn.Module(), self.graph)  # fx writes its code when first read, not here

    def _statement(self, statement: ast.stmt) -> None:
        if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            if statement.value is None:  # the joint graph's placeholders, listed before its pytree flatten
                self._placeholder(statement.target.id, statement.annotation, statement.lineno)
            else:
                self._node(statement.target.id, statement.value, statement.annotation)
        elif isinstance(statement, ast.Assign) and _is_multi_output(statement):
            self._node(statement.targets[0].id, statement.value, None)  # type: ignore[attr-defined]
        elif isinstance(statement, ast.Assign) and _is_release(statement):
            return  # `x = None`: the printed code lets a value go
        elif isinstance(statement, ast.Assign) and _is_flatten(statement):
            return  # the joint graph's `primals_1, ... = fx_pytree.tree_flatten_spec([primals, tangents], ...)`
        elif isinstance(statement, ast.Return) and statement.value is not None:
            self._output(statement.value)
        else:
            raise Refused(f"line {statement.lineno} ({_shown(statement)}) is not a statement torch prints in a graph")

    def _placeholder(self, name: str, annotation: ast.expr, line: int) -> None:
        node = self.graph.placeholder(name)
        node.meta["val"] = self._fake(_annotation_text(annotation))
        comment = self._comment(line)
        if comment:
            node.meta["desc_text"] = comment
        self.values[name] = node

    def _node(self, name: str, value: ast.expr, annotation: ast.expr | None) -> None:
        """One op's node; `annotation` None for an op returning several values (their `getitem`s are annotated)."""
        target: Callable[..., object]
        args: tuple[Any, ...]
        kwargs: dict[str, Any] = {}
        if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name):  # `getitem = x[0]`
            target, args = operator.getitem, (self._value(value.value), self._literal(value.slice))
        elif isinstance(value, ast.Call):
            target = resolve_op(value.func)
            args = tuple(self._argument(a) for a in value.args)
            kwargs = {k.arg: self._argument(k.value) for k in value.keywords if k.arg is not None}
            if len(kwargs) != len(value.keywords):
                raise Refused(f"line {value.lineno} ({_shown(value)}) unpacks keywords, which no graph does")
        else:
            raise Refused(f"line {value.lineno} ({_shown(value)}) is not an op call torch prints in a graph")
        node = self.graph.call_function(target, args, kwargs, name=name)
        if node.name != name:
            raise Refused(f"line {value.lineno} names {name!r} twice")
        self.values[name] = node
        ran = self._run(node)
        if annotation is None:
            if isinstance(ran, (tuple, list)):
                node.meta["val"] = tuple(ran)
            return
        text = _annotation_text(annotation)
        if text.startswith("Sym("):
            raise Refused(f"line {value.lineno} holds a symbolic size ({text}), which this reader does not take yet")
        annotated = self._fake(text)
        node.meta["val"] = ran if _same_tensor_meta(ran, annotated) else annotated
        if target is operator.getitem and isinstance(args[0], torch.fx.Node) and isinstance(args[1], int):
            self._set_item(args[0], args[1], node.meta["val"])

    def _run(self, node: torch.fx.Node) -> object:
        """torch's own op (aten's or prims', found by name; no code of the trace runs) run on its inputs' fake
        tensors: its output aliases what the op aliases (a view shares its input's storage), which an annotation
        cannot say. None where the op is another library's, reads no tensor (fake mode would not hold it), has an
        input without a value, or cannot run here; the annotation stands then."""
        namespace = getattr(node.target, "namespace", None)
        if node.target is not operator.getitem and namespace not in _RUN_NAMESPACES:
            return None
        nodes = node.all_input_nodes
        if not nodes or any(n.meta.get("val") is None for n in nodes):
            return None
        args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: n.meta["val"])
        try:
            with self.fake_mode:
                return node.target(*args, **kwargs)  # type: ignore[operator]
        except Exception:  # noqa: BLE001 - an op fake mode cannot run: its annotation gives its value
            return None

    def _set_item(self, source: torch.fx.Node, index: int, value: torch.Tensor) -> None:
        """A multi-output op's value, as torch keeps it: the tuple of what its `getitem`s read (None where none)."""
        known = list(source.meta.get("val") or ())
        known += [None] * (index + 1 - len(known))
        known[index] = value
        source.meta["val"] = tuple(known)

    def _output(self, value: ast.expr) -> None:
        if isinstance(value, ast.Call) and _dotted(value.func) == "pytree.tree_unflatten" and value.args:
            value = value.args[0]  # the joint graph returns its flat list through the output spec
        if not isinstance(value, (ast.Tuple, ast.List)):
            raise Refused(f"line {value.lineno} ({_shown(value)}) is not a graph's returned tuple")
        outputs: tuple[Any, ...] = tuple(self._argument(v) for v in value.elts)
        node = self.graph.output(outputs)
        node.meta["desc_text"] = [self._comment(v.lineno) for v in value.elts]

    def _argument(self, value: ast.expr) -> object:
        if isinstance(value, ast.Name) and value.id in self.values:
            return self.values[value.id]
        if isinstance(value, (ast.List, ast.Tuple)):
            items = [self._argument(v) for v in value.elts]
            return items if isinstance(value, ast.List) else tuple(items)
        return self._literal(value)

    def _value(self, value: ast.Name) -> torch.fx.Node:
        if value.id not in self.values:
            raise Refused(f"line {value.lineno} reads {value.id!r} before the graph defines it")
        return self.values[value.id]

    def _literal(self, value: ast.expr) -> object:
        return literal(value)

    def _comment(self, line: int) -> str:
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        return text.partition("#")[2].strip() if "#" in text else ""

    def _fake(self, text: str) -> torch.Tensor:
        found = parse_annotation(text)
        device = self.device_map.get(found.device, found.device)
        try:
            with self.fake_mode:
                return torch.empty_strided(found.shape, found.stride, dtype=found.dtype, device=device)
        except (RuntimeError, ValueError) as error:
            raise Refused(f"torch here cannot make a {text} tensor ({str(error).splitlines()[0][:80]})") from None


def literal(value: ast.expr) -> object:
    """A literal argument as torch prints one: numbers, text, None, a dtype or layout (`torch.float32`),
    `device(type='cpu', index=0)`, `inf`, `float('inf')`, a negative number; anything else is refused."""
    if isinstance(value, ast.Constant) and isinstance(value.value, (int, float, bool, str, type(None))):
        return value.value
    if isinstance(value, ast.Name) and value.id in ("inf", "nan"):  # fx prints these floats by the names it defines
        return _FLOATS[value.id]
    if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub):
        inner = literal(value.operand)
        if isinstance(inner, (int, float)) and not isinstance(inner, bool):
            return -inner
    if isinstance(value, (ast.List, ast.Tuple)):
        items = [literal(v) for v in value.elts]
        return items if isinstance(value, ast.List) else tuple(items)
    dotted = _dotted(value)
    if dotted is not None and dotted.startswith("torch.") and dotted.count(".") == 1:
        name = dotted[6:]
        if name in _CONSTANTS:
            return _CONSTANTS[name]
        dtype = getattr(torch, name, None) if not name.startswith("_") else None
        if isinstance(dtype, torch.dtype):
            return dtype
    if isinstance(value, ast.Call) and not value.args and _dotted(value.func) == "device":
        keywords = {k.arg: literal(k.value) for k in value.keywords}
        if set(keywords) <= {"type", "index"} and isinstance(keywords.get("type"), str):
            index = keywords.get("index")
            return (
                torch.device(str(keywords["type"]), index)
                if isinstance(index, int)
                else torch.device(str(keywords["type"]))
            )
    if isinstance(value, ast.Call) and _dotted(value.func) == "float" and len(value.args) == 1:
        text = literal(value.args[0])
        if isinstance(text, str) and text in _FLOATS:
            return _FLOATS[text]
    raise Refused(f"line {value.lineno} ({_shown(value)}) is not a literal torch prints in a graph")


def resolve_op(func: ast.expr) -> Callable[..., object]:
    """`torch.ops.<namespace>.<op>.<overload>`, found by attribute lookup on torch.ops, nothing else."""
    dotted = _dotted(func)
    parts = dotted.split(".") if dotted is not None else []
    if (
        len(parts) != 5
        or parts[:2] != ["torch", "ops"]
        or parts[2].startswith("_")
        or any(p.startswith("__") for p in parts)
    ):
        raise Refused(f"line {func.lineno} calls {_shown(func)}, which is no torch op (torch.ops.<namespace>.<op>)")
    namespace, name, overload = parts[2:]
    found: Any
    try:
        found = getattr(getattr(getattr(torch.ops, namespace), name), overload)
    except (AttributeError, RuntimeError):
        found = None
    if found is None or op_schema(found) is None or op_packet(found) is None or not callable(found):
        raise Refused(f"line {func.lineno} calls {dotted}, which is not an op registered in this process")
    op: Callable[..., object] = found
    return op


def graph_input_names(text: str) -> list[str]:
    """The argument names of a printed graph's forward (Dynamo's graph: `L_x_`, `L_self_modules_fc_parameters_weight_`),
    read from its syntax tree alone."""
    try:
        forward = _forward_def(ast.parse(text))
    except (SyntaxError, Refused):
        return []
    return [a.arg for a in forward.args.args[1:]]


def _forward_def(tree: ast.Module) -> ast.FunctionDef:
    """The printed module's `forward`: one class holding one method, and nothing else at any level."""
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.ClassDef):
        raise Refused("the graph text is not one printed GraphModule class")
    methods = tree.body[0].body
    if len(methods) != 1 or not isinstance(methods[0], ast.FunctionDef) or methods[0].name != "forward":
        raise Refused("the graph text's class holds more than one forward method (subgraphs are not read yet)")
    forward = methods[0]
    if forward.decorator_list or forward.args.vararg or forward.args.kwarg or forward.args.defaults:
        raise Refused("the graph's forward has decorators, defaults or star arguments, which torch does not print")
    return forward


def _is_multi_output(statement: ast.Assign) -> bool:
    return (
        len(statement.targets) == 1
        and isinstance(statement.targets[0], ast.Name)
        and isinstance(statement.value, ast.Call)
    )


def _is_release(statement: ast.Assign) -> bool:
    return (
        isinstance(statement.value, ast.Constant)
        and statement.value.value is None
        and all(isinstance(t, ast.Name) for t in statement.targets)
    )


def _is_flatten(statement: ast.Assign) -> bool:
    value = statement.value
    return (
        len(statement.targets) == 1
        and isinstance(statement.targets[0], ast.Tuple)
        and isinstance(value, ast.Call)
        and _dotted(value.func) == "fx_pytree.tree_flatten_spec"
    )


def _annotation_text(annotation: ast.expr) -> str:
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return annotation.value
    raise Refused(f"line {annotation.lineno} has an annotation that is not text ({_shown(annotation)})")


def _dotted(node: ast.expr) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


def _shown(node: ast.AST) -> str:
    """A trace's code as a refusal quotes it: short, on one line, its control characters made visible."""
    text = visible(ast.unparse(node)).replace("\n", " ")
    return text if len(text) <= 70 else text[:67] + "..."
