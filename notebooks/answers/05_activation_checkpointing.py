"""Worked answers for 05_activation_checkpointing.ipynb, one section per exercise.

They run in that notebook's namespace: its cell `worked_answer("answers/05_activation_checkpointing.py", n)` runs section n there,
after the imports above the first section, and shows its code in that cell. Try the exercise first.
"""


# %% 1
def save_softmax(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op is torch.ops.aten._softmax.default else CheckpointPolicy.PREFER_RECOMPUTE


softmax_only = bw.extract(Net(save_softmax), x)
print("none:", runs["none"].saved_activation_bytes, "B   softmax only:", softmax_only.saved_activation_bytes, "B")
print(Counter(s.producer for s in softmax_only.saved_tensors if s.kind == "activation"))

# %% 2
full = runs["full"]
print([(s.kind, list(s.shape)) for s in full.saved_tensors if s.kind in ("activation", "input")])

# %% 3
print(
    Counter(
        (s.producer, s.dtype)
        for s in precision["autocast bf16"].saved_tensors
        if s.activation_bytes and s.dtype == "torch.float32"
    )
)


# %% 4
def save_projections(ctx, op, *args, **kwargs):
    """Keep the Linear layers' outputs; recompute attention's two batched matmuls and the rest."""
    linear = op in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default)
    return CheckpointPolicy.MUST_SAVE if linear else CheckpointPolicy.PREFER_RECOMPUTE


assert check_policy(save_projections)
for ops in ({torch.ops.aten.addmm.default}, {torch.ops.aten.bmm.default}):
    fewer = bw.extract(
        Net(
            lambda ctx, op, *a, ops=ops, **kw: (
                CheckpointPolicy.MUST_SAVE if op in ops else CheckpointPolicy.PREFER_RECOMPUTE
            )
        ),
        x,
    )
    print(
        sorted(str(o) for o in ops),
        "only:",
        f"peak {fewer.peak_activation_bytes:,} B,",
        sum(op in ("aten.mm", "aten.addmm", "aten.bmm") for _, op in fewer.recomputed),
        "matmuls recomputed",
    )
