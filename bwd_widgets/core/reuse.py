"""Work the partitions of one joint graph share, done once per distinct input.

Each answer kept here is a pure function of an input compared whole, so a kept answer is the one a fresh
call would give:

- min-cut's max-flow solver (`compat.min_cut_solver`: `networkx.minimum_cut` on torch 2.13 and 2.14, torch's own
  on 2.15) on a flow graph torch's min-cut builds again: below budget 1, torch cuts the same three flow graphs
  for every budget before its knapsack. Keyed by the graph's nodes and edges with their capacities, in order
  (each solver is deterministic on them); torch sorts the cut it reads back.
- torch's common-subexpression pass on the joint graph (`fx_graph_cse`, which min-cut runs first): its
  output, kept as the trace's working copy, is handed back as it is, since the pass finds nothing more in
  a graph it made (a fresh copy of 8,000 nodes per budget otherwise).
- torch's FLOP counter on one op: keyed by the op and its arguments, tensors by shape, stride, offset,
  dtype and device (all a fake run of the op reads), so the twelve alike layers of a transformer and the
  backward graphs of eleven budgets count each distinct op once.
- the forward and backward graphs min-cut builds from the saved set it chose (`Splits`): after
  `choose_saved_values_set`, torch's min-cut reads neither the budget nor anything the budget changed, only the
  joint graph, the saved set in its order and torch's other settings, so budgets that choose the same set (0.4
  and 0.5, or 0.6 to 0.9, on the 12-layer transformer) build the same two graphs. Keyed by the saved nodes'
  names in order and torch's partitioner settings but the budget.
"""

from __future__ import annotations

import contextlib
import hashlib
import operator
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.fx

from .codegen import copy_graph_module
from .compat import (
    FakeTensorMode,
    detect_fake_mode,
    functorch_config,
    min_cut_solver,
    op_schema,
    torch_partitioners,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

_SCALARS = (type(None), bool, int, float, str, torch.dtype, torch.device, torch.layout, torch.memory_format)


class _Unkeyable(Exception):
    """An argument the key cannot take whole (a symbolic size, an opaque object): count it as before."""


class MinCuts:
    """The cuts of the flow graphs one trace's partitions built, the most recent `size` kept."""

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self.cuts: OrderedDict[str, tuple] = OrderedDict()
        self.hits = 0

    @contextlib.contextmanager
    def sharing(self) -> Iterator[None]:
        """Answer min-cut's solver from the kept cuts for the duration of one split (the caller holds the split
        lock: torch's partitioner looks the solver up where this puts it, `compat.min_cut_solver`)."""
        module, name = min_cut_solver()
        original: Callable[..., tuple] = getattr(module, name)

        def minimum_cut(flow_graph: Any, s: object, t: object, *args: object, **kwargs: object) -> tuple:
            if args or kwargs:
                return original(flow_graph, s, t, *args, **kwargs)
            key = flow_key(flow_graph, s, t)
            kept = self.cuts.get(key)
            if kept is None:
                value, (reachable, non_reachable) = original(flow_graph, s, t)
                kept = (value, frozenset(reachable), frozenset(non_reachable))
                self.cuts[key] = kept
                while len(self.cuts) > self.size:
                    self.cuts.popitem(last=False)
            else:
                self.hits += 1
                self.cuts.move_to_end(key)
            value, reachable, non_reachable = kept
            return value, (set(reachable), set(non_reachable))

        setattr(module, name, minimum_cut)
        try:
            yield
        finally:
            setattr(module, name, original)


GraphPair = tuple[torch.fx.GraphModule, torch.fx.GraphModule]
"""A split's forward and backward graphs, as torch's partitioners return them."""


class _KnownSplit(Exception):
    """Ends a min-cut run once its saved set is one whose graphs are kept: carries them out of torch's partitioner."""

    def __init__(self, graphs: GraphPair) -> None:
        super().__init__("a split already made from this saved set")
        self.graphs = graphs


class Splits:
    """The forward and backward graphs of one trace's min-cut splits, by the saved set torch chose, the most
    recent `size` kept (a pair holds a copy of the model's graph: a few pairs, not one per budget). Kept and handed
    out as copies: a partition's graphs are its own, whatever is done to them later."""

    def __init__(self, size: int = 4) -> None:
        self.size = size
        self.graphs: OrderedDict[str, GraphPair] = OrderedDict()
        self.hits = 0

    def made(self, partition: Callable[[], GraphPair]) -> GraphPair:
        """Run `partition` (torch's min-cut on the trace's joint graph, under the split lock); where the saved set
        it chooses is one an earlier split chose, its run ends there and copies of that split's graphs come back.
        Call it inside the decisions' recording: the choice is recorded before the run ends."""
        original: Callable[..., list] | None = getattr(torch_partitioners, "choose_saved_values_set", None)
        if not callable(original):  # another torch: its partitioner runs as it is
            return partition()
        chosen: list[str] = []
        thread = threading.get_ident()

        def choose_saved_values_set(*args: Any, **kwargs: Any) -> list:
            saved = original(*args, **kwargs)
            if threading.get_ident() != thread:  # torch compiling elsewhere (the user's own thread) runs as it is
                return saved
            if getattr(functorch_config, "_sync_decision_cross_ranks", False):  # the set may change after: no key
                chosen.append("")
                return saved
            chosen.append(_split_key(saved))
            kept = self.graphs.get(chosen[0]) if len(chosen) == 1 and chosen[0] else None
            if kept is not None:
                raise _KnownSplit(kept)
            return saved

        torch_partitioners.choose_saved_values_set = choose_saved_values_set
        try:
            graphs = partition()
        except _KnownSplit as known:
            self.hits += 1
            self.graphs.move_to_end(chosen[0])
            forward, backward = known.graphs
            return _copy(forward), _copy(backward)
        finally:
            torch_partitioners.choose_saved_values_set = original
        if len(chosen) == 1 and chosen[0]:  # one choice made them (min-cut's shortcut to the default partition: none)
            self.graphs[chosen[0]] = _copy(graphs[0]), _copy(graphs[1])  # kept as made
            while len(self.graphs) > self.size:
                self.graphs.popitem(last=False)
        return graphs


def _copy(graph: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """`copy_graph_module`, its output's metadata too: torch's `desc` there says whose gradient each output is."""
    copy = copy_graph_module(graph)
    copy.graph.output_node().meta = dict(graph.graph.output_node().meta)
    return copy


def _split_key(saved: list) -> str:
    """The saved nodes by name, in torch's order (the forward returns them so), and every setting the graphs'
    making may read: functorch's but the budget, which min-cut reads only while choosing, and Inductor's
    (`_extract_fwd_bwd_modules` reads its `post_grad_fusion_options`)."""
    settings = functorch_config.get_config_copy()
    settings.pop("activation_memory_budget", None)
    inductor = getattr(torch_partitioners, "inductor_config", None)
    made_with = sorted(inductor.get_config_copy().items()) if inductor is not None else None
    return repr(([getattr(n, "name", n) for n in saved], sorted(settings.items()), made_with))


_CSE_MADE = "_bwd_widgets_cse_made"


@contextlib.contextmanager
def cse_once() -> Iterator[None]:
    """For one split (under the split lock): torch's `fx_graph_cse` returns a graph it made already as it is,
    and marks each graph it makes, so a working copy kept from an earlier split skips the pass."""
    original: Callable[..., torch.fx.Graph] | None = getattr(torch_partitioners, "fx_graph_cse", None)
    if not callable(original):  # another torch: its partitioner runs as it is
        yield
        return

    def fx_graph_cse(fx_g: torch.fx.Graph, *args: Any, **kwargs: Any) -> torch.fx.Graph:
        made_with = repr((_described(args), sorted(_described(kwargs).items())))
        if getattr(fx_g, _CSE_MADE, None) == made_with:
            return fx_g
        result = original(fx_g, *args, **kwargs)
        setattr(result, _CSE_MADE, made_with)
        return result

    torch_partitioners.fx_graph_cse = fx_graph_cse  # type: ignore[attr-defined]  # imported there, not re-exported
    try:
        yield
    finally:
        torch_partitioners.fx_graph_cse = original  # type: ignore[attr-defined]  # imported there, not re-exported


def _described(arguments: Any) -> Any:
    """The CSE pass's arguments as its mark records them, a function by its name. torch 2.14 on passes
    `extra_node_key`, a function min-cut makes anew per call (`partition_key`: does the backward need this
    node?) from the very graph it hands the pass. A graph the pass made under that key is its own fixed point:
    its merged nodes are needed by the backward exactly where the nodes they stand for were, so the key made
    from it marks the same nodes, and the pass would return it unchanged (tests/test_studio.py checks that
    on every tested torch)."""
    if isinstance(arguments, dict):
        return {k: _described(v) for k, v in arguments.items()}
    if isinstance(arguments, (tuple, list)):
        return type(arguments)(_described(v) for v in arguments)
    return getattr(arguments, "__qualname__", arguments) if callable(arguments) else arguments


def flow_key(flow_graph: Any, s: object, t: object) -> str:
    """A digest of everything preflow-push reads: nodes and edges in order, with their capacities."""
    text = repr((s, t, tuple(flow_graph.nodes), tuple(flow_graph.edges(data="capacity"))))
    return hashlib.sha1(text.encode()).hexdigest()


def counted_flops(gm: torch.fx.GraphModule, kept: dict) -> dict[str, int] | None:
    """FLOPs of each node of `gm` by torch's counter, run once per distinct op and arguments (`kept` holds
    the counts across calls); None where a node is not a plain aten op on values its graph recorded: the
    caller runs the whole graph then."""
    plan: list[tuple[str, tuple | None, torch.fx.Node]] = []
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output") or _getitem_of_tuple(node):
            plan.append((node.name, None, node))
            continue
        schema = op_schema(node.target)  # an aten op (OpOverload) carries its schema
        if node.op != "call_function" or not isinstance(schema, torch.FunctionSchema):
            return None
        if schema.is_mutable:
            return None  # run on the recorded values, it would change them
        try:
            plan.append((node.name, _op_key(node), node))
        except _Unkeyable:
            return None
    missing = {key: node for _, key, node in plan if key is not None and key not in kept}
    if missing:
        _count(missing, kept)
    return {name: 0 if key is None else kept[key] for name, key, _ in plan}


def _count(missing: dict[tuple, torch.fx.Node], kept: dict) -> None:
    from torch.utils.flop_counter import FlopCounterMode

    values = [n.meta["val"] for node in missing.values() for n in node.all_input_nodes]
    fake_mode = detect_fake_mode([v for v in values if isinstance(v, torch.Tensor)]) or FakeTensorMode()
    counter = FlopCounterMode(display=False)
    with fake_mode, counter, torch.no_grad():
        for key, node in missing.items():
            args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: n.meta["val"])
            op = cast("Callable", node.target)  # an aten op: counted_flops planned no other
            before = counter.get_total_flops()
            op(*args, **kwargs)
            kept[key] = counter.get_total_flops() - before


def _getitem_of_tuple(node: torch.fx.Node) -> bool:
    """`operator.getitem` on a multi-output op's tuple: it dispatches nothing, so it counts nothing."""
    if node.op != "call_function" or node.target is not operator.getitem:
        return False
    source = node.args[0]
    return isinstance(source, torch.fx.Node) and isinstance(source.meta.get("val"), (tuple, list))


def _op_key(node: torch.fx.Node) -> tuple:
    return (node.target, _value_key(node.args), _value_key(tuple(sorted(node.kwargs.items()))))


def _value_key(value: object) -> object:
    if isinstance(value, torch.fx.Node):
        val = value.meta.get("val")
        if isinstance(val, torch.Tensor):
            sizes = (*val.shape, *val.stride(), val.storage_offset())
            if not all(type(s) is int for s in sizes):
                raise _Unkeyable("a symbolic size")
            return ("tensor", tuple(val.shape), val.stride(), val.storage_offset(), val.dtype, val.device)
        if type(val) in (bool, int, float):
            return (type(val).__name__, val)
        raise _Unkeyable("a node without a plain recorded value")
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_value_key(v) for v in value))
    if isinstance(value, _SCALARS):
        return (type(value).__name__, value)
    raise _Unkeyable(type(value).__name__)
