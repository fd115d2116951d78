"""Worked answers for 07_fit_it_on_a_gpu.ipynb, one section per exercise.

They run in that notebook's namespace: its cell `worked_answer("answers/07_fit_it_on_a_gpu.py", n)` runs section n there,
after the imports above the first section, and shows its code in that cell. Try the exercise first.
"""

# %% 1
passing = [b for b in (0.2, 0.3, 0.4, 0.5) if check_budget(b)]
assert passing, "no budget in the band"
assert check_budget(passing[0])

# %% 2
free = 80e9 - 60e9
gpus = next(n for n in (1, 2, 4, 8, 16, 32, 64) if static_bill(big, n) <= free)
print(f"{gpus} GPUs: {static_bill(big, gpus) / 1e9:.1f} GB of static bill each")
