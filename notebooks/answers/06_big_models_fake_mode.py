"""Worked answers for 06_big_models_fake_mode.ipynb, one section per exercise.

They run in that notebook's namespace: its cell `worked_answer("answers/06_big_models_fake_mode.py", n)` runs section n there,
after the imports above the first section, and shows its code in that cell. Try the exercise first.
"""

# %% 1
with torch.device("meta"):
    half = torch.randint(0, 32000, (8, 256))
shorter = bw.extract(big_transformer_on_meta(depth=32, width=4096, heads=32), half, mode="fake")
print(f"{g.saved_activation_bytes / 1e9:.1f} GB at 512 tokens, {shorter.saved_activation_bytes / 1e9:.1f} GB at 256")

# %% 2
softmax = [
    t for t in g.saved_tensors if (t.storage_op or t.producer or "").startswith("aten._softmax") and t.activation_bytes
]
print(
    len(softmax), "softmax outputs kept, each", list(softmax[0].shape), f"= {softmax[0].activation_bytes / 1e9:.2f} GB"
)
print(f"together {sum(t.activation_bytes for t in softmax) / 1e9:.1f} GB of {g.saved_activation_bytes / 1e9:.1f} GB")
