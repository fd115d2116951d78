"""Why a value is saved for backward, or recomputed there, in one sentence with torch's own phrase beside it.

The reasons are torch's, read from its partitioner's decision data (`core/decisions.py`): the reason on the
min-cut flow graph's edge, the cut itself, the knapsack's choice below budget 1, the checkpoint policy.
This module only words them; it decides nothing.
"""

from __future__ import annotations

import functools
import operator
from typing import TYPE_CHECKING, NamedTuple

import torch
import torch.fx

from .compat import OpTypes, get_default_op_list

if TYPE_CHECKING:
    from .decisions import Decisions, MinCutRun
    from .kinds import SavedKind
    from .partitioners import Partitioner

UNKNOWN = "reason unknown on this torch"


class Reason(NamedTuple):
    """A reason in a user's words, and torch's own phrase for it ("" where torch has none)."""

    text: str
    torch: str


BAN_WORDS = {
    "materialized in backward": "a backward op reads it and cannot fuse its recomputation, so recomputing it is not free",
    "not in recomputable allowlist": "its op is not on min-cut's list of ops that are cheap to recompute",
    "reduction op": "it is over 4x smaller than its inputs, so keeping it is cheaper than keeping them",
    "compute intensive op": "its op (a matmul or convolution) costs too much to compute twice",
    "random op": "recomputing it would draw new random numbers",
    "marked MUST_SAVE": "the checkpoint policy marks it MUST_SAVE",
    "primal input": "it is a forward input",
    "forward RNG seed": "it is the forward's random seed",
    "non-builtin op": "it is a custom op, which min-cut does not recompute",
    "too far from backward": "it is computed too far from backward to recompute",
}
"""torch's `should_ban_recomputation` phrases in words a user reads; an unlisted phrase is shown as torch's."""


@functools.lru_cache(maxsize=1)
def op_types() -> OpTypes:
    """torch's own op classification (views, random ops), as the partitioners use it."""
    return get_default_op_list()


def checkpoint_tag(joint_node: torch.fx.Node | None) -> str | None:
    tag = joint_node.meta.get("recompute") if joint_node is not None else None
    return str(tag).split(".")[-1] if tag is not None else None


def _source(producer: torch.fx.Node) -> torch.fx.Node:
    """A tuple element's producer is the op that returned the tuple."""
    if producer.target is operator.getitem and isinstance(producer.args[0], torch.fx.Node):
        return producer.args[0]
    return producer


def _budget(decisions: Decisions) -> str:
    return f"{decisions.budget:g}" if decisions.budget is not None else "1"


def _min_cut_saved(name: str, decisions: Decisions, run: MinCutRun, view_of: tuple[str, str] | None) -> Reason:
    """torch's reason for a value its min-cut plan saves; for a view, its memory's reason too."""
    knapsack = decisions.knapsack
    ban = run.cannot_recompute.get(name)
    if knapsack is not None and decisions.route == "knapsack" and name in knapsack.saved:
        banned = f"; torch banned recomputing it: {BAN_WORDS.get(ban, ban)} (torch: \u201c{ban}\u201d)" if ban else ""
        text = f"below budget {_budget(decisions)} torch's knapsack kept it, as recomputing it costs more runtime per byte freed{banned}"
        return Reason(text, "knapsack: saved")
    if ban is not None:
        phrase = f"cannot recompute: {ban}"
        return Reason(
            f"torch's min-cut will not recompute it: {BAN_WORDS.get(ban, ban)} (torch: \u201c{phrase}\u201d)", phrase
        )
    if view_of is not None and view_of[0] in run.cannot_recompute:
        root, shown = view_of
        root_ban = run.cannot_recompute[root]
        phrase = f"cannot recompute: {root_ban}"
        text = (
            f"a view of {shown}, whose memory it keeps; torch's min-cut will not recompute {shown}: "
            f"{BAN_WORDS.get(root_ban, root_ban)} (torch: \u201c{phrase}\u201d)"
        )
        return Reason(text, phrase)
    if name in run.saved:
        weight = run.weights.get(name)
        cost = f", weight {weight:,.0f}" if weight is not None else ""
        text = f"saving it is part of torch's minimum cut, cheaper than recomputing it from what is saved (torch: cut edge {name}_in \u2192 {name}_out{cost})"
        return Reason(text, "min-cut: in the cut")
    unknown = decisions.unknown or UNKNOWN
    return Reason(f"torch saved it outside its min-cut decision data: {unknown}", unknown)


def why_saved(
    kind: SavedKind,
    producer: torch.fx.Node | None,
    users: list[str],
    partitioner: Partitioner,
    joint_nodes: dict,
    decisions: Decisions,
    view_of: tuple[str, str] | None = None,
) -> Reason:
    """One sentence: a kept input, a checkpoint policy, or torch's own min-cut reason (`view_of`: the node a
    saved view shares memory with, and its human name)."""
    readers = ", ".join(users[:3]) + (" and others" if len(users) > 3 else "")
    read = f"read by {readers} in backward" if users else "kept for backward"
    if kind in ("parameter", "buffer", "input"):
        return Reason(f"a forward input kept alive, {read}: inputs cannot be recomputed.", "")
    if kind == "symint":
        return Reason(f"a size, {read}.", "")
    if producer is None:
        return Reason(f"{read}.", "")
    source = _source(producer)
    tag = checkpoint_tag(joint_nodes.get(source.name))
    policy = f" (checkpoint policy: {tag})" if tag else ""
    if partitioner.why_saved == "default":
        text = f"{read}; the default partitioner saves every forward value backward reads, recomputing only what checkpoint tags ask for{policy}."
        return Reason(text, "")
    if not decisions.reachable:
        unknown = decisions.unknown or UNKNOWN
        return Reason(f"{read}; {unknown}{policy}.", unknown)
    if decisions.route == "inputs":
        text = f"{read}; at budget {_budget(decisions)} torch saves only the forward inputs and values the checkpoint policy must save{policy}."
        return Reason(text, "budget 0: inputs only")
    run = decisions.chosen
    if run is None:
        return Reason(f"{read}; chosen by the {partitioner.name} partitioner{policy}.", "")
    reason = _min_cut_saved(source.name, decisions, run, view_of)
    return Reason(f"{read}; {reason.text}{policy}.", reason.torch)


def why_recomputed(
    name: str, partitioner: Partitioner, joint_nodes: dict, decisions: Decisions, in_forward: bool = True
) -> str:
    """One sentence: why torch's partitioner computes this forward value again in backward.

    A forward op the forward graph never runs (a `detach` only backward reads, an output of a recomputed
    op that forward never picked) is computed once, in backward: torch's own count of rematerialized ops
    (`AOT_PARTITIONER_DEBUG`) leaves it out, and so does this sentence."""
    if not in_forward:
        joint = joint_nodes.get(name)
        source = joint.args[0] if joint is not None and joint.target is operator.getitem else None
        if isinstance(source, torch.fx.Node):
            return f"an output of {source.name}, which backward recomputes; forward never picked this output, so it is computed only here."
        return "forward never computes it: only backward reads it, so torch computes it once, here, not again."
    tag = checkpoint_tag(joint_nodes.get(name))
    if partitioner.why_saved == "default":
        return (
            f"the checkpoint policy asks to recompute it ({tag})." if tag else "recomputed by the default partitioner."
        )
    if not decisions.reachable:
        return f"{decisions.unknown or UNKNOWN}."
    knapsack = decisions.knapsack
    if decisions.route == "knapsack" and knapsack is not None and name in knapsack.recomputed:
        return f"below budget {_budget(decisions)} torch's knapsack chose to recompute it, freeing its memory for the least estimated runtime."
    if decisions.route == "inputs":
        return f"at budget {_budget(decisions)} torch saves only the forward inputs: everything else is recomputed."
    run = decisions.chosen
    if run is None:
        return f"recomputed by the {partitioner.name} partitioner."
    lifted = _lifted_ban(name, decisions, run)
    if lifted:
        return lifted
    if name in run.must_recompute:
        return f"the checkpoint policy marks it for recomputation ({tag}) (torch: \u201cmust recompute: marked by checkpoint policy\u201d)."
    weight = run.weights.get(name)
    cost = (
        f" (torch: its edge {name}_in \u2192 {name}_out, weight {weight:,.0f}, is not cut)"
        if weight is not None
        else ""
    )
    return f"recomputing it from saved values is cheaper than saving it, by torch's minimum cut{cost}."


def _lifted_ban(name: str, decisions: Decisions, run: MinCutRun) -> str:
    """Below budget 1 torch reruns min-cut with some bans off: say which, when plain min-cut banned this."""
    plain = decisions.runs[0] if decisions.runs else None
    ban = plain.cannot_recompute.get(name) if plain is not None and plain is not run else None
    if plain is None or ban is None or name in run.cannot_recompute:
        return ""
    off = [option for option, on in plain.options.items() if on and not run.options.get(option, False)]
    return (
        f"below budget {_budget(decisions)} torch reran min-cut with {', '.join(off) or 'some bans'} off, and that plan "
        f"recomputes it; plain min-cut would not: {BAN_WORDS.get(ban, ban)} (torch: \u201ccannot recompute: {ban}\u201d)."
    )
