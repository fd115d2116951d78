"""bw.advise on torch's newest activation-memory APIs, where the installed torch has them.

Region budgets (`torch.autograd.graph.region_activation_memory_budget`): each block its own compiled graph under its
own budget; the plan's pasted code is run as the user runs it (torch.compile) and what it saves is counted by the
independent pack hook of tests/compiled_saves.py. CPU-offload checkpoint policies (`CheckpointPolicy.MUST_CPU_OFFLOAD`
/ `PREFER_CPU_OFFLOAD`, `enable_activation_offloading`): what the advisor says they move is held against a compiled
model whose every matmul carries the policy. Run on torch 2.13.0, 2.14.1 and 2.15.0; a feature's test is skipped
only where the installed torch lacks it.
"""

import copy
import functools
import logging

import pytest
import torch
from compiled_saves import counted_saves
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

import bwd_widgets as bw
from bwd_widgets.core.compat import cpu_offload_policies, region_memory_budget_available
from bwd_widgets.examples import MLP, Transformer
from bwd_widgets.studio.advisor import newest
from bwd_widgets.studio.advisor.code import MATMUL_OPS, find_blocks

logging.getLogger("torch").setLevel(logging.ERROR)  # torch's reminder about in-place ops under context_fn

NO_REGIONS = f"torch {torch.__version__} has no torch.autograd.graph.region_activation_memory_budget"
NO_OFFLOAD_POLICIES = f"torch {torch.__version__} has no CPU-offload checkpoint policies or no offload pass switch"


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=2, n_head=2, bos_token_id=1, eos_token_id=2)
    model = GPT2LMHeadModel(config).train()  # dropout on, as in training
    ids = torch.randint(3, 64, (2, 8))
    return model, (), {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}


MODELS = {
    "course_transformer": lambda: (Transformer(), (torch.randint(0, 64, (4, 16)),), {}),
    "course_mlp": lambda: (MLP(width=16, depth=4), (torch.randn(8, 16),), {}),
    "gpt2": _gpt2,
}
"""Real model classes with a repeated-block container (`find_blocks`), called as their docs call them."""


def pasted(code, model):
    """What the user does: paste the plan's code after building `model` (in a notebook's importable module)."""
    namespace = {"model": copy.deepcopy(model), "__name__": __name__}
    exec(code, namespace)
    return namespace["model"]


@pytest.fixture(scope="module", params=sorted(MODELS))
def advised(request):
    if not region_memory_budget_available():
        pytest.skip(NO_REGIONS)
    torch.manual_seed(0)
    model, args, kwargs = MODELS[request.param]()
    before = {name: t.detach().clone() for name, t in model.state_dict().items()}
    rng = torch.get_rng_state()
    advice = bw.advise(
        model, *args, target=1, budgets=(1.0, 0.5, 0.0), policies=(), every=(), offload=False, progress=False, **kwargs
    )
    rng_kept = torch.equal(torch.get_rng_state(), rng)
    return request.param, model, args, kwargs, advice, before, rng_kept


def test_each_block_gets_its_own_budget_and_the_pasted_code_saves_what_torch_compile_saves(advised):
    _, model, args, kwargs, advice, _, _ = advised
    assert [p.kind for p in advice.regions] == ["region"]
    plan = advice.regions[0]
    assert plan.label == "each block at region budget 0"  # the lowest budget tried
    if plan.note.startswith("not verified: "):
        # what the user gets too: a graph break inside a block (transformers' output-capturing hooks read a
        # ContextVar once the model has been compiled) leaves part of the region eager, where torch refuses it
        assert "Dynamo broke a graph inside a block" in plan.note and "\n" not in plan.note
        with pytest.raises(RuntimeError, match="region_activation_memory_budget can only be used inside"):
            counted_saves(pasted(plan.code, model), args, kwargs)
        return
    as_user_runs_it = counted_saves(pasted(plan.code, model), args, kwargs)
    assert plan.saved_bytes == as_user_runs_it.bytes
    plain = counted_saves(model, args, kwargs)
    assert plan.saved_bytes < plain.bytes  # the blocks at budget 0 save less than min-cut at 1.0
    # the budgets are the code's: the same graphs with every block at 1.0 save more (the graph breaks alone can
    # move a few values across graph boundaries, so not exactly the plain model's count)
    at_one = pasted(newest.region_budget_code(find_blocks(model), 1.0), model)
    assert counted_saves(at_one, args, kwargs).bytes > plan.saved_bytes
    assert plan in advice.regions and plan not in advice.plans and advice.best is not plan  # listed, never best
    assert any(n.startswith(f"{plan.label}: verified as you run it: ") for n in advice.notes)


def test_the_pasted_region_code_runs_eagerly_as_the_model_did(advised):
    """Outside torch.compile the region raises; the pasted code leaves an eager call as it was."""
    _, model, args, kwargs, advice, _, _ = advised
    with pytest.raises(RuntimeError, match="only be used inside a torch.compile region"):
        with torch.autograd.graph.region_activation_memory_budget(0.5):
            pass
    user = pasted(advice.regions[0].code, model).eval()
    reference = copy.deepcopy(model).eval()
    with torch.no_grad():
        got, want = user(*args, **kwargs), reference(*args, **kwargs)
    got, want = (getattr(o, "logits", o) for o in (got, want))
    torch.testing.assert_close(got, want)


def test_the_users_model_and_random_state_are_left_as_they_were(advised):
    _, model, _, _, _, before, rng_kept = advised
    blocks = model.get_submodule(find_blocks(model))
    assert not any("forward" in vars(block) for block in blocks)  # the plan patched a shadow's blocks only
    after = model.state_dict()
    assert all(torch.equal(after[name], value) for name, value in before.items())
    assert rng_kept  # read right after the advisor ran: the other tests' compiled runs draw dropout masks


def test_fake_mode_lists_the_region_plan_unverified():
    if not region_memory_budget_available():
        pytest.skip(NO_REGIONS)
    model, tokens = Transformer(), torch.randint(0, 64, (4, 16))
    advice = bw.advise(
        model, tokens, target=1, mode="fake", budgets=(1.0, 0.5), policies=(), every=(), offload=False, progress=False
    )
    assert [p.label for p in advice.regions] == ["each block at region budget 0.5"]
    assert advice.regions[0].note.startswith("not verified: ")


def test_a_torch_without_region_budgets_gets_one_line_and_no_region_plan(monkeypatch):
    """What a torch without the API gets: monkeypatched here, since every tested torch has it."""
    monkeypatch.setattr(newest, "region_memory_budget_available", lambda: False)
    advice = bw.advise(
        Transformer(), torch.randint(0, 64, (4, 16)), target=1, budgets=(1.0, 0.5), policies=(), every=(),
        offload=False, progress=False,
    )  # fmt: skip
    assert advice.regions == []
    said = [n for n in advice.notes if "region_activation_memory_budget" in n]
    assert said == [newest.region_missing()] and "\n" not in said[0]


def _tagged(model, policy_tag):
    """Every block selectively checkpointed, each matmul's output tagged `policy_tag`, the rest recomputed."""
    ops = {getattr(torch.ops.aten, op).default for op in MATMUL_OPS if hasattr(torch.ops.aten, op)}

    def policy(ctx, op, *args, **kwargs):
        return policy_tag if op in ops else CheckpointPolicy.PREFER_RECOMPUTE

    tagged = copy.deepcopy(model)
    context_fn = functools.partial(create_selective_checkpoint_contexts, policy)
    for block in tagged.get_submodule(find_blocks(tagged)):
        block.forward = functools.partial(checkpoint, block.forward, use_reentrant=False, context_fn=context_fn)
    return tagged


@pytest.mark.parametrize("policy_name", ["MUST_CPU_OFFLOAD", "PREFER_CPU_OFFLOAD"])
@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_what_the_advisor_says_of_cpu_offload_policies_holds_on_the_model(policy_name, model_name):
    if policy_name not in cpu_offload_policies():
        pytest.skip(NO_OFFLOAD_POLICIES)
    torch.manual_seed(0)
    model, args, kwargs = MODELS[model_name]()
    moved = newest.offload_policy_moved_bytes(policy_name)
    note = newest.offload_policy_note()
    offloading = _tagged(model, getattr(CheckpointPolicy, policy_name))
    with bw.core.compat.functorch_config.patch(enable_activation_offloading=True):
        e = bw.extract(offloading, *args, partitioner="min_cut", cache=False, **kwargs)
    copies = [n for n in e.forward.graph.nodes if n.target is torch.ops.prims.device_put.default]
    if moved == 0:
        assert "move nothing" in note and f"torch {torch.__version__}" in note
        assert copies == []  # torch's own partition of the model: no offload copy
        saved = counted_saves(offloading, args, kwargs, enable_activation_offloading=True).bytes
        must_save = counted_saves(_tagged(model, CheckpointPolicy.MUST_SAVE), args, kwargs).bytes
        assert saved == must_save  # the tagged outputs stay saved as with MUST_SAVE
    else:
        assert copies and f"{policy_name} {moved:,} B" in note


def test_the_offload_policy_note_is_one_line_in_every_advice():
    advice = bw.advise(
        MLP(width=16, depth=4), torch.randn(8, 16), target=1, budgets=(1.0,), policies=(), every=(),
        offload=False, progress=False,
    )  # fmt: skip
    said = [n for n in advice.notes if n.startswith("CPU-offload checkpoint policies: ")]
    assert said == [newest.offload_policy_note()] and "\n" not in said[0]
    assert advice.regions == []  # no budget below 1.0 tried: no region plan


def test_a_torch_without_offload_policies_gets_one_line(monkeypatch):
    monkeypatch.setattr(newest, "cpu_offload_policies", lambda: ())
    assert newest.offload_policy_note() == newest.offload_policies_missing()
    assert "\n" not in newest.offload_policies_missing()
