"""The advisor's plans on torch's newest activation-memory APIs, where the installed torch has them.

A memory budget per block (`torch.autograd.graph.region_activation_memory_budget`): min-cut takes one budget per
compiled graph and refuses a region that leaves part of a graph out, so the plan makes each block a graph of its
own (a graph break on each side) under its own budget, while the code around the blocks keeps the global budget.
bw's extraction keeps one run of a graph a model runs again (a block's frame past a graph break), so the plan is
verified as the user runs it: its pasted code, `torch.compile`, and a pack hook counting what the compiled forward
saves. The CPU-offload checkpoint policies (`CheckpointPolicy.MUST_CPU_OFFLOAD` / `PREFER_CPU_OFFLOAD` with
`torch._functorch.config.enable_activation_offloading`) are read from torch itself: a small probe is compiled with
every matmul tagged, and the offload copies (`prims.device_put`) its forward graph holds are counted; where torch
moves nothing the advisor says so instead of proposing the policy. Where a torch lacks a feature, one line says so.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch import nn

from ...core.capture import own_dynamo_entries
from ...core.compat import (
    cpu_offload_policies,
    functorch_config,
    graph_break_note,
    graph_break_reasons,
    pytree,
    region_memory_budget_available,
)
from ...core.errors import one_line
from ...extraction.extract import extract, prepared_call
from .code import importable, reach, run_code
from .plans import Plan

if TYPE_CHECKING:
    from collections.abc import Callable

    from ...core.kinds import Mode
    from ...extraction.result import BackwardExtraction


class AdvisorRun(Protocol):
    """What a region plan reads of the advisor's run (the advisor's `_Run`, which imports this module)."""

    model: Any
    inputs: tuple
    extract_kwargs: dict
    mode: Mode
    path: str | None
    base: BackwardExtraction | None
    step: int


REGION_API = "torch.autograd.graph.region_activation_memory_budget"


def region_missing() -> str:
    """The one line the advisor gives where this torch has no region budgets."""
    return f"per-block memory budgets: torch {torch.__version__} has no {REGION_API}: no region plan."


def offload_policies_missing() -> str:
    """The one line the advisor gives where this torch has no CPU-offload checkpoint policies."""
    return (
        f"CPU-offload checkpoint policies: torch {torch.__version__} lacks CheckpointPolicy.MUST_CPU_OFFLOAD / "
        "PREFER_CPU_OFFLOAD or torch._functorch.config.enable_activation_offloading: no offload-policy plan."
    )


def region_budget_code(path: str, budget: float) -> str:
    """Each block of the container at `path` partitioned under its own memory `budget` by torch.compile."""
    blocks = reach(path)
    return (
        "import functools\n\n"
        "import torch\n\n\n"
        "def with_region_budget(forward, budget):\n"
        '    """Under torch.compile the block becomes a graph of its own (a graph break on each side: min-cut takes\n'
        "    one budget per graph and refuses a region that leaves part of a graph out), partitioned at `budget`.\n"
        '    Run eagerly, the block runs as it was: the region raises outside torch.compile."""\n\n'
        "    @functools.wraps(forward)\n"
        "    def run(*args, **kwargs):\n"
        "        if not torch.compiler.is_compiling():\n"
        "            return forward(*args, **kwargs)\n"
        "        torch._dynamo.graph_break()\n"
        f"        with {REGION_API}(budget):\n"
        "            out = forward(*args, **kwargs)\n"
        "        torch._dynamo.graph_break()\n"
        "        return out\n\n"
        "    return run\n\n\n"
        f"BUDGETS = [{budget!r}] * len({blocks})  # one per block, in order; code outside the blocks keeps the global budget\n"
        f"for block, budget in zip({blocks}, BUDGETS):\n"
        "    block.forward = with_region_budget(block.forward, budget)\n"
    )


def compiled_saved_bytes(model: Callable[..., Any], args: tuple, kwargs: dict) -> int:
    """Bytes `torch.compile(model)` (aot_eager, AOT Autograd's partition as torch makes it) saves for backward in
    one forward, by a pack hook around the call: each storage once, leaving out the parameters, buffers and the
    call's tensors, which the model and the caller hold anyway. Dynamo's entries for this call are dropped after
    (the user's compiled models do not recompile), and the random state is put back."""
    module = model if isinstance(model, nn.Module) else None
    held = [
        *(module.parameters() if module else ()),
        *(module.buffers() if module else ()),
        *pytree.tree_leaves((args, kwargs)),
    ]
    held_storages = {t.untyped_storage().data_ptr() for t in held if isinstance(t, torch.Tensor) and t.numel()}
    counted: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if tensor.numel() and storage.data_ptr() not in held_storages:
            counted.setdefault(storage.data_ptr(), storage.nbytes())
        return tensor

    with own_dynamo_entries(), torch.random.fork_rng(devices=[]), torch.enable_grad():
        compiled = torch.compile(model, backend="aot_eager")
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            compiled(*args, **kwargs)
    return sum(counted.values())


def region_plan(run: AdvisorRun, budget: float) -> Plan:
    """Every block at `budget` (the lowest budget the advisor tries), the rest at the global budget; real mode:
    its saved bytes counted by running the pasted code compiled, as the user will. Listed beside the Pareto set:
    bw's extraction keeps one run of a block's graph, so the plan's peak is not re-extracted."""
    assert run.base is not None and run.path is not None
    code = region_budget_code(run.path, budget)
    base = run.base
    plan = Plan(
        f"each block at region budget {budget:g}", "region", code, base.peak_activation_only_bytes,
        base.saved_activation_bytes, 0, step_bytes=run.step,
    )  # fmt: skip
    if run.mode != "real":
        plan.note = "not verified: it is counted by running the compiled model, which fake mode does not"
        return plan
    breaks_before = graph_break_reasons()
    try:
        applied = run_code(code, run.model, run.path)
        call = prepared_call(applied.model, run.inputs, run.extract_kwargs, run.mode)
        with importable(applied):
            saved = compiled_saved_bytes(call.model, tuple(call.inputs), dict(call.keywords))
    except Exception as error:  # noqa: BLE001 - the plan stays listed, unverified, with why
        plan.note = f"not verified: its compiled forward could not run here ({one_line(error)})"
        inside = [r for r in graph_break_reasons() - breaks_before if "torch._dynamo.graph_break()" not in r]
        if inside and REGION_API in str(error):
            plan.note += (
                "; Dynamo broke a graph inside a block, so part of the region ran eagerly, where torch refuses it: "
                + graph_break_note(inside[0])
            )
        return plan
    dropped = max(0, base.saved_activation_bytes - saved)
    plan.saved_bytes, plan.predicted_peak_bytes = saved, base.peak_activation_only_bytes - dropped
    plan.note = (
        f"verified as you run it: the pasted code under torch.compile (aot_eager) saves {saved:,} B for backward "
        f"(a pack hook's count), against {base.saved_activation_bytes:,} B with no budget; predicted peak: min-cut "
        "1.0's activation-only peak less the bytes no longer saved, an estimate that leaves out what each block "
        "recomputes in backward. Each block is its own graph (graph breaks), so the compiled "
        "model runs more graphs; the recompute is min-cut's within each block"
    )
    return plan


PROBE_OPS = ("mm", "addmm")


@functools.cache
def offload_policy_moved_bytes(policy_name: str) -> int:
    """Bytes this torch's compiled forward copies to the CPU (`prims.device_put` nodes) when every matmul of a
    probe (two linear layers, checkpointed) is tagged `CheckpointPolicy.<policy_name>` and AOT Autograd's
    offload pass is on: what torch does with the policy, read from its partition. Once per process."""
    from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

    tag = getattr(CheckpointPolicy, policy_name)
    tagged = {getattr(torch.ops.aten, op).default for op in PROBE_OPS}

    def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
        return tag if op in tagged else CheckpointPolicy.PREFER_RECOMPUTE

    with torch.random.fork_rng(devices=[]):
        probe = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 8))
        x = torch.randn(4, 8)
    context_fn = functools.partial(create_selective_checkpoint_contexts, policy)
    forward = probe.forward
    probe.forward = functools.partial(checkpoint, forward, use_reentrant=False, context_fn=context_fn)  # type: ignore[method-assign]
    with functorch_config.patch(enable_activation_offloading=True):
        e = extract(probe, x, partitioner="min_cut", cache=False)
    moved = 0
    for node in e.forward.graph.nodes:
        value = node.meta.get("val")
        if node.target is torch.ops.prims.device_put.default and isinstance(value, torch.Tensor):
            moved += value.numel() * value.element_size()
    return moved


def offload_policy_note() -> str:
    """What the CPU-offload checkpoint policies do on this torch, in one line."""
    names = cpu_offload_policies()
    if not names:
        return offload_policies_missing()
    try:
        moved = {name: offload_policy_moved_bytes(name) for name in names}
    except Exception as error:  # noqa: BLE001 - the note says the probe failed, the advice stands
        return f"CPU-offload checkpoint policies: torch {torch.__version__}'s probe could not run ({one_line(error)})."
    policies = " / ".join(f"CheckpointPolicy.{name}" for name in names)
    if not any(moved.values()):
        return (
            f"CPU-offload checkpoint policies: on torch {torch.__version__}, {policies} with "
            "torch._functorch.config.enable_activation_offloading=True move nothing: a compiled probe with every "
            "matmul tagged has no offload copy (prims.device_put) in its forward, 0 B moved (the offload pass acts "
            "only on nodes marked should_offload, which nothing in this torch marks), and the tagged outputs stay "
            "saved on their device as with MUST_SAVE: no offload-policy plan; the saved_tensors_hooks offload plan "
            "moves saved tensors in an eager step."
        )
    said = ", ".join(f"{name} {n:,} B" for name, n in moved.items())
    return (
        f"CPU-offload checkpoint policies: on torch {torch.__version__} a compiled probe with every matmul tagged "
        f"moves {said} to the CPU; this advisor does not yet size such a plan for the model."
    )


def newest_notes() -> list[str]:
    """The lines on the newest APIs that every advice carries: a missing feature, or what torch does with it."""
    notes = [] if region_memory_budget_available() else [region_missing()]
    return [*notes, offload_policy_note()]


def region_budget(budgets: tuple) -> float | None:
    """The budget a region plan gives the blocks: the lowest one tried below 1.0 (None: none, or no region API)."""
    below = [b for b in budgets if b < 1.0]
    return min(below) if below and region_memory_budget_available() else None
