"""Why a value is saved for backward, in one sentence.

torch's min-cut partitioner keeps its ban reasons inside nested functions, so the
reason is derived here from the same rules, with torch's own op lists
(`torch._functorch.partitioners.get_default_op_list`) and the same wording.
"""

from __future__ import annotations

import functools
import operator

import torch
import torch.fx

from .compat import OpTypes, get_default_op_list
from .kinds import SavedKind
from .partitioners import Partitioner


@functools.lru_cache(maxsize=1)
def op_types() -> OpTypes:
    return get_default_op_list()


def _size(node) -> int:
    value = node.meta.get("val") if hasattr(node, "meta") else None
    return int(value.numel()) * value.element_size() if isinstance(value, torch.Tensor) else 0


def checkpoint_tag(joint_node: torch.fx.Node | None) -> str | None:
    tag = joint_node.meta.get("recompute") if joint_node is not None else None
    return str(tag).split(".")[-1] if tag is not None else None


def min_cut_ban(node: torch.fx.Node | None, op_types: OpTypes) -> str | None:
    """The reason min-cut would refuse to recompute `node`, as torch words it, or None."""
    if node is None or node.op != "call_function":
        return None
    if checkpoint_tag(node) == "MUST_SAVE":
        return "marked MUST_SAVE"
    if op_types.is_view(node):
        return None
    if op_types.is_random(node):
        return "random op"
    if op_types.is_compute_intensive(node):
        return "compute intensive op"
    inputs = sum(_size(arg) for arg in node.args if isinstance(arg, torch.fx.Node))
    if _size(node) * 4 < inputs:
        return "reduction op"
    return None


def why_saved(
    kind: SavedKind, producer: torch.fx.Node | None, users: list[str], partitioner: Partitioner, joint_nodes: dict
) -> str:
    """One sentence: kept input, checkpoint policy, ban, or the cheapest cut."""
    readers = ", ".join(users[:3]) + (" and others" if len(users) > 3 else "")
    read = f"read by {readers} in backward" if users else "kept for backward"
    if kind in ("parameter", "buffer", "input"):
        return f"a forward input kept alive, {read}: inputs cannot be recomputed."
    if kind == "symint":
        return f"a size, {read}."
    if producer is None:
        return f"{read}."
    source = producer
    if source.target is operator.getitem and isinstance(source.args[0], torch.fx.Node):
        source = source.args[0]
    joint_node = joint_nodes.get(source.name)
    tag = checkpoint_tag(joint_node)
    policy = f" (checkpoint policy: {tag})" if tag else ""
    if partitioner.why_saved == "default":
        return f"{read}; the default partitioner saves every forward value backward reads, recomputing only what checkpoint tags ask for{policy}."
    if partitioner.why_saved == "min_cut":
        ban = min_cut_ban(joint_node or source, op_types())
        if ban == "marked MUST_SAVE":
            return f"{read}; the checkpoint policy marks it MUST_SAVE, so min-cut never recomputes it."
        if ban is not None:
            return f"{read}; min-cut bans recomputing it: {ban} ({_target_name(source)}){policy}."
        return f"{read}; saving it is part of min-cut's cheapest cut (recomputing it would cost more){policy}."
    return f"{read}; chosen by the {partitioner.name} partitioner{policy}."


def _target_name(node) -> str:
    packet = getattr(node.target, "_overloadpacket", None)
    return str(packet).replace("aten::", "aten.") if packet is not None else str(node.target)
