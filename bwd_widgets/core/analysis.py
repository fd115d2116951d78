"""What is saved for backward, and what each backward output is the gradient of."""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
import torch.fx

from .compat import op_packet, op_schema
from .kinds import InputKind, InputSource, RegionStorages, SavedKind, StorageRef, is_tangent
from .naming import module_path, source_line
from .why import why_saved

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .partition_view import PartitionView


@dataclass
class TensorInfo:
    name: str
    shape: tuple
    dtype: str
    bytes: int


@dataclass
class SavedTensor:
    """One value autograd keeps between forward and backward (a backward placeholder)."""

    name: str
    kind: SavedKind
    source: str | None  # the parameter, buffer or input it is, for forward inputs
    shape: tuple
    dtype: str
    bytes: int
    producer: str | None  # the forward op that computed it, for activations
    module: str | None
    source_line: str | None
    users: list = field(default_factory=list)
    graph_index: int = 0
    alias_of: str | None = None  # a view: the forward input or forward value whose memory it shares
    storage_op: str | None = None  # for views, the op that made the memory they share
    activation_bytes: int = 0  # memory it adds beyond the model's tensors and the call's, each storage once
    why: str = ""  # why it is saved, in one sentence, torch's own reason in it
    torch_reason: str = ""  # torch's own phrase for that reason ("cannot recompute: materialized in backward")
    source_aliases: tuple[str, ...] = ()  # the other names of the parameter or buffer it is (tied weights)
    storage_ref: StorageRef | None = None
    """Where the storage it keeps alive comes from, where another region may keep the same one (an input the forward
    made, a value the region hands on: `kinds.RegionStorages.kept`); None where only this region holds it."""

    @property
    def is_activation(self) -> bool:
        return self.kind == "activation"


@dataclass
class GradientOutput:
    """One backward output: the gradient of a forward input or parameter."""

    name: str
    grad_of: str  # human name: `conv.weight`, `x`
    kind: InputKind
    key: str  # argument name or qualified parameter name, as in BackwardExtraction.autograd_gradients
    shape: tuple
    dtype: str
    aliases: tuple[str, ...] = ()  # the parameter's other qualified names (tied weights); grad_of is its first


def tensor_info(name: str, value: object) -> TensorInfo:
    if isinstance(value, torch.Tensor):
        return TensorInfo(name, tuple(int(s) for s in value.shape), str(value.dtype), _nbytes(value))
    return TensorInfo(name, (), type(value).__name__, 0)


def _nbytes(value: object) -> int:
    if isinstance(value, torch.Tensor):
        return int(value.numel()) * value.element_size()
    return 0


def op_name(node: torch.fx.Node) -> str:
    """`aten.convolution`, or `aten.native_batch_norm[1]` for a getitem of a multi-output op."""
    if node.op != "call_function":
        return node.op
    if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
        return f"{op_name(node.args[0])}[{node.args[1]}]"
    target = node.target
    overload = op_packet(target)
    if overload is not None:
        return str(overload).replace("aten::", "aten.")
    return getattr(target, "__name__", str(target))


def _is_view(node: torch.fx.Node) -> bool:
    schema = op_schema(node.target)
    if node.op != "call_function" or schema is None or not schema.arguments or not schema.returns:
        return False
    alias = schema.arguments[0].alias_info
    returned = schema.returns[0].alias_info
    return alias is not None and not alias.is_write and returned is not None and not returned.is_write


def _shares_memory_of(node: torch.fx.Node) -> torch.fx.Node | None:
    """The node whose memory `node` shares by its op's schema: a view's input. A piece of a view op that returns
    several (`split`, `unbind`, `chunk`: an `operator.getitem` of it) shares that op's input's memory: saving one
    piece keeps the whole storage alive (a VAE's mean and log-variance, `chunk`ed)."""
    if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node) and _is_view(node.args[0]):
        node = node.args[0]
    return node.args[0] if _is_view(node) and isinstance(node.args[0], torch.fx.Node) else None


def storage_root(node: torch.fx.Node) -> torch.fx.Node:
    """The node whose memory a chain of views (t, view, expand, detach, a piece of a split...) shares."""
    while (shared := _shares_memory_of(node)) is not None:
        node = shared
    return node


def _storage_bytes(node: torch.fx.Node) -> int:
    value = node.meta.get("val")
    if isinstance(value, torch.Tensor):
        try:
            return int(value.untyped_storage().nbytes())
        except RuntimeError:  # a tensor without storage (sparse, nested): its elements' bytes
            return _nbytes(value)
    return 0


def primal_index(name: str) -> int | None:
    if name.startswith("primals_") and name[8:].isdigit():
        return int(name[8:]) - 1
    return None


def node_module(node: torch.fx.Node | None, sources: list[InputSource]) -> str | None:
    """Module path from fx metadata, else from the parameters the op reads (GraphNet samples)."""
    if node is None:
        return None
    path = module_path(node.meta.get("nn_module_stack") or node.meta.get("fwd_nn_module_stack"))
    if path:
        return path
    if node.meta.get("is_gradient_acc"):
        return None  # torch's mark for autograd's own sum of a value's gradients: graph_modules places it
    frontier, seen = [node], set()
    for _ in range(3):
        next_frontier = []
        for current in frontier:
            for arg in current.all_input_nodes:
                if arg in seen:
                    continue
                seen.add(arg)
                index = primal_index(arg.name)
                if index is not None and index < len(sources) and sources[index].kind == "parameter":
                    return sources[index].name.rpartition(".")[0] or None
                next_frontier.append(arg)
        frontier = next_frontier
    return None


def graph_modules(
    nodes: list[torch.fx.Node], sources: list[InputSource], known: dict[str, str], otherwise: dict[str, str]
) -> dict[str, str]:
    """Each node's module ("" for none): `known` first (the saved values'), then `node_module`, then
    `otherwise` (a parameter's gradient sum: the parameter's module), then `place_unowned` for the ops
    no forward module owns. The one rule the graph, the saved table and the memory pane share."""
    own = {
        n.name: known[n.name] if n.name in known else node_module(n, sources) or otherwise.get(n.name, "")
        for n in nodes
    }
    unowned = [n.name for n in nodes if not own[n.name] and n.op not in ("placeholder", "output")]
    edges = [(arg.name, node.name) for node in nodes for arg in node.all_input_nodes]
    sums = {n.name for n in nodes if n.meta.get("is_gradient_acc")}
    return place_unowned(own, unowned, edges, sums)


def place_unowned(
    modules: dict[str, str],
    unowned: list[str],
    edges: list[tuple[str, str]],
    sums: frozenset[str] | set[str] = frozenset(),
) -> dict[str, str]:
    """Backward ops no forward module owns (the gradient sums of residual connections) go in the
    innermost module their neighbours share, so that a collapsed module hides them with the rest.

    The `sums` (torch's `is_gradient_acc`) first, by the ops that read them (those a forward module owns,
    else those placed), last in graph order first: a sum of a value's gradients belongs with
    the backward of the op that made the value, which reads it (the sum at the residual stream between
    `norm` and `blocks.1` goes in `blocks.1`, so the collapsed modules show one direction of gradient flow,
    not both). Then, for the rest, two sweeps over all neighbours, in graph order and back, so that a run
    of such ops takes its module from both ends."""
    result = dict(modules)
    neighbours: dict[str, list[str]] = {}
    readers: dict[str, list[str]] = {}
    for source, target in edges:
        neighbours.setdefault(source, []).append(target)
        neighbours.setdefault(target, []).append(source)
        readers.setdefault(source, []).append(target)
    for name in [name for name in unowned if name in sums][::-1]:
        read_by = readers.get(name, [])
        around = [modules[m] for m in read_by if modules.get(m)] or [result[m] for m in read_by if result.get(m)]
        if around:
            result[name] = common_module(around)
    rest = [name for name in unowned if not result[name]]
    for sweep in (rest, rest[::-1]):
        for name in sweep:
            around = [result[m] for m in neighbours.get(name, []) if result.get(m)]
            if around:
                result[name] = common_module(around)
    return result


def common_module(paths: list[str]) -> str:
    """The innermost module path that every one of `paths` is inside ("" for none)."""
    shared = []
    for segments in zip(*(path.split(".") for path in paths)):
        if len(set(segments)) > 1:
            break
        shared.append(segments[0])
    return ".".join(shared)


def saved_positions(forward: torch.fx.GraphModule, backward: torch.fx.GraphModule) -> dict[str, int]:
    """Where each saved value of `backward` (a non-tangent placeholder) is among `forward`'s outputs.

    AOT Autograd's partition keeps the joint graph's names, so a saved value is the forward output of its name,
    except the random-number states min-cut's `functionalize_rng_ops` adds for recomputed random ops: backward
    placeholders `rng_state_output_<i>`, whose states the forward returns after the saved values (before the
    symints), in the same order. They pair with the last forward outputs no backward placeholder names.
    """
    outputs = forward.graph.output_node().args[0]
    assert isinstance(outputs, (tuple, list))
    by_name = {node.name: i for i, node in enumerate(outputs) if isinstance(node, torch.fx.Node)}
    saved = [n.name for n in backward.graph.find_nodes(op="placeholder") if not is_tangent(n.name)]
    unnamed = [name for name in saved if name not in by_name]
    named = set(saved)
    unmatched = [i for i, node in enumerate(outputs) if not (isinstance(node, torch.fx.Node) and node.name in named)]
    positions = {name: by_name[name] for name in saved if name in by_name}
    if unnamed:
        positions.update(zip(unnamed, unmatched[-len(unnamed) :]))
    return positions


def backward_inputs(
    forward: torch.fx.GraphModule, backward: torch.fx.GraphModule, outputs: Sequence[object], tangents: dict
) -> list:
    """The backward graph's inputs, in order, from what the forward returned and the tangents by name."""
    positions = saved_positions(forward, backward)
    return [
        tangents[node.name] if is_tangent(node.name) else outputs[positions[node.name]]
        for node in backward.graph.find_nodes(op="placeholder")
    ]


def _producers(partition: PartitionView) -> dict[str, torch.fx.Node]:
    """The forward node each saved value of the partition is, by its backward placeholder's name."""
    outputs = partition.forward.graph.output_node().args[0]
    assert isinstance(outputs, (tuple, list))
    return {
        name: node
        for name, i in saved_positions(partition.forward, partition.backward_with_nones).items()
        if isinstance(node := outputs[i], torch.fx.Node)
    }


def saved_tensors(partition: PartitionView) -> list[SavedTensor]:
    """One SavedTensor per non-tangent backward placeholder, each storage's bytes counted once."""
    forward_nodes = _producers(partition)
    joint_nodes = {n.name: n for n in partition.joint.graph.nodes}
    sources = partition.inputs
    storages = partition.storages
    counted: set[object] = set()
    saved = []
    for node in partition.backward_with_nones.graph.find_nodes(op="placeholder"):
        if is_tangent(node.name):
            continue
        value = node.meta.get("val")
        index = primal_index(node.name)
        producer = forward_nodes.get(node.name)
        users = [u.name for u in node.users]
        info = tensor_info(node.name, value)
        kind, source, aliases = _kind_and_source(value, index, sources)
        is_activation = kind == "activation"
        if not is_activation and source is not None:
            module = source.rpartition(".")[0] or None
        else:
            module = node_module(producer, sources)
        alias_of, storage_op, activation_bytes, storage_ref = _memory_kept(
            producer if is_activation else None, index, info.bytes if is_activation else 0, sources, storages, counted
        )
        reason = why_saved(
            kind,
            producer if is_activation else None,
            users,
            partition.partitioner,
            joint_nodes,
            partition.decisions,
            _view_of(producer, alias_of),
        )
        saved.append(
            SavedTensor(
                name=node.name,
                kind=kind,
                source=source,
                shape=info.shape,
                dtype=info.dtype,
                bytes=info.bytes,
                producer=op_name(producer) if is_activation and producer is not None else None,
                module=module,
                source_line=source_line(producer.meta.get("stack_trace")) if producer is not None else None,
                users=users,
                graph_index=partition.index,
                alias_of=alias_of,
                storage_op=storage_op,
                activation_bytes=activation_bytes,
                why=reason.text,
                torch_reason=reason.torch,
                source_aliases=aliases,
                storage_ref=storage_ref,
            )
        )
    return saved


def _memory_kept(
    producer: torch.fx.Node | None,
    index: int | None,
    activation_bytes: int,
    sources: list[InputSource],
    storages: RegionStorages,
    counted: set[object],
) -> tuple[str | None, str | None, int, StorageRef | None]:
    """What a saved value keeps alive: for an activation (its forward `producer`), `_storage`; for a primal (`index`)
    the forward made, its storage (`_made_input`); else nothing beyond `activation_bytes` (a forward input held
    anyway, 0; an activation with no forward node, its own bytes)."""
    if producer is not None:
        return _storage(producer, activation_bytes, sources, storages, counted)
    if index is not None and _made_in_a_run(storages, index):  # an input the forward made: its saving keeps it
        ref, added = _made_input(storages, index, counted)
        return None, None, added, ref
    return None, None, activation_bytes, None


def _made_in_a_run(storages: RegionStorages, index: int) -> bool:
    """Whether the forward made primal `index` in some run of the region (the model or the caller may hold it in
    another: a loop's first block takes the call's tensor, the next ones what the block before made)."""
    return any(index in made for made in storages.made)


def _made_input(storages: RegionStorages, index: int, counted: set[object]) -> tuple[StorageRef, int]:
    """A primal the forward made (`RegionStorages.made`): where its storage comes from, and its storage's bytes in
    the region's first run (0 where held then; `RegionStorages.kept` gives every run's) where this partition has
    not counted it yet."""
    ref: StorageRef = ("input", index)
    if ref in counted:
        return ref, 0
    counted.add(ref)
    first = storages.made[0].get(index)
    return ref, first[1] if first is not None else 0


def _kind_and_source(
    value: object, index: int | None, sources: list[InputSource]
) -> tuple[SavedKind, str | None, tuple[str, ...]]:
    """A size, a forward input (which one, and its other names), or an activation."""
    if isinstance(value, (int, torch.SymInt)):
        return "symint", None, ()
    if index is not None and index < len(sources):
        return sources[index].kind, sources[index].name, sources[index].aliases
    return "activation", None, ()


def _view_of(producer: torch.fx.Node | None, alias_of: str | None) -> tuple[str, str] | None:
    """For a saved view: the node whose memory it shares, and that memory's human name."""
    if producer is None:
        return None
    root = storage_root(producer)
    return (root.name, alias_of or root.name) if root is not producer else None


def _storage(
    producer: torch.fx.Node, nbytes: int, sources: list[InputSource], storages: RegionStorages, counted: set[object]
) -> tuple[str | None, str | None, int, StorageRef | None]:
    """For a saved activation: what its memory is a view of (a forward input, or a forward value and the
    op that made it), the bytes it adds, each storage counted once (`counted` records those seen), and where its
    storage comes from where another region may keep it too (`SavedTensor.storage_ref`)."""
    alias_of = storage_op = None
    root = storage_root(producer)
    index_of_root = primal_index(root.name) if root.op == "placeholder" else None
    if root is not producer:
        if index_of_root is not None and index_of_root < len(sources):
            alias_of = sources[index_of_root].name
        else:
            alias_of, storage_op = root.name, op_name(root)
    if root.op == "placeholder":  # a view of an input: held by the model or the caller, unless the forward made it
        if index_of_root is None or not _made_in_a_run(storages, index_of_root):
            return alias_of, storage_op, 0, None
        made, added = _made_input(storages, index_of_root, counted)
        return alias_of, storage_op, added, made
    handed_on: StorageRef | None = ("output", root.name) if root.name in storages.handed_on[0] else None
    if root.name in counted:
        return alias_of, storage_op, 0, handed_on
    counted.add(root.name)
    return alias_of, storage_op, _storage_bytes(root) if root is not producer else nbytes, handed_on


def tangents(backward: torch.fx.GraphModule) -> list[TensorInfo]:
    return [
        tensor_info(n.name, n.meta.get("val"))
        for n in backward.graph.find_nodes(op="placeholder")
        if is_tangent(n.name)
    ]


def recomputed(backward: torch.fx.GraphModule) -> list[tuple[str, str]]:
    """Forward ops a partitioner placed in backward to recompute them: (node name, op)."""
    return [
        (n.name, op_name(n))
        for n in backward.graph.nodes
        if n.op == "call_function" and n.meta.get("partitioner_tag") == "is_forward"
    ]


def random_ops(graph: torch.fx.GraphModule, names: set[str]) -> list[str]:
    """The distinct random ops (by torch's own list) among the named nodes of graph."""
    from .why import op_types

    kinds = op_types()
    live = _live(graph)
    return sorted({op_name(n) for n in graph.graph.nodes if n.name in names and n in live and kinds.is_random(n)})


def _live(graph: torch.fx.GraphModule) -> set[torch.fx.Node]:
    """Nodes the graph's output depends on: a dead op left in a graph (the default partitioner leaves
    a `native_dropout` nobody reads) draws numbers no gradient uses."""
    live: set[torch.fx.Node] = set()
    pending = [graph.graph.output_node()]
    while pending:
        node = pending.pop()
        if node not in live:
            live.add(node)
            pending.extend(node.all_input_nodes)
    return live


def gradients(backward_with_nones: torch.fx.GraphModule, sources: list[InputSource]) -> list[GradientOutput]:
    """Pair each non-None backward output with the forward input it is the gradient of."""
    output = backward_with_nones.graph.output_node()
    values = output.args[0] if isinstance(output.args[0], (tuple, list)) else (output.args[0],)
    descs = output.meta.get("desc") or [None] * len(values)
    result = []
    for position, (value, desc) in enumerate(zip(values, descs)):
        if value is None:
            continue
        index = getattr(getattr(desc, "grad_of", None), "idx", position)
        source = sources[index]
        info = tensor_info(value.name, value.meta.get("val"))
        result.append(
            GradientOutput(value.name, source.name, source.kind, source.key, info.shape, info.dtype, source.aliases)
        )
    return result
