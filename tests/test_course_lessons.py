"""What notebooks 8 (notebooks/08_what_you_choose_to_save.ipynb) and 10 (notebooks/10_the_whole_bill.ipynb) teach,
held against torch itself: each claim their prose makes is run here on the installed torch (2.13 in .venv, 2.15 in
the newer-torch venvs), so a torch that behaves otherwise fails a test instead of leaving the course wrong. The
notebooks' own numbers are measured by their cells and pinned by nbval; these tests hold the sentences around them."""

from __future__ import annotations

import functools
import gc
import json
import logging
import re
import warnings
import weakref
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch._dynamo
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from bwd_widgets.examples import MLP, Block

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "08_what_you_choose_to_save.ipynb"
FUNCTORCH = torch._functorch.config


def saved_by(run, *held):
    """Bytes and shapes of what autograd keeps while `run()` executes, by a pack hook, each storage once, leaving
    out `held` (the notebook's `saved_by`, written again so the test does not trust the notebook's code)."""
    held_storages = {t.untyped_storage().data_ptr() for t in held}
    kept = {}

    def pack(t):
        storage = t.untyped_storage()
        if t.numel() and storage.data_ptr() not in held_storages:
            kept[storage.data_ptr()] = (tuple(t.shape), storage.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = run()
    return sum(n for _, n in kept.values()), sorted(shape for shape, _ in kept.values()), out


def compiled_saves(model, inputs, backend="aot_eager", **config):
    """What one forward of torch.compile(model, backend) keeps, by the pack hook, under functorch settings."""
    torch._dynamo.reset()
    try:
        with FUNCTORCH.patch(**config):
            nbytes, shapes, out = saved_by(
                lambda: torch.compile(model, backend=backend)(inputs), *model.parameters(), *model.buffers(), inputs
            )
        out.sum().backward()
    finally:
        torch._dynamo.reset()
    return nbytes, shapes


def backward_fails_after_add_(op) -> bool:
    y = op(torch.randn(4, requires_grad=True))
    y.add_(1)
    try:
        y.sum().backward()
    except RuntimeError as error:
        assert "modified by an inplace operation" in str(error)
        return True
    return False


# --- 1. in-place ops and the version counter ---

SAVES = {
    torch.sin: "_saved_self",
    torch.exp: "_saved_result",
    torch.sigmoid: "_saved_result",
    torch.relu: "_saved_result",
}
"""The ops notebook 8 lists, and the one saved tensor each keeps for backward."""


@pytest.mark.parametrize("op", list(SAVES), ids=lambda op: op.__name__)
def test_an_in_place_op_fails_backward_exactly_when_the_op_saved_its_result(op):
    saved = [n for n in dir(op(torch.randn(3, requires_grad=True)).grad_fn) if n.startswith("_saved_")]
    assert saved == [SAVES[op]]
    assert backward_fails_after_add_(op) == (SAVES[op] == "_saved_result")


def test_the_version_counter_error_reads_as_the_notebook_explains_it():
    a = torch.randn(4, requires_grad=True)
    y = a.exp()
    assert y._version == 0
    y.add_(1)
    assert y._version == 1
    with pytest.raises(RuntimeError) as raised:
        y.sum().backward()
    message = str(raised.value)
    assert "[torch.FloatTensor [4]], which is output 0 of Exp, is at version 1; expected version 0 instead" in message
    assert "Hint:" in message and "set_detect_anomaly" in message


def test_anomaly_mode_names_the_forward_call():
    a = torch.randn(4, requires_grad=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.autograd.detect_anomaly(check_nan=False):
            y = a.exp()
            y.add_(1)
            with pytest.raises(RuntimeError):
                y.sum().backward()
    firsts = [str(w.message).splitlines()[0] for w in caught]
    assert "Error detected in ExpBackward0. Traceback of forward call that caused the error:" in firsts


def test_data_silences_the_check_and_the_gradient_is_wrong():
    x = torch.randn(16, requires_grad=True)
    z = x.exp()
    z.data.add_(1)
    z.sum().backward()
    assert torch.allclose(x.grad, x.exp().detach() + 1) and not torch.allclose(x.grad, x.exp().detach())


def test_relu_inplace_after_a_linear_is_safe_and_after_exp_is_not():
    def gradient(between):
        torch.manual_seed(0)
        linear, inputs = torch.nn.Linear(16, 16), torch.randn(4, 16, requires_grad=True)
        hidden = linear(inputs) if between is None else between(linear(inputs))
        torch.nn.ReLU(inplace=True)(hidden).sum().backward()
        return inputs.grad

    torch.manual_seed(0)
    linear, inputs = torch.nn.Linear(16, 16), torch.randn(4, 16, requires_grad=True)
    torch.relu(linear(inputs)).sum().backward()
    assert torch.equal(gradient(None), inputs.grad)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        gradient(torch.exp)


# --- 2. custom autograd.Function ---


class SigmoidSavingInput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad * s * (1 - s)


class SigmoidSavingOutput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        s = torch.sigmoid(x)
        ctx.save_for_backward(s)
        return s

    @staticmethod
    def backward(ctx, grad):
        (s,) = ctx.saved_tensors
        return grad * s * (1 - s)


class SigmoidOnCtx(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.s = torch.sigmoid(x)
        return ctx.s

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.s * (1 - ctx.s)


class SigmoidOnce(SigmoidSavingOutput):
    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        (s,) = ctx.saved_tensors
        return grad * s * (1 - s)


FUNCTIONS = [SigmoidSavingInput, SigmoidSavingOutput, SigmoidOnCtx, SigmoidOnce]


@pytest.mark.parametrize("fn", FUNCTIONS, ids=lambda f: f.__name__)
def test_each_sigmoid_passes_gradcheck(fn):
    assert torch.autograd.gradcheck(fn.apply, (torch.randn(8, 16, dtype=torch.double, requires_grad=True),))


def test_between_two_linears_saving_the_output_keeps_one_tensor_less_and_matches_torch_sigmoid():
    first, second, batch = torch.nn.Linear(256, 256), torch.nn.Linear(256, 256), torch.randn(64, 256)
    params = [*first.parameters(), *second.parameters(), batch]
    kept = {
        fn: saved_by(lambda fn=fn: second(fn(first(batch))), *params)[:2]
        for fn in (SigmoidSavingInput.apply, SigmoidSavingOutput.apply, torch.sigmoid)
    }
    by_input, by_output, builtin = kept.values()
    assert by_input == (2 * 64 * 256 * 4, [(64, 256), (64, 256)])
    assert by_output == builtin == (64 * 256 * 4, [(64, 256)])


@pytest.mark.parametrize("fn", [SigmoidSavingOutput, SigmoidOnCtx], ids=lambda f: f.__name__)
def test_a_ctx_attribute_hides_from_pack_hooks_and_from_the_version_check(fn):
    seen = saved_by(lambda: fn.apply(torch.randn(64, 256, requires_grad=True)))[0]
    x = torch.randn(64, 256, requires_grad=True)
    s = fn.apply(x)
    s.mul_(2)
    if fn is SigmoidOnCtx:
        assert seen == 0
        s.sum().backward()  # no error ...
        true = torch.sigmoid(x.detach())
        assert not torch.allclose(x.grad, true * (1 - true))  # ... and a wrong gradient
    else:
        assert seen == 64 * 256 * 4
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            s.sum().backward()


@pytest.mark.parametrize("fn", [SigmoidSavingOutput, SigmoidOnCtx], ids=lambda f: f.__name__)
def test_an_output_kept_on_ctx_lives_until_the_garbage_collector_runs(fn):
    """The reference cycle output -> grad_fn (the ctx) -> output: without the collector, the output outlives its
    last name; with save_for_backward it does not."""
    x = torch.randn(8, requires_grad=True)
    enabled = gc.isenabled()
    gc.disable()
    try:
        s = fn.apply(x)
        alive = weakref.ref(s)
        del s
        assert (alive() is not None) == (fn is SigmoidOnCtx)
        gc.collect()
        assert alive() is None
    finally:
        if enabled:
            gc.enable()


@pytest.mark.parametrize("fn", [SigmoidSavingOutput, SigmoidOnce], ids=lambda f: f.__name__)
def test_once_differentiable_refuses_the_second_derivative(fn):
    x = torch.randn(5, requires_grad=True)
    (g,) = torch.autograd.grad(fn.apply(x).square().sum(), x, create_graph=True)
    if fn is SigmoidOnce:
        with pytest.raises(RuntimeError, match="trying to differentiate twice a function that was marked with"):
            g.sum().backward()
    else:
        g.sum().backward()
        assert x.grad is not None


# --- 3. compressing saved activations ---

DTYPES = [torch.bfloat16, torch.float16] + [
    getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n)
]
MANTISSA_BITS = {"bfloat16": 7, "float16": 10, "float8_e4m3fn": 3, "float8_e5m2": 2}
"""What notebook 8 and its worked answer 3 say each dtype stores; torch.finfo's eps is 2 to the minus that."""


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_mantissa_bits_are_what_the_notebook_says(dtype):
    assert torch.finfo(dtype).eps == 2.0 ** -MANTISSA_BITS[str(dtype).split(".")[1]]


def compressed_mlp(dtype):
    """The notebook's experiment, written again: bytes kept and gradients of the MLP with activations packed as dtype."""
    torch.manual_seed(0)
    mlp, data = MLP(width=256, depth=4), torch.randn(64, 256)
    held = {t.untyped_storage().data_ptr() for t in [*mlp.parameters(), data]}
    kept = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() in held:
            return t
        if dtype == torch.float32:
            kept[storage.data_ptr()] = storage.nbytes()
            return t
        scale = t.abs().amax().clamp(min=1e-12) / torch.finfo(dtype).max if dtype.itemsize == 1 else None
        small = (t if scale is None else t / scale).to(dtype)
        kept[id(small)] = small.numel() * small.element_size()
        return small, scale

    def unpack(packed):
        if isinstance(packed, torch.Tensor):
            return packed
        small, scale = packed
        return small.float() if scale is None else small.float() * scale

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        mlp(data).square().mean().backward()
    return sum(kept.values()), torch.cat([p.grad.flatten() for p in mlp.parameters()])


def test_compressed_bytes_follow_the_element_size_and_errors_follow_the_mantissa():
    plain_bytes, reference = compressed_mlp(torch.float32)
    errors = {}
    for dtype in DTYPES:
        nbytes, grads = compressed_mlp(dtype)
        assert nbytes * 4 == plain_bytes * dtype.itemsize, dtype
        errors[dtype] = ((grads - reference).norm() / reference.norm()).item()
    assert 0 < errors[torch.float16] < errors[torch.bfloat16]
    if hasattr(torch, "float8_e5m2"):
        assert errors[torch.bfloat16] < errors[torch.float8_e4m3fn] < errors[torch.float8_e5m2]


# --- 4. the graph Inductor partitions ---


class SoftmaxHead(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(64, 64)

    def forward(self, x):
        return self.linear(x).softmax(-1).cos()


class NormReLU(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.BatchNorm1d(64)

    def forward(self, x):
        return self.norm(x).relu()


class KeepRecords(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def backward_inputs(model, inputs, backend):
    """The backward graph's inputs as `set_logs(aot_graphs=True)` logs them, through the logger the notebook names."""
    torch._dynamo.reset()
    level = logging.getLogger("torch").level
    torch._logging.set_logs(aot_graphs=True)
    logger = logging.getLogger("torch._functorch._aot_autograd")
    printing, keeper = logger.handlers[:], KeepRecords()
    for handler in printing:
        logger.removeHandler(handler)
    logger.addHandler(keeper)
    try:
        torch.compile(model, backend=backend)(inputs).sum().backward()
    finally:
        logger.removeHandler(keeper)
        torch._logging.set_logs()
        logging.getLogger("torch").setLevel(level)
        torch._dynamo.reset()
    backward = next(m for m in keeper.messages if "Backward graph" in m[:200])
    signature = backward.split("def forward(", 1)[1].split("):\n", 1)[0]
    return dict(re.findall(r'(\w+): "(\w+\[[^\]]*\])', signature))


@pytest.mark.slow
def test_inductor_decomposes_softmax_and_saves_its_reductions_where_aot_eager_saves_its_output():
    torch.manual_seed(0)
    head, x = SoftmaxHead(), torch.randn(8, 64)
    eager, inductor = (backward_inputs(head, x, backend) for backend in ("aot_eager", "inductor"))
    assert "_softmax" in eager and not any(n.startswith(("amax", "sum")) for n in eager)
    assert "_softmax" not in inductor and inductor["addmm"].startswith("f32[8, 64]")
    assert sorted(k for n, k in inductor.items() if n.startswith(("amax", "sum"))) == ["f32[8, 1]", "f32[8, 1]"]
    assert compiled_saves(head, x, "inductor")[0] > compiled_saves(head, x, "aot_eager")[0]


@pytest.mark.slow
def test_inductor_saves_fewer_bytes_for_batch_norm_then_relu_keeping_a_boolean():
    torch.manual_seed(0)
    model, x = NormReLU(), torch.randn(8, 64)
    inductor = backward_inputs(model, x, "inductor")
    assert [kind for kind in inductor.values() if not kind.startswith("f32")] == ["b8[8, 64]"]
    assert compiled_saves(model, x, "inductor") == (8 * 64, [(8, 64)])
    assert compiled_saves(model, x, "aot_eager")[0] > 8 * 64


def test_the_log_capture_leaves_no_handler_behind_and_torch_logging_as_it_was():
    """The notebook's capture takes its handler away again, restores the level it gave torch's logger, and turns the
    aot_graphs artifact off. (`set_logs` re-creates the handlers of torch's loggers, dropping any another tool
    attached, pytest's log capture included: a reason to call it once, around the capture only.)"""
    from torch._logging._internal import log_state

    torch_logger, level = logging.getLogger("torch"), logging.getLogger("torch").level
    try:
        torch_logger.setLevel(logging.ERROR)
        torch.manual_seed(0)
        assert "_softmax" in backward_inputs(SoftmaxHead(), torch.randn(8, 64), "aot_eager")
        assert not any(isinstance(h, KeepRecords) for h in logging.getLogger("torch._functorch._aot_autograd").handlers)
        assert torch_logger.level == logging.ERROR
        assert not log_state.is_artifact_enabled("aot_graphs")
    finally:
        torch_logger.setLevel(level)


# --- 5. ban_recompute_* switches ---

SWITCHES = sorted(n for n in FUNCTORCH.get_config_copy() if n.startswith("ban_recompute_"))


def test_the_switches_notebooks_4_and_10_name_exist_and_are_on():
    named = {
        "ban_recompute_used_far_apart",
        "ban_recompute_long_fusible_chains",
        "ban_recompute_materialized_backward",
    }
    assert named <= set(SWITCHES)
    assert all(getattr(FUNCTORCH, n) is True for n in SWITCHES)


@pytest.mark.slow
def test_alone_only_the_materialized_backward_switch_changes_the_blocks_plan_and_all_off_changes_more():
    torch.manual_seed(0)
    block, x = Block(width=32, heads=4), torch.randn(2, 16, 32)
    default = compiled_saves(block, x, activation_memory_budget=1.0)[0]
    alone = {n: compiled_saves(block, x, activation_memory_budget=1.0, **{n: False})[0] for n in SWITCHES}
    changed = [n for n, nbytes in alone.items() if nbytes != default]
    assert changed == ["ban_recompute_materialized_backward"]
    every = compiled_saves(block, x, activation_memory_budget=1.0, **dict.fromkeys(SWITCHES, False))
    assert every[0] < alone["ban_recompute_materialized_backward"] < default
    assert Counter(every[1])[(2, 16, 1)] == 0  # layer norm's statistics are recomputed


# --- 6. per-region budgets and CPU-offload policies ---


def wide_mlp():
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))


class TwoRegions(torch.nn.Module):
    def __init__(self, budgets, graph_break=True):
        super().__init__()
        self.first, self.second = wide_mlp(), wide_mlp()
        self.budgets, self.graph_break = budgets, graph_break

    def forward(self, x):
        with torch.autograd.graph.region_activation_memory_budget(self.budgets[0]):
            x = self.first(x)
        if self.graph_break:
            torch._dynamo.graph_break()
        with torch.autograd.graph.region_activation_memory_budget(self.budgets[1]):
            return self.second(x)


def test_the_controls_the_notebook_checks_exist_in_this_torch():
    assert hasattr(torch.autograd.graph, "region_activation_memory_budget")
    assert hasattr(CheckpointPolicy, "MUST_CPU_OFFLOAD") and hasattr(CheckpointPolicy, "PREFER_CPU_OFFLOAD")
    assert "enable_activation_offloading" in FUNCTORCH.get_config_copy()


def test_each_region_budget_applies_to_its_own_graph():
    torch.manual_seed(0)
    x = torch.randn(8, 64)
    saves = {
        b: compiled_saves(TwoRegions(b), x)[0] for b in [(1.0, 1.0), (0.0, 1.0), (1.0, 0.0), (0.0, 0.0), (0.5, 0.5)]
    }
    assert saves[0.0, 0.0] < saves[0.0, 1.0] == saves[1.0, 0.0] < saves[1.0, 1.0]
    assert saves[0.0, 0.0] < saves[0.5, 0.5] < saves[1.0, 1.0]
    assert compiled_saves(TwoRegions((0.0, 0.0)), x)[1] == [(8, 64)]  # the second region's input, saved by the first


def test_two_budgets_in_one_graph_are_refused_and_eager_mode_raises():
    with pytest.raises(Exception, match="conflicting budgets within a single joint graph"):
        compiled_saves(TwoRegions((0.0, 1.0), graph_break=False), torch.randn(8, 64))
    with pytest.raises(RuntimeError, match="can only be used inside a torch.compile region"):
        with torch.autograd.graph.region_activation_memory_budget(0.5):
            wide_mlp()(torch.randn(8, 64))


class CountMatmuls(torch.utils._python_dispatch.TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += func in (torch.ops.aten.addmm.default, torch.ops.aten.mm.default)
        return func(*args, **(kwargs or {}))


def matmuls_get(matmul_policy):
    def policy(ctx, op, *args, **kwargs):
        matmul = op in (torch.ops.aten.addmm.default, torch.ops.aten.mm.default)
        return matmul_policy if matmul else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


class Checkpointed(torch.nn.Module):
    def __init__(self, policy):
        super().__init__()
        self.inner, self.policy = wide_mlp(), policy

    def forward(self, x):
        context = functools.partial(create_selective_checkpoint_contexts, self.policy)
        return checkpoint(self.inner, x, use_reentrant=False, context_fn=context)


def eager_backward_matmuls(model, x) -> int:
    loss = model(x).sum()
    with CountMatmuls() as counted:
        loss.backward()
    return counted.count


OFFLOADS = [CheckpointPolicy.MUST_CPU_OFFLOAD, CheckpointPolicy.PREFER_CPU_OFFLOAD]


@pytest.mark.parametrize("offload", OFFLOADS, ids=lambda p: p.name)
def test_offload_policies_are_recomputed_in_eager_and_saved_like_must_save_when_compiled(offload):
    torch.manual_seed(0)
    x = torch.randn(8, 64)
    save, moved = Checkpointed(matmuls_get(CheckpointPolicy.MUST_SAVE)), Checkpointed(matmuls_get(offload))
    assert eager_backward_matmuls(moved, x) == eager_backward_matmuls(save, x) + 1  # the GELU's input, rerun
    assert compiled_saves(moved, x) == compiled_saves(save, x) == (8 * 256 * 4, [(8, 256)])


def test_a_bound_method_as_the_policy_makes_dynamo_fall_back_to_eager():
    """The notebook's reason for a plain function: with a method of the module as the policy, the compiled call of
    torch 2.13 and 2.14 saves what eager selective checkpointing does, which pack hooks never see (it keeps outputs in
    its own storage): Dynamo fell back to eager. 2.15 traces the method."""

    class WithMethod(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = wide_mlp()

        def policy(self, ctx, op, *args, **kwargs):
            return matmuls_get(CheckpointPolicy.MUST_SAVE)(ctx, op, *args, **kwargs)

        def forward(self, x):
            context = functools.partial(create_selective_checkpoint_contexts, self.policy)
            return checkpoint(self.inner, x, use_reentrant=False, context_fn=context)

    torch.manual_seed(0)
    x = torch.randn(8, 64)
    function = compiled_saves(Checkpointed(matmuls_get(CheckpointPolicy.MUST_SAVE)), x)
    assert function == (8 * 256 * 4, [(8, 256)])
    release = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
    assert compiled_saves(WithMethod(), x) == ((0, []) if release < (2, 15) else function)


def test_nothing_in_torch_marks_saved_values_for_the_offload_pass():
    """The offload pass moves nodes whose meta says `should_offload`; the only file of this torch that mentions it
    is the pass itself, so no policy value (MUST_CPU_OFFLOAD included) reaches it."""
    root = Path(torch.__file__).parent
    readers = [
        p.relative_to(root).as_posix()
        for p in root.rglob("*.py")
        if "should_offload" in p.read_text("utf-8", "replace")
    ]
    assert readers == ["_functorch/_activation_offloading/activation_offloading.py"]


def test_the_notebook_states_no_number_of_these_claims_in_its_prose():
    """The prose leaves measured numbers to the cells: its markdown names no byte count or size (the cells print
    them); what it does state (mantissa bits, which switch changes a plan, how region budgets order) is held above."""
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    markdown = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert not re.search(r"\d{3,}[\d,]* B\b|\d{3,} bytes|\d[\d.]* ?[kKMG]i?B\b", markdown)


# --- notebook 10 (notebooks/10_the_whole_bill.ipynb): precision and optimizer state, held against torch ---

PRECISIONS = {
    "float32": (torch.float32, False, (4, 4, 8)),
    "autocast": (torch.float32, True, (4, 4, 8)),
    "bfloat16 parameters": (torch.bfloat16, False, (2, 2, 4)),
}
"""Notebook 10's ways to train, and the bytes per parameter it says each keeps for the parameters, their gradients
and AdamW's state."""

ADAMW_IMPLEMENTATIONS = {"for-loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}
"""AdamW's three implementations, as notebook 10 selects them."""

LESSON_TOKENS = torch.randint(0, 1024, (2, 97), generator=torch.Generator().manual_seed(0))


def lesson_model(dtype=torch.float32, depth=2, lr=1e-3, **adamw_options):
    """Notebook 10's language model (the course's Transformer) and its AdamW, seeded."""
    from bwd_widgets.examples import Transformer

    torch.manual_seed(0)
    model = Transformer(width=128, depth=depth, heads=4, vocab=1024).to(dtype)
    return model, torch.optim.AdamW(model.parameters(), lr=lr, **adamw_options)


def lesson_forward_backward(model, autocast=False):
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        logits = model(LESSON_TOKENS[:, :-1])
    torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), LESSON_TOKENS[:, 1:].flatten()).backward()


def storage_bytes(tensors) -> int:
    return sum(t.untyped_storage().nbytes() for t in tensors)


def linear_weight_copies(model, run) -> list[torch.Tensor]:
    """The saved tensors (by a pack hook) that are a Linear's weight cast to bfloat16 and transposed, each storage
    once."""
    linears = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    kept = {}

    def pack(t):
        cast = [w.detach().t().to(torch.bfloat16) for w in linears if w.t().shape == t.shape]
        if t.dtype == torch.bfloat16 and any(torch.equal(t, c) for c in cast):
            kept[t.untyped_storage().data_ptr()] = t
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        run()
    return list(kept.values())


@pytest.mark.parametrize("implementation", list(ADAMW_IMPLEMENTATIONS))
@pytest.mark.parametrize("precision", list(PRECISIONS))
def test_the_static_bill_per_parameter_is_what_notebook_11_says_for_each_precision_and_implementation(
    precision, implementation
):
    """Autocast leaves parameters, gradients and AdamW's state in float32 (16 B per parameter, as float32);
    bfloat16 parameters halve all three; no AdamW implementation changes the state."""
    dtype, autocast, (parameters, gradients, state) = PRECISIONS[precision]
    model, optimizer = lesson_model(dtype, **ADAMW_IMPLEMENTATIONS[implementation])
    lesson_forward_backward(model, autocast)
    optimizer.step()
    count = sum(p.numel() for p in model.parameters())
    moments = [s[name] for s in optimizer.state.values() for name in ("exp_avg", "exp_avg_sq")]
    assert storage_bytes(model.parameters()) == parameters * count
    assert storage_bytes(p.grad for p in model.parameters()) == gradients * count
    assert storage_bytes(moments) == state * count
    assert {t.dtype for t in moments} == {p.grad.dtype for p in model.parameters()} == {dtype}
    steps = [s["step"] for s in optimizer.state.values()]
    assert all(t.dim() == 0 for t in steps) and len(steps) == len(list(model.parameters()))


@pytest.mark.parametrize("precision", list(PRECISIONS))
def test_the_advisors_step_bytes_is_the_measured_static_bill(precision):
    """Notebook 10: `bw.advise(..., optimizer="adamw")` adds parameters, gradients and two state tensors at the
    parameter's element size: the measured bill (less AdamW's scalar `step`s) for float32 and bfloat16 models."""
    from bwd_widgets.studio.advisor.plans import step_bytes

    dtype, autocast, _ = PRECISIONS[precision]
    model, optimizer = lesson_model(dtype)
    lesson_forward_backward(model, autocast)
    optimizer.step()
    moments = [s[name] for s in optimizer.state.values() for name in ("exp_avg", "exp_avg_sq")]
    measured = storage_bytes(model.parameters()) + storage_bytes(p.grad for p in model.parameters())
    assert step_bytes(model, "adamw") == measured + storage_bytes(moments)


def test_autocast_saves_a_bfloat16_copy_of_each_linear_weight_once_and_float32_saves_none():
    """Notebook 10: under autocast the matmuls save a bfloat16 copy of every Linear's weight, 2 B per parameter in a
    Linear; in float32 they save the parameter itself (no copy); a weight used twice in one region is cast once."""
    model, _ = lesson_model()
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    for autocast, expected in ((False, 0), (True, 2 * sum(m.weight.numel() for m in linears))):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            copies = linear_weight_copies(model, lambda: model(LESSON_TOKENS[:, :-1]))
        assert storage_bytes(copies) == expected
    linear, inputs = torch.nn.Linear(8, 8), torch.randn(2, 8, requires_grad=True)  # the copy serves inputs' gradient
    with torch.autocast("cpu", dtype=torch.bfloat16):
        copies = linear_weight_copies(linear, lambda: linear(inputs) + linear(inputs.exp()))
    assert len(copies) == 1


def test_bw_extract_names_the_bfloat16_weight_copies_as_transposes_by_module():
    """Notebook 10's bwd_widgets cell: under autocast, `bw.extract` lists each Linear's saved weight copy, produced
    by `aten.t`, in bfloat16, at its module, as many bytes as the pack hook counted."""
    import bwd_widgets as bw

    model, _ = lesson_model()
    linears = {name: m for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    shapes = {tuple(m.weight.t().shape) for m in linears.values()}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        g = bw.extract(model, LESSON_TOKENS[:, :-1])
    copies = [s for s in g.saved_tensors if s.dtype == str(torch.bfloat16) and tuple(s.shape) in shapes]
    assert {s.producer for s in copies} == {"aten.t"}
    assert sorted(s.module for s in copies) == sorted(linears)
    assert sum(s.bytes for s in copies) == 2 * sum(m.weight.numel() for m in linears.values())


def test_bfloat16_parameters_lose_small_updates_that_float32_keeps():
    """Notebook 10: bfloat16 keeps 8 significant bits (spacing 1/128 near 1, so 1 + 1/256 rounds to 1); one AdamW
    step at lr 1e-5 moves almost no bfloat16 weight but most float32 ones, and at lr 1e-3 most of both."""
    assert torch.finfo(torch.bfloat16).eps == 1 / 128
    assert (torch.tensor(1.0, dtype=torch.bfloat16) + 1 / 256).item() == 1.0

    def moved(dtype, lr):
        model, optimizer = lesson_model(dtype, lr=lr, weight_decay=0.0)
        lesson_forward_backward(model)
        before = [p.detach().clone() for p in model.parameters()]
        optimizer.step()
        changed = sum((p != b).sum().item() for p, b in zip(model.parameters(), before))
        return changed / sum(p.numel() for p in model.parameters())

    assert moved(torch.float32, 1e-5) > 0.5 and moved(torch.bfloat16, 1e-5) < 0.1
    assert moved(torch.float32, 1e-3) > 0.5 and moved(torch.bfloat16, 1e-3) > 0.5


def adamw_step_extra_bytes(depth: int, **adamw_options) -> int:
    """The most bytes one AdamW `step()` holds beyond what exists when it starts, from the CPU profiler's memory
    timeline (Notebook 10's measure), after a first step so the state exists."""
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    model, optimizer = lesson_model(depth=depth, **adamw_options)
    lesson_forward_backward(model)
    optimizer.step()
    lesson_forward_backward(model)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as p:
        optimizer.step()
    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        p.export_memory_timeline(f"{folder}/step.json", device="cpu")
        _, sizes = json.loads(Path(f"{folder}/step.json").read_text())
    totals = [sum(row) for row in sizes]
    return max(totals) - totals[0]


@pytest.mark.parametrize("depth", [2, 4])
def test_foreach_holds_a_copy_of_the_parameters_the_for_loop_its_largest_and_fused_nothing(depth):
    """Notebook 10's third prediction and second exercise: during `step()`, foreach's intermediates exist for every
    parameter at once (at least the parameters' bytes, growing with depth), the for-loop's for one parameter at a
    time (at least the largest parameter, less than all of them, the same at any depth), fused's not at all."""
    model, _ = lesson_model(depth=depth)
    parameters, largest = storage_bytes(model.parameters()), max(storage_bytes([p]) for p in model.parameters())
    extra = {name: adamw_step_extra_bytes(depth, **options) for name, options in ADAMW_IMPLEMENTATIONS.items()}
    assert extra["foreach"] >= parameters
    assert largest <= extra["for-loop"] < parameters and extra["for-loop"] <= 2 * largest + 1024
    assert extra["fused"] < 1024
    assert max(extra, key=extra.__getitem__) == "foreach"


def test_fused_adamw_runs_on_the_cpu_and_steps_as_foreach_does():
    """Notebook 10: `fused=True` works on CPU tensors and computes the same update as the default."""
    results = []
    for options in (ADAMW_IMPLEMENTATIONS["foreach"], ADAMW_IMPLEMENTATIONS["fused"]):
        model, optimizer = lesson_model(**options)
        lesson_forward_backward(model)
        optimizer.step()
        results.append([p.detach().clone() for p in model.parameters()])
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(*results))


def test_linear_8bit_blockwise_state_is_about_two_bytes_and_zeroes_small_second_moments():
    """Notebook 10's 8-bit section: int8 codes and a float32 absmax per 256 values store both moments in about
    2 B per parameter, and the linear code rounds a share of exp_avg_sq to 0, so AdamW's update goes far off."""
    model, optimizer = lesson_model()
    for _ in range(3):
        lesson_forward_backward(model)
        optimizer.step()
        optimizer.zero_grad()

    def quantized(x, block=256):
        flat = x.detach().flatten()
        blocks = torch.nn.functional.pad(flat, (0, -flat.numel() % block)).view(-1, block)
        absmax = blocks.abs().amax(1, keepdim=True)
        codes = torch.round(blocks / absmax.clamp_min(torch.finfo(torch.float32).tiny) * 127).to(torch.int8)
        return storage_bytes([codes, absmax]), (codes.float() * absmax / 127).flatten()[: flat.numel()].view_as(x)

    stored = zeroed = nonzero = off = 0
    for p in model.parameters():
        (mean_bytes, mean), (square_bytes, square) = (
            quantized(optimizer.state[p][n]) for n in ("exp_avg", "exp_avg_sq")
        )
        exact_square, exact_mean = optimizer.state[p]["exp_avg_sq"], optimizer.state[p]["exp_avg"]
        stored += mean_bytes + square_bytes
        zeroed += ((square == 0) & (exact_square > 0)).sum().item()
        nonzero += (exact_square > 0).sum().item()
        exact = exact_mean / (exact_square.sqrt() + 1e-8)
        off += ((mean / (square.sqrt() + 1e-8) - exact).abs() > exact.abs())[exact_square > 0].sum().item()
    count = sum(p.numel() for p in model.parameters())
    assert 2 < stored / count < 2.1
    assert zeroed / nonzero > 0.05 and off / nonzero > 0.05


def test_the_7b_arithmetic_of_notebook_11():
    """The meta model is 7 B-class (6.7 B parameters); at 16 B per parameter its static bill is about 107 GB: two
    80 GB cards, 54 GB each, 26 GB left; at 8 (bfloat16 parameters) or 10 (8-bit state) it fits one."""
    from bwd_widgets.examples import big_transformer_on_meta

    count = sum(p.numel() for p in big_transformer_on_meta().parameters())
    assert round(count / 1e9, 1) == 6.7
    assert round(count * 16 / 1e9) == 107 and -(-count * 16 // 80e9) == 2
    assert round(count * 16 / 2 / 1e9) == 54 and round(80 - count * 16 / 2 / 1e9) == 26
    assert count * 10 <= 80e9 and count * 8 <= 80e9


def test_adamw_defaults_to_the_for_loop_on_cpu_tensors_and_foreach_is_a_cuda_default():
    """Notebook 10: "the default for CUDA tensors; for CPU tensors the default is the for-loop", as torch decides."""
    from torch.optim.optimizer import _default_to_fused_or_foreach
    from torch.utils._foreach_utils import _get_foreach_kernels_supported_devices

    model, optimizer = lesson_model()
    assert optimizer.defaults["foreach"] is None and optimizer.defaults["fused"] is None
    assert _default_to_fused_or_foreach(list(model.parameters()), False, False) == (False, False)
    assert "cuda" in _get_foreach_kernels_supported_devices() and "cpu" not in _get_foreach_kernels_supported_devices()
