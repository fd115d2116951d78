"""Worked answers for 04_min_cut.ipynb, one section per exercise.

They run in that notebook's namespace: its cell `worked_answer("answers/04_min_cut.py", n)` runs section n there,
after the imports above the first section, and shows its code in that cell. Try the exercise first.
"""

# %% 1
four = bw.extract(lambda x: x.cos().cos().cos().cos(), x)
print("default", four.saved_activation_bytes, "B, min_cut", four.rerun("min_cut").saved_activation_bytes, "B")

# %% 2
zero = chain.rerun("min_cut", 0.0)
print(
    f"budget 0: saves {zero.saved_activation_bytes} B, recomputes {zero.recompute_flops / 1e6:.1f} MFLOP, "
    f"peak {zero.peak_activation_bytes / 1e6:.2f} MB (default {chain.peak_activation_bytes / 1e6:.2f} MB)"
)

# %% 3
dropped = bw.extract(lambda x: torch.nn.functional.dropout(x, 0.5).cos(), x).rerun("min_cut")
print(sorted({reason(s) for s in dropped.saved_tensors if s.activation_bytes}))
