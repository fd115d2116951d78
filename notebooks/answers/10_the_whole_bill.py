"""Worked answers for 10_the_whole_bill.ipynb, one section per exercise.

They run in that notebook's namespace: its cell `worked_answer("answers/10_the_whole_bill.py", n)` runs section n
there, after the imports above the first section, and shows its code in that cell. Try the exercise first.
"""

# %% 1
node, kept_for_activations = 8 * 80e9, 8 * 10e9
recipes = RECIPES | {"bfloat16 parameters, 8-bit state": (2, 2, 2)}
for recipe, parts in recipes.items():
    static = 70e9 * sum(parts)
    print(f"{recipe:42} {static / 1e9:6,.0f} GB: {'fits' if static <= node - kept_for_activations else 'does not fit'}")

# %% 2
for depth in (2, 4):
    row = {name: step_extra_bytes(depth=depth, **options)[0] for name, options in IMPLEMENTATIONS.items()}
    print(f"depth {depth}:", ", ".join(f"{name} {extra:,} B" for name, extra in row.items()))
