"""Worked answers for 09_an_oom_end_to_end.ipynb, one section per exercise.

They run in that notebook's namespace: its cell `worked_answer("answers/09_an_oom_end_to_end.py", n)` runs section n
there, after the imports above the first section, and shows its code in that cell. Try the exercise first.
"""

# %% 1
lever("policy, 2 micro-batches", POLICY | {"micro_batches": 2}, "+ selective policy")
for label in ("+ selective policy", "policy, 2 micro-batches"):
    print(f"{label}:", ", ".join(f"{part} {nbytes:,} B" for part, nbytes in runs[label][1].bill().items()))

# %% 2
plain = runs["plain"][1]
fitting = [gpus for gpus in (1, 2, 4, 8, 16, 32, 64) if sharded_peak(plain, GPT(), gpus) <= CARD]
print("GPUs that fit:", fitting or "none", f"(on 64 GPUs, still {sharded_peak(plain, GPT(), 64):,} B each)")
