"""What the teaching notebooks claim, checked on the same models, so a torch upgrade that changes a
lesson fails here with the claim's name rather than as a changed number in a notebook."""

import functools
from collections import Counter

import pytest
import torch
import torch.utils.checkpoint
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

import bwd_widgets as bw
from bwd_widgets.examples import MLP, Attention, Block, ConvBN, Transformer


def eager_saved_bytes(model, *inputs) -> int:
    """What eager autograd saves in one forward pass beyond parameters and inputs, each storage once,
    counted by a saved_tensors_hooks pack hook (the notebooks' count)."""
    existing = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers(), *inputs]}
    kept = {}

    def pack(t):
        if t.untyped_storage().data_ptr() not in existing:
            kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(*inputs)
    return sum(kept.values())


@pytest.fixture(scope="module")
def transformer():
    """Notebook 3's model and its default partition."""
    torch.manual_seed(0)
    model = Transformer(width=64, depth=2, heads=4, vocab=128)
    tokens = torch.randint(0, 128, (4, 32))
    return model, tokens, bw.extract(model, tokens)


class Chain(torch.nn.Module):
    """Notebook 4's `depth` layers of x = cos(cos(x @ W))."""

    def __init__(self, width=512, depth=4):
        super().__init__()
        self.weights = torch.nn.ParameterList(torch.randn(width, width) / width**0.5 for _ in range(depth))

    def forward(self, x):
        for w in self.weights:
            x = (x @ w).cos().cos()
        return x


class Checkpointed(torch.nn.Module):
    """Two blocks, each inside checkpoint, optionally under a selective policy (notebook 5)."""

    def __init__(self, policy=None, checkpointing=True):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(64, 4) for _ in range(2))
        self.policy, self.checkpointing = policy, checkpointing

    def forward(self, x):
        for block in self.blocks:
            if not self.checkpointing:
                x = block(x)
            elif self.policy is None:
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
            else:
                context = functools.partial(create_selective_checkpoint_contexts, self.policy)
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False, context_fn=context)
        return x


# --- saved bytes are eager autograd's (notebooks 2 and 3) ----------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        lambda: (MLP(width=256, depth=4), torch.randn(64, 256)),
        lambda: (Block(width=64, heads=4), torch.randn(2, 32, 64)),
        lambda: (Transformer(width=64, depth=2, heads=4, vocab=128), torch.randint(0, 128, (4, 32))),
    ],
    ids=["MLP", "Block", "Transformer"],
)
def test_default_partition_saves_what_saved_tensors_hooks_count(build):
    torch.manual_seed(0)
    model, inputs = build()
    counted = eager_saved_bytes(model, inputs)
    assert counted > 0
    assert bw.extract(model, inputs).saved_activation_bytes == counted


def eager_saved(model, *inputs) -> Counter:
    """The tensors eager autograd saves in one forward pass, each once (recorded by a saved_tensors_hooks
    pack hook): what it is (a parameter by name, "input" or "activation"), its shape and dtype."""
    owners = {p.untyped_storage().data_ptr(): name for name, p in model.named_parameters()}
    owners.update({t.untyped_storage().data_ptr(): "input" for t in inputs})
    seen = {}

    def pack(t):
        storage = t.untyped_storage().data_ptr()
        seen[storage, t.storage_offset(), tuple(t.shape), t.stride()] = (
            owners.get(storage, "activation"),
            tuple(t.shape),
            str(t.dtype),
        )
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(*inputs)
    return Counter(seen.values())


def partition_saved(extraction, model) -> Counter:
    """The same description of what a partition saves; a view of a parameter is that parameter."""
    parameters = dict(model.named_parameters())
    described = Counter()
    for s in extraction.saved_tensors:
        if s.kind == "activation":
            what = s.alias_of if s.alias_of in parameters else "activation"
        else:
            what = "input" if s.kind == "input" else s.source
        described[what, tuple(s.shape), s.dtype] += 1
    return described


@pytest.mark.parametrize(
    "build",
    [
        lambda: (MLP(width=256, depth=4), torch.randn(64, 256)),
        lambda: (Block(width=64, heads=4), torch.randn(2, 32, 64)),
        lambda: (Transformer(width=64, depth=2, heads=4, vocab=128), torch.randint(0, 128, (4, 32))),
    ],
    ids=["MLP", "Block", "Transformer"],
)
def test_the_default_partition_saves_the_set_of_tensors_eager_saves(build):
    """Notebook 2: as a set of tensors, not only as bytes, once the inputs are data (no gradient), as in eager."""
    torch.manual_seed(0)
    model, inputs = build()
    data = {"x": False} if inputs.is_floating_point() else {}
    eager = eager_saved(model, inputs)
    assert eager and partition_saved(bw.extract(model, inputs, requires_grad=data), model) == eager


def test_bws_default_gradient_for_x_adds_the_first_weight_at_zero_bytes():
    """Notebook 2's table once listed the first Linear's transposed weight: bw.extract's default gives x a gradient."""
    torch.manual_seed(0)
    mlp, x = MLP(width=256, depth=4), torch.randn(64, 256)
    default, data = bw.extract(mlp, x), bw.extract(mlp, x, requires_grad={"x": False})
    extra = partition_saved(default, mlp) - eager_saved(mlp, x)
    assert extra == Counter({("blocks.0.0.weight", (256, 256), "torch.float32"): 1})
    assert not eager_saved(mlp, x) - partition_saved(default, mlp)
    assert default.saved_activation_bytes == data.saved_activation_bytes == eager_saved_bytes(mlp, x)


def test_eval_mode_still_saves_and_no_grad_or_inference_mode_save_nothing():
    mlp, x = MLP(width=64, depth=2), torch.randn(8, 64)
    training = eager_saved_bytes(mlp, x)
    mlp.eval()
    assert eager_saved_bytes(mlp, x) == training > 0
    for mode in (torch.no_grad, torch.inference_mode):
        with mode():
            assert eager_saved_bytes(mlp, x) == 0


# --- saved is not peak (notebooks 3 and 6) ----------------------------------------------------------


def test_budget_zero_peaks_no_lower_than_budget_half_on_notebook_3s_model(transformer):
    _, _, default = transformer
    half, zero = default.rerun("min_cut", 0.5), default.rerun("min_cut", 0.0)
    assert zero.saved_activation_bytes == 0 < half.saved_activation_bytes < default.saved_activation_bytes
    assert zero.peak_activation_bytes >= half.peak_activation_bytes
    assert zero.peak_activation_bytes >= default.peak_activation_bytes  # saves nothing, lowers nothing
    assert half.peak_activation_bytes < default.peak_activation_bytes


def test_peak_is_more_than_saved(transformer):
    _, _, default = transformer
    assert default.peak_activation_bytes > default.saved_activation_bytes
    assert default.peak.phase == "backward"


# --- min-cut and the budget (notebooks 3 and 4) ---------------------------------------------------------


def test_plain_min_cut_saves_the_defaults_bytes_on_the_transformer(transformer):
    _, _, default = transformer
    assert default.rerun("min_cut").saved_activation_bytes == default.saved_activation_bytes


def test_min_cut_recomputes_a_pointwise_chain_instead_of_saving_it():
    cosine = bw.extract(lambda x: x.cos().cos(), torch.randn(64, 64))
    chosen = cosine.rerun("min_cut")
    assert cosine.saved_activation_bytes == 64 * 64 * 4
    assert chosen.saved_activation_bytes == 0
    assert [op for _, op in chosen.recomputed] == ["aten.cos"]


ALLOWLIST = "cannot recompute: not in recomputable allowlist"
MATERIALIZED = "cannot recompute: materialized in backward"


@pytest.fixture(scope="module")
def chain():
    """Notebook 4's chain, as it builds it."""
    torch.manual_seed(0)
    return bw.extract(Chain(), torch.randn(256, 512))


def test_the_cos_cos_flow_network_is_cut_at_x_alone_and_bans_the_output():
    """Notebook 4's picture: the network torch hands networkx.minimum_cut for x.cos().cos() splits each
    value in two, and its cut is x's own edge (save x, recompute the rest); the output is banned."""
    import networkx
    from functorch.compile import aot_function, make_boxed_func, min_cut_rematerialization_partition

    flows, original = [], networkx.minimum_cut

    def recording(network, *args, **kwargs):
        value, (source_side, sink_side) = original(network, *args, **kwargs)
        flows.append((network.copy(), value, set(source_side)))
        return value, (source_side, sink_side)

    def keep(gm, example_inputs):
        return make_boxed_func(gm.forward)

    networkx.minimum_cut = recording
    try:
        compiled = aot_function(lambda x: x.cos().cos(), keep, keep, partition_fn=min_cut_rematerialization_partition)
        compiled(torch.randn(1024, requires_grad=True)).sum().backward()
    finally:
        networkx.minimum_cut = original
    network, value, source_side = flows[-1]
    cut = [(a, b) for a, b in network.edges if a in source_side and b not in source_side]
    assert cut == [("primals_1_in", "primals_1_out")]
    assert value == network.edges["primals_1_in", "primals_1_out"]["capacity"]
    assert network.edges["source", "cos_1_in"]["reason"] == "cannot recompute: materialized in backward"


def test_plain_min_cut_keeps_the_chain_by_torchs_allowlist_and_materialized_in_backward(chain):
    plain = chain.rerun("min_cut")
    reasons = Counter(s.torch_reason for s in plain.saved_tensors if s.activation_bytes)
    assert reasons == {ALLOWLIST: 4, MATERIALIZED: 3}  # the matmul outputs, the layer outputs the next mm reads
    assert plain.saved_activation_bytes == 7 * 256 * 512 * 4  # 3.67 MB
    assert plain.partitions[0].decisions.route == "min_cut"


def test_lifting_the_materialized_in_backward_ban_saves_only_the_matmul_outputs(chain):
    """Notebook 4: 2.10 MB instead of 3.67 MB with that ban off, still no matmul recomputed."""
    lifted = chain.rerun("min_cut", 0.9)
    decisions = lifted.partitions[0].decisions
    assert decisions.route == "more_aggressive"
    plain_run, lifted_run = decisions.runs[:2]
    assert plain_run.options["ban_if_materialized_backward"] and not lifted_run.options["ban_if_materialized_backward"]
    assert "materialized in backward" in plain_run.cannot_recompute.values()
    assert "materialized in backward" not in lifted_run.cannot_recompute.values()
    assert lifted.saved_activation_bytes == 4 * 256 * 512 * 4  # 2.10 MB
    assert {s.producer for s in lifted.saved_tensors if s.activation_bytes} == {"aten.mm"}
    assert lifted.recompute_flops == 0


def test_the_transformers_gelus_are_banned_as_materialized_in_backward_and_budget_0_8_recomputes_them(transformer):
    _, _, default = transformer
    plain = default.rerun("min_cut")
    gelus = [s for s in plain.saved_tensors if s.storage_op == "aten.gelu"]
    assert len(gelus) == 2 and all(s.torch_reason == MATERIALIZED for s in gelus)
    assert Counter(s.torch_reason for s in plain.saved_tensors if s.activation_bytes) == {
        ALLOWLIST: 15,
        MATERIALIZED: 14,
        "min-cut: in the cut": 5,
    }
    lifted = default.rerun("min_cut", 0.8)
    assert lifted.partitions[0].decisions.route == "more_aggressive"
    assert (plain.saved_activation_bytes, lifted.saved_activation_bytes) == (1_250_304, 988_160)
    newly = Counter(op for _, op in lifted.recomputed) - Counter(op for _, op in plain.recomputed)
    assert newly["aten.gelu"] == 2 and lifted.recompute_flops == 0


def test_the_budget_is_a_ceiling_on_torchs_ratio_not_the_share_of_saved_bytes(transformer, chain):
    """torch's ratio is (saved - primal inputs) / (min-cut's saved - primal inputs), views at full size: at or
    under the budget; the share of min-cut's saved bytes is a different number (notebooks 3 and 4)."""
    _, _, default = transformer
    min_cut = default.rerun("min_cut").saved_activation_bytes
    shares = {}
    for budget in (0.1, 0.2, 0.3, 0.5):
        e = default.rerun("min_cut", budget)
        partition = e.partitions[0]
        assert partition.torch_budget_ratio <= budget
        assert partition.torch_budget_ratio == partition.decisions.budget_ratio
        shares[budget] = round(e.saved_activation_bytes / min_cut, 3)
    assert shares[0.1] == 0.079 and shares[0.2] == 0.183 and shares[0.3] == 0.288
    assert round(default.rerun("min_cut", 0.1).partitions[0].torch_budget_ratio, 3) == 0.080  # not the share
    half = chain.rerun("min_cut", 0.5)
    assert half.partitions[0].decisions.route == "knapsack"
    assert round(half.partitions[0].torch_budget_ratio, 3) == 0.429
    assert half.recompute_flops > 0  # below 1, the knapsack recomputes a matmul


def test_the_sweep_is_jagged_and_only_budget_zero_buys_nothing(transformer):
    """Notebook 3: 888 kB at 0.1, 1,019 kB at 0.2, 855 kB at 0.3 (the lowest), 951 kB at 0.5."""
    _, _, default = transformer
    points = {p.budget: p for p in bw.sweep(default, progress=False).points}
    peaks = {b: p.peak_activation_bytes for b, p in points.items()}
    assert peaks[0.0] == peaks[1.0]
    assert all(peaks[b] < peaks[1.0] for b in peaks if 0 < b < 1)
    assert (peaks[0.1], peaks[0.2], peaks[0.3], peaks[0.5]) == (887_552, 1_018_624, 854_784, 951_040)
    assert min(peaks, key=peaks.get) == 0.3
    assert peaks[0.1] < peaks[0.2] > peaks[0.3]  # not monotone either way
    beaten = {b: p.peak_above_budget for b, p in points.items() if p.peak_above_budget is not None}
    assert beaten == {0.0: 0.3, 0.1: 0.3, 0.2: 0.3, 0.4: 0.5}
    assert all(p.torch_budget_ratio <= p.budget + 1e-9 for p in points.values())


def test_min_cut_bans_random_ops_and_a_budget_can_lift_the_ban():
    dropped = bw.extract(lambda x: torch.nn.functional.dropout(x, 0.5).cos(), torch.randn(32, 32))
    plain = dropped.rerun("min_cut")
    # torch's plain min-cut bans dropout by its allowlist; "random op" is its aggressive passes' reason
    assert any(s.torch_reason == "cannot recompute: not in recomputable allowlist" for s in plain.saved_tensors)
    assert not plain.notes
    assert any("random op" in note for note in dropped.rerun("min_cut", 0.0).notes)


@pytest.mark.parametrize(
    "backend, saves_cos", [("aot_eager_default_partitioner", True), ("aot_eager", False), ("inductor", False)]
)
def test_which_backend_uses_which_partitioner(backend, saves_cos):
    """Inductor and aot_eager partition with min-cut (cos(x) recomputed), the default-partitioner backend keeps it."""
    x = torch.randn(64, 64, requires_grad=True)
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: x.cos().cos(), backend=backend)
    kept = {}

    def pack(t):
        if t.untyped_storage().data_ptr() != x.untyped_storage().data_ptr():
            kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = compiled(x)
    y.sum().backward()
    torch._dynamo.reset()
    assert sum(kept.values()) == (64 * 64 * 4 if saves_cos else 0)


def _compiled_step(fn, backend, x):
    """Saved bytes beyond x (each storage once) and x's gradient, for one step of fn compiled by backend."""
    x = x.detach().requires_grad_()
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=backend)
    kept = {}

    def pack(t):
        if t.untyped_storage().data_ptr() != x.untyped_storage().data_ptr():
            kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = compiled(x)
    y.sum().backward()
    torch._dynamo.reset()
    return sum(kept.values()), x.grad


def test_notebook_4_times_each_compiler_with_both_plans():
    """Like with like: aot_eager with each partitioner, and Inductor with min-cut's plan against Inductor with
    cos(x) kept by a MUST_SAVE policy; each pair differs only in what it saves, and gives the same gradients.
    (The notebook reports the times; no time is asserted here.)"""

    def cos_cos(x):
        return x.cos().cos()

    def save_cos(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op is torch.ops.aten.cos.default else CheckpointPolicy.PREFER_RECOMPUTE

    def cos_cos_keeping_cos(x):
        context = functools.partial(create_selective_checkpoint_contexts, save_cos)
        return torch.utils.checkpoint.checkpoint(cos_cos, x, use_reentrant=False, context_fn=context)

    x = torch.randn(64, 64)
    expected = -torch.sin(x.cos()) * -torch.sin(x)
    pairs = {
        "aot_eager": [("aot_eager_default_partitioner", cos_cos), ("aot_eager", cos_cos)],
        "inductor": [("inductor", cos_cos_keeping_cos), ("inductor", cos_cos)],
    }
    for compiler, ((kept_backend, kept_fn), (min_cut_backend, min_cut_fn)) in pairs.items():
        kept_bytes, kept_grad = _compiled_step(kept_fn, kept_backend, x)
        min_cut_bytes, min_cut_grad = _compiled_step(min_cut_fn, min_cut_backend, x)
        assert (kept_bytes, min_cut_bytes) == (64 * 64 * 4, 0), compiler
        torch.testing.assert_close(kept_grad, expected)
        torch.testing.assert_close(min_cut_grad, expected)


# --- checkpointing (notebook 5) --------------------------------------------------------------------------


def test_the_default_partitioner_follows_recompute_tags():
    torch.manual_seed(0)
    x = torch.randn(4, 32, 64)
    plain = bw.extract(Checkpointed(checkpointing=False), x)
    full = bw.extract(Checkpointed(), x)
    assert full.partitioner == plain.partitioner == "default"
    assert not plain.recomputed
    assert full.recomputed
    assert full.saved_activation_bytes < plain.saved_activation_bytes
    assert any("recompute" in n.meta for n in full.joint.graph.nodes)


def test_prefer_recompute_is_an_order_under_compile():
    """Even min-cut, which never recomputes a matmul on its own, recomputes every matmul tagged PREFER_RECOMPUTE
    (torch 2.13's behaviour; its docstring allows torch.compile to override PREFER_*)."""
    torch.manual_seed(0)
    x = torch.randn(4, 32, 64)
    preferred = bw.extract(Checkpointed(lambda ctx, op, *a, **k: CheckpointPolicy.PREFER_RECOMPUTE), x)
    full = bw.extract(Checkpointed(), x)
    for e in (preferred, preferred.rerun("min_cut")):
        assert e.saved_activation_bytes == full.saved_activation_bytes
        assert any(op in ("aten.mm", "aten.addmm", "aten.bmm") for _, op in e.recomputed)


MATMULS = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default}


def prefer_saving_matmuls(ctx, op, *args, **kwargs):
    return CheckpointPolicy.PREFER_SAVE if op in MATMULS else CheckpointPolicy.PREFER_RECOMPUTE


def test_prefer_save_on_matmuls_keeps_them_under_min_cut():
    """Notebook 5: not every other op in a checkpointed region is recomputed: PREFER_SAVE keeps the matmuls."""
    torch.manual_seed(0)
    x = torch.randn(4, 32, 64)
    kept = bw.extract(Checkpointed(prefer_saving_matmuls), x, partitioner="min_cut")
    assert kept.saved_activation_bytes == 753_664
    assert not [op for _, op in kept.recomputed if op in ("aten.mm", "aten.addmm", "aten.bmm")]
    assert kept.recomputed  # the rest is still recomputed


def test_the_default_partitioner_fails_on_prefer_save_in_torch_2_13():
    """torch 2.13's default partitioner asserts on a PREFER_SAVE policy; bw.extract says so in one line,
    naming the partitioner that failed and what to try."""
    torch.manual_seed(0)
    failed = r"^the default partitioner failed on this graph \(AssertionError: Node \w+ was invalid, but is output.*try another partitioner"
    with pytest.raises(bw.PartitionerError, match=failed) as caught:
        bw.extract(Checkpointed(prefer_saving_matmuls), torch.randn(4, 32, 64))
    assert "\n" not in str(caught.value)


def test_torch_compile_with_the_default_partitioner_fails_on_prefer_save_too():
    """Notebook 5: not a bw quirk; torch.compile's own aot_eager_default_partitioner backend asserts alike."""
    torch.manual_seed(0)
    torch._dynamo.reset()
    try:
        compiled = torch.compile(Checkpointed(prefer_saving_matmuls), backend="aot_eager_default_partitioner")
        with pytest.raises(Exception, match=r"Node \w+ was invalid, but is output"):
            compiled(torch.randn(4, 32, 64)).sum().backward()
    finally:
        torch._dynamo.reset()


def saving(ops):
    """A selective-checkpointing policy that keeps the outputs of `ops` and recomputes the rest."""
    return lambda ctx, op, *args, **kwargs: (
        CheckpointPolicy.MUST_SAVE if op in ops else CheckpointPolicy.PREFER_RECOMPUTE
    )


def test_notebook_5s_build_exercise_saving_the_projections_meets_its_peak_target():
    """Exercise 4: peak at most 900,000 B with at most 4 matmuls recomputed. Saving the Linear layers'
    outputs meets it; full checkpointing and saving every matmul miss the peak, fewer saves miss the matmuls."""
    torch.manual_seed(0)
    x = torch.randn(4, 32, 64)
    aten = torch.ops.aten

    def outcome(model):
        e = bw.extract(model, x)
        matmuls = sum(op in ("aten.mm", "aten.addmm", "aten.bmm") for _, op in e.recomputed)
        return e.peak_activation_bytes, matmuls

    assert outcome(Checkpointed(saving({aten.mm.default, aten.addmm.default}))) == (884_992, 4)
    assert outcome(Checkpointed(saving({aten.mm.default, aten.addmm.default, aten.bmm.default}))) == (1_081_600, 0)
    assert outcome(Checkpointed(saving({aten.addmm.default}))) == (823_808, 8)
    assert outcome(Checkpointed())[0] == 987_648


def test_notebook_2s_offload_exercise_moves_the_softmax_twice_and_the_mlp_hidden_tensors():
    """Exercise 5: a hook moving saved tensors above 200,000 B sees the MLP's hidden layer before and after
    GELU and the softmax output packed twice (itself and the view the next matmul reads), and backward's
    gradients are unchanged."""
    torch.manual_seed(0)
    block, x = Block(width=64, heads=4), torch.randn(2, 128, 64, requires_grad=True)
    block(x).square().sum().backward()
    expected = [p.grad.clone() for p in block.parameters()]
    block.zero_grad()
    moved = []

    def pack(t):
        if t.numel() * t.element_size() <= 200_000:
            return t
        moved.append((tuple(t.shape), t))  # held, so no storage is freed and its address reused
        return t.device, t.to("cpu", copy=True)

    def unpack(packed):
        return packed[1].to(packed[0]) if isinstance(packed, tuple) else packed

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        loss = block(x).square().sum()
    loss.backward()
    assert all(torch.allclose(a, p.grad) for a, p in zip(expected, block.parameters()))
    assert sorted(shape for shape, _ in moved) == [(2, 4, 128, 128), (2, 128, 256), (8, 128, 128), (256, 256)]
    storages = {shape: t.untyped_storage().data_ptr() for shape, t in moved}
    assert storages[2, 4, 128, 128] == storages[8, 128, 128] and len(set(storages.values())) == 3


def test_sqrt_n_segments_give_the_lowest_peak_on_a_sin_chain():
    class SinChain(torch.nn.Module):
        def __init__(self, every):
            super().__init__()
            self.every = every

        def forward(self, x):
            def run(x):
                for _ in range(self.every):
                    x = x.sin()
                return x

            for _ in range(0, 16, self.every):
                x = torch.utils.checkpoint.checkpoint(run, x, use_reentrant=False)
            return x

    peaks = {k: bw.extract(SinChain(k), torch.randn(64, 64)).peak_activation_bytes for k in (1, 2, 4, 8, 16)}
    assert min(peaks, key=peaks.get) == 4
    assert peaks[4] < peaks[1] == peaks[16]


def test_checkpointed_dropout_replays_its_random_state():
    class Dropped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(16, 16)

        def forward(self, x):
            inner = lambda x: torch.nn.functional.dropout(self.linear(x), 0.5)  # noqa: E731
            return torch.utils.checkpoint.checkpoint(inner, x, use_reentrant=False)

    replayed = bw.extract(Dropped(), torch.randn(8, 16))
    assert any(s.name.startswith("rng_state") for s in replayed.saved_tensors)
    assert any("run_with_rng_state" in op for _, op in replayed.recomputed)


# --- precision and attention (notebooks 5 and 6) --------------------------------------------------------


class FusedAttention(Attention):
    def forward(self, x):
        batch, seq, width = x.shape
        q, k, v = self.qkv(x).view(batch, seq, 3, self.heads, width // self.heads).permute(2, 0, 3, 1, 4)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(batch, seq, width))


def test_bfloat16_halves_and_fused_attention_drops_the_softmax():
    block, x = Block(64, 4), torch.randn(2, 128, 64)
    written = bw.extract(block, x, mode="fake")
    assert bw.extract(
        Block(64, 4).to(torch.bfloat16), x.to(torch.bfloat16), mode="fake"
    ).saved_activation_bytes * 2 == (written.saved_activation_bytes)
    softmax = sum(s.activation_bytes for s in written.saved_tensors if (s.storage_op or s.producer) == "aten._softmax")
    assert softmax == 2 * 4 * 128 * 128 * 4
    block.attn.__class__ = FusedAttention
    fused = bw.extract(block, x, mode="fake")
    assert not any((s.storage_op or s.producer or "").startswith("aten._softmax") for s in fused.saved_tensors)
    assert fused.saved_activation_bytes < written.saved_activation_bytes - softmax // 2


def test_autocast_on_cpu_leaves_layer_norm_and_softmax_in_the_dtype_that_reaches_them():
    """Notebook 5: on CPU autocast does not cast layer_norm or softmax (bf16 in, bf16 out; float32 in, float32
    out). In a block the layer norms see the float32 residual stream and keep float32 statistics, while the
    softmax sees a bf16 matmul's output and saves bf16."""
    half = torch.randn(2, 8, 16, dtype=torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.nn.functional.layer_norm(half, (16,)).dtype == torch.bfloat16
        assert torch.nn.functional.layer_norm(half.float(), (16,)).dtype == torch.float32
        assert torch.softmax(half, -1).dtype == torch.bfloat16
    torch.manual_seed(0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        extraction = bw.extract(Block(64, 4), torch.randn(2, 128, 64))
    saved = extraction.saved_tensors
    statistics = {s.dtype for s in saved if (s.producer or "").startswith("aten.native_layer_norm[")}
    softmax = {s.dtype for s in saved if "aten._softmax" in (s.producer, s.storage_op)}
    assert statistics == {"torch.float32"}, [(s.name, s.producer, s.dtype) for s in saved]
    assert softmax == {"torch.bfloat16"}, [(s.name, s.producer, s.storage_op, s.dtype) for s in saved]


def test_sdpa_saves_its_output_and_log_sum_exp_and_reads_q_k_v_as_one_projection_output():
    """Notebook 5: the fused kernel keeps its output and one number per row, and its backward reads q, k and
    v, views of the qkv projection's output that keep that one tensor, counted once; the written-out
    attention keeps q, k and v too, as copies of the same bytes, for its own matmuls."""
    torch.manual_seed(0)
    batch, seq, width, heads = 2, 64, 64, 4
    fused = Block(width, heads)
    fused.attn.__class__ = FusedAttention
    extraction = bw.extract(fused, torch.randn(batch, seq, width))
    read = [s for s in extraction.saved_tensors if any("scaled_dot_product" in u for u in s.users)]
    views = [s for s in read if s.producer == "aten.select"]
    assert len(views) == 3 and len({s.alias_of for s in views}) == 1, [(s.name, s.alias_of) for s in read]
    projection_bytes = batch * seq * 3 * width * 4
    assert sum(s.activation_bytes for s in views) == projection_bytes, "one storage, counted once"
    log_sum_exp = [s for s in read if (s.producer or "").endswith("[1]")]
    assert [s.shape for s in log_sum_exp] == [(batch, heads, seq)], "one number per row"
    output = {s.shape for s in extraction.saved_tensors if "scaled_dot_product" in (s.storage_op or "")}
    assert (batch, heads, seq, width // heads) in output, "its output"
    assert not any(s.shape[-3:] == (heads, seq, seq) for s in extraction.saved_tensors), "no scores kept"
    written = bw.extract(Block(width, heads), torch.randn(batch, seq, width))
    per_head = sorted((batch * heads, seq, width // heads))
    copies = [s for s in written.saved_tensors if s.producer == "aten._unsafe_view" and sorted(s.shape) == per_head]
    assert len(copies) == 3 and sum(s.activation_bytes for s in copies) == projection_bytes, (
        "the written-out attention keeps q, k and v too, as copies of the same bytes, for its own matmuls"
    )


def test_the_memory_timeline_holds_every_gradient_by_the_end_of_backward():
    """Notebook 6's bill adds parameters and Adam moments to the timeline's peak but not the gradients
    (as large as the parameters): the timeline already holds them."""
    with torch.device("meta"):
        model = Transformer(width=64, depth=2, heads=4, vocab=128)
        tokens = torch.randint(0, 128, (4, 32))
    g = bw.extract(model, tokens, mode="fake")
    itemsize = {d.dtype: getattr(torch, d.dtype.split(".")[-1]).itemsize for d in g.gradients}
    gradient_bytes = sum(torch.Size(d.shape).numel() * itemsize[d.dtype] for d in g.gradients)
    assert gradient_bytes == sum(p.numel() * p.element_size() for p in model.parameters())
    assert g.memory_timeline()[-1]["live_bytes"] >= gradient_bytes
    assert g.peak_activation_bytes >= gradient_bytes


# --- notebook 1's conv + batch norm ------------------------------------------------------------------


@pytest.fixture(scope="module")
def conv_bn():
    torch.manual_seed(0)
    return bw.extract(ConvBN(), torch.randn(2, 3, 16, 16))


def test_the_convolution_output_is_18_96_times_its_weight(conv_bn):
    largest = max(conv_bn.saved_tensors, key=lambda s: s.bytes)
    weight = next(s for s in conv_bn.saved_tensors if s.source == "conv.weight")
    assert largest.producer == "aten.convolution"
    assert round(largest.bytes / weight.bytes, 2) == 18.96


def test_running_statistics_are_passed_but_not_read_in_training_mode(conv_bn):
    partition = conv_bn.partitions[0]
    running = {s.name for s in conv_bn.saved_tensors if (s.producer or "").endswith(("[3]", "[4]"))}
    assert len(running) == 2
    placeholders = [n for n in partition.backward.graph.find_nodes(op="placeholder")]
    for node in placeholders:
        if node.name in running:
            assert [str(u.target) for u in node.users] == ["aten.native_batch_norm_backward.default"]
    real = partition.backward(*partition.backward_inputs)
    garbage = [
        torch.full_like(value, float("nan")) if node.name in running else value
        for node, value in zip(placeholders, partition.backward_inputs)
    ]
    assert all(torch.equal(a, b) for a, b in zip(real, partition.backward(*garbage)))


def test_the_widget_draws_as_many_nodes_as_the_extraction_counts(conv_bn):
    """Notebook 1 once showed 17 backward nodes in the extraction and 16 in the widget."""
    from bwd_widgets.views.payload import graph_payload

    assert len(graph_payload(conv_bn)["nodes"]) == conv_bn.backward_node_count == conv_bn.summary()["backward_nodes"]


@pytest.fixture(scope="module")
def fit_it():
    """Notebook 7's model, its default partition and its target: 60% of the activation-only peak."""
    torch.manual_seed(0)
    model = Transformer(width=64, depth=4)
    tokens = torch.randint(0, 64, (8, 64))
    g = bw.extract(model, tokens)
    return model, tokens, g, int(0.6 * g.peak_activation_only_bytes)


def test_notebook_7s_sweep_budget_zero_peaks_as_budget_one_and_a_low_nonzero_budget_peaks_lowest(fit_it):
    model, tokens, _, _ = fit_it
    sweep = bw.sweep(model, tokens, budgets=[0.0, 0.2, 0.4, 0.6, 0.8, 1.0], mode="fake", progress=False)
    peaks = {p.budget: p.peak_activation_bytes for p in sweep.points}
    assert peaks[0.0] == peaks[1.0], peaks  # "its peak equals budget 1's: the peak only moves"
    lowest = min(peaks, key=peaks.__getitem__)
    assert 0.0 < lowest <= 0.4, peaks  # "the lowest peaks are at the low but nonzero budgets"
    flagged = {p.budget for p in sweep.points if p.peak_above_budget is not None}
    assert 0.0 in flagged, flagged  # the sweep flags a budget whose peak a larger budget beats


def test_notebook_7s_advisor_picks_a_budget_that_keeps_the_linear_outputs_and_recomputes_a_tenth(fit_it):
    model, tokens, g, target = fit_it
    advice = bw.advise(model, tokens, target=target, policies=("matmuls",), every=(1,), progress=False)
    best = advice.best
    assert best.label == "min-cut budget 0.5" and best.verified_peak_bytes <= target  # the worked answer's label
    recomputed = {op for _, op in best.extraction.recomputed}
    assert {"aten.native_layer_norm", "aten.gelu", "aten._softmax", "aten.bmm"} <= recomputed, recomputed
    assert not recomputed & {"aten.addmm", "aten.mm"}, "it keeps the Linear layers' outputs"
    every_block = next(p for p in advice.tried if p.label == "checkpoint every block")
    assert every_block.verified_peak_bytes == min(p.verified_peak_bytes for p in advice.plans)  # the lowest peak
    assert 8 <= every_block.recompute_flops / best.recompute_flops <= 12  # "a tenth of the FLOPs"
    measured = best.extraction.measure()
    assert measured.peak_bytes == best.extraction.peak_activation_bytes  # "should agree": exactly, on this CPU


def test_notebook_7s_build_a_budget_exercise_passes_in_a_narrow_band(fit_it):
    _, _, g, _ = fit_it
    half, at_most = g.peak_activation_only_bytes // 2, 60e6

    def passes(budget):
        e = g.rerun("min_cut", budget)
        return e.peak_activation_only_bytes <= half and e.recompute_flops <= at_most

    assert [b for b in (0.2, 0.3, 0.4, 0.5) if passes(b)] == [0.4]  # lower recomputes too much, higher saves too much


def test_notebook_7s_fsdp_bill_needs_eight_gpus_for_the_6_7_b_model():
    from bwd_widgets.examples import big_transformer_on_meta

    big = big_transformer_on_meta(depth=32, width=4096, heads=32)
    bill = 4 * sum(p.numel() * p.element_size() for p in big.parameters())  # parameters, gradients, Adam's two
    assert round(bill / 1e9, 1) == 107.3
    free = 80e9 - 60e9  # an 80 GB card with 60 GB of activations
    gpus = next(n for n in (1, 2, 4, 8, 16, 32, 64) if bill / n <= free)
    assert gpus == 8 and round(bill / gpus / 1e9, 1) == 13.4
