"""Worked answers for 03_partitioners.ipynb, one section per exercise.

They run in that notebook's namespace: its cell `worked_answer("answers/03_partitioners.py", n)` runs section n there,
after the imports above the first section, and shows its code in that cell. Try the exercise first.
"""

from collections import Counter

# %% 1
kept = {s.name for s in runs["min-cut"].saved_tensors}
print(Counter(s.producer for s in default.saved_tensors if s.name not in kept))

# %% 2
zero = runs["min-cut budget 0.0"]
print(Counter(s.kind for s in zero.saved_tensors))

# %% 3
for budget in (0.0, 0.25, 0.5, 0.75, 1.0):
    e = default.rerun("min_cut", budget)
    print(f"budget {budget:4}: saved {e.saved_activation_bytes:8} B, peak {e.peak_activation_bytes:8} B")

# %% 4
doubled = bw.extract(model, torch.randint(0, 128, (8, 32)))
swept = bw.sweep(doubled, progress=False)
peaks = {p.budget: p.peak_activation_bytes for p in swept.points}
beaten = [p.budget for p in swept.points if p.peak_above_budget is not None]
print(peaks)
print(f"lowest at budget {min(peaks, key=peaks.get)}; beaten by a larger budget: {beaten}")
