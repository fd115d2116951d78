"""The code each plan pastes, and the one place that runs it: on a shadow of the user's model, never the model.

Every snippet is plain Python that a user pastes after building `model`. A snippet may wrap the forward of
blocks (checkpoint plans), may define `memory_budget`, a `torch._functorch.config.patch(...)` to run the
compiled model's first forward and backward under (budget plans), and may define `offload`, the
`saved_tensors_hooks` to run the forward under (offload plans). `run_code` executes exactly that text.
"""

from __future__ import annotations

import contextlib
import sys
import types
from typing import TYPE_CHECKING, NamedTuple

import torch
from torch import nn

from ...core.compat import child_modules, shallow_module_copy

if TYPE_CHECKING:
    from collections.abc import Iterator

MATMUL_OPS = ("mm", "addmm", "bmm", "baddbmm")
"""aten ops a "save matmuls" policy keeps (their `.default` overloads)."""
ATTENTION_OPS = (
    "_softmax",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
)
"""aten ops a "save attention" policy keeps: the written-out softmax and every fused attention kernel."""
POLICY_OPS = {"matmuls": MATMUL_OPS, "attention": ATTENTION_OPS}


def find_blocks(model: object) -> str | None:
    """The qualified name of the model's repeated-block container: the nn.ModuleList or nn.Sequential with the
    most children, all of one class (at least two); ties go to the one holding more parameters. `""` when the
    model itself is that container (`nn.Sequential(*blocks)`); None if there is none."""
    if not isinstance(model, nn.Module):
        return None
    best: tuple[int, int, str] | None = None
    for name, module in model.named_modules():
        if not isinstance(module, (nn.ModuleList, nn.Sequential)):
            continue
        children = list(module.children())
        if len(children) < 2 or len({type(c) for c in children}) != 1 or len(children) != len(child_modules(module)):
            continue
        size = sum(p.numel() for p in module.parameters())
        if size == 0:
            continue
        key = (len(children), size, name)
        if best is None or key[:2] > best[:2]:
            best = key
    return best[2] if best is not None else None


def reach(path: str) -> str:
    """`model.blocks` or `model.get_submodule("layers.0")` for a qualified name (`model` for the model itself):
    what the snippet writes."""
    if not path:
        return "model"
    parts = path.split(".")
    if all(p.isidentifier() for p in parts):
        return "model." + path
    return f"model.get_submodule({path!r})"


def budget_code(budget: float) -> str:
    return (
        "import torch._functorch.config\n\n"
        "# torch.compile's default backend partitions with min-cut, which reads this budget when it compiles:\n"
        "# run the compiled model's first forward and backward inside it, e.g.\n"
        "#     with memory_budget:\n"
        "#         loss = compiled(x).sum()\n"
        "#         loss.backward()\n"
        f"memory_budget = torch._functorch.config.patch(activation_memory_budget={budget!r})\n"
    )


def _blocks_line(path: str, every: int) -> str:
    blocks = reach(path)
    return f"for block in {blocks}:" if every == 1 else f"for block in list({blocks})[::{every}]:"


def checkpoint_code(path: str, every: int) -> str:
    """Full activation checkpointing of every `every`-th block of the container at `path`."""
    return (
        "import functools\n\n"
        "from torch.utils.checkpoint import checkpoint\n\n"
        f"{_blocks_line(path, every)}  # each block keeps only its inputs and reruns in backward\n"
        "    block.forward = functools.partial(checkpoint, block.forward, use_reentrant=False)\n"
    )


def selective_code(path: str, saves: str, every: int = 1) -> str:
    """Selective checkpointing of each block: a `create_selective_checkpoint_contexts` policy that saves
    the outputs of `saves` ("matmuls" or "attention") and recomputes the rest."""
    ops = ", ".join(f"torch.ops.aten.{op}.default" for op in POLICY_OPS[saves] if hasattr(torch.ops.aten, op))
    return (
        "import functools\n\n"
        "import torch\n"
        "from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts\n\n"
        f"SAVE = {{{ops}}}\n\n\n"
        "def policy(ctx, op, *args, **kwargs):\n"
        f'    """Save the {saves} outputs, recompute everything else in the block."""\n'
        "    return CheckpointPolicy.MUST_SAVE if op in SAVE else CheckpointPolicy.PREFER_RECOMPUTE\n\n\n"
        "context_fn = functools.partial(create_selective_checkpoint_contexts, policy)\n"
        f"{_blocks_line(path, every)}\n"
        "    block.forward = functools.partial(checkpoint, block.forward, use_reentrant=False, context_fn=context_fn)\n"
    )


def offload_code(min_bytes: int) -> str:
    """A `saved_tensors_hooks` pair that keeps saved tensors of `min_bytes` or more on the CPU until backward.
    Parameters and inputs that need a gradient (and views of them) stay: the model and the caller hold them on
    the device anyway, so a copy would only add a second one in backward. A pack hook cannot tell an input
    that needs no gradient from a non-differentiable activation (layer norm's statistics), so those move."""
    return (
        "import torch\n\n"
        f"MIN_BYTES = {min_bytes}  # saved tensors this large wait on the CPU until backward needs them\n\n\n"
        "def pack(t):\n"
        "    base = t if t._base is None else t._base\n"
        "    held = isinstance(base, torch.nn.Parameter) or (base.is_leaf and base.requires_grad)  # kept on device\n"
        "    if not held and t.untyped_storage().nbytes() >= MIN_BYTES and t.device.type != 'cpu':\n"
        "        return t.device, t.to('cpu', non_blocking=True)\n"
        "    return None, t\n\n\n"
        "def unpack(packed):\n"
        "    device, t = packed\n"
        "    return t if device is None else t.to(device, non_blocking=True)\n\n\n"
        "offload = torch.autograd.graph.saved_tensors_hooks(pack, unpack)\n"
        "# run the training step's forward inside it: `with offload: loss = model(x).sum()`, then loss.backward()\n"
    )


def shadow(model: nn.Module, path: str | None) -> nn.Module:
    """A copy that shares the model's parameters and submodules except along `path`: the root, each module on
    the way to the container, the container and its blocks are shallow copies with their own attribute and
    child tables, so a snippet that sets `block.forward` or replaces a block touches only the copies."""
    root = shallow_module_copy(model)
    parent = root
    for part in path.split(".") if path else []:
        child = child_modules(parent)[part]
        assert child is not None
        child = shallow_module_copy(child)
        child_modules(parent)[part] = child
        parent = child
    if path is not None:  # "" is the model itself: its blocks are copied
        for name, block in list(child_modules(parent).items()):
            if block is not None:
                child_modules(parent)[name] = shallow_module_copy(block)
    return root


PLAN_MODULE = "bwd_widgets_advice"
"""The module name a plan's code runs as (its `__name__`)."""


class Applied(NamedTuple):
    """What a plan's code left: the model, and the contexts it defined (null contexts where it defined none)."""

    model: nn.Module
    memory_budget: contextlib.AbstractContextManager
    """`memory_budget`: the config patch to compile under (budget plans)."""
    saved_tensors_hooks: contextlib.AbstractContextManager
    """`offload`: the hooks to run the forward under (offload plans)."""
    module: types.ModuleType | None = None
    """The module the code ran in: Dynamo imports a function's module by name where it resumes after a graph
    break (region plans), so a compile of such code runs under `importable(applied)`."""


def run_code(code: str, model: nn.Module, path: str | None) -> Applied:
    """Execute a plan's code with `model` bound to a shadow of the model: the shadow as the code left it, and
    the `memory_budget` and `offload` contexts the code defined."""
    module = types.ModuleType(PLAN_MODULE)
    namespace = module.__dict__
    namespace["model"] = shadow(model, path)
    exec(compile(code, "<bw.advise plan>", "exec"), namespace)
    budget, hooks = namespace.get("memory_budget"), namespace.get("offload")
    return Applied(
        namespace["model"],
        budget if budget is not None else contextlib.nullcontext(),
        hooks if hooks is not None else contextlib.nullcontext(),
        module,
    )


@contextlib.contextmanager
def importable(applied: Applied) -> Iterator[None]:
    """The plan's module in `sys.modules` for the length of a compile (what was there before is put back)."""
    before = sys.modules.get(PLAN_MODULE)
    if applied.module is not None:
        sys.modules[PLAN_MODULE] = applied.module
    try:
        yield
    finally:
        if before is None:
            sys.modules.pop(PLAN_MODULE, None)
        else:
            sys.modules[PLAN_MODULE] = before
