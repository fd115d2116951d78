"""Worked answers for 11_appendix_graphnet_samples.ipynb, one section per exercise.

They run in that notebook's namespace: its cell `worked_answer("answers/11_appendix_graphnet_samples.py", n)` runs section n there,
after the imports above the first section, and shows its code in that cell. Try the exercise first.
"""

# %% 1
result = subprocess.run(command + ["--resume"], capture_output=True, text=True)
print(sorted((r["name"], r["status"]) for r in json.loads((work / "batch" / "summary.json").read_text())["samples"]))

# %% 2
low = bw.extract(sample, partitioner="min_cut", memory_budget=0.0)
folder = low.save_graphnet(work / "out", "conv_bn_min_cut")["train_backward"]
print(
    len(bw.load_graphnet_sample(folder).inputs),
    "arguments, against",
    len(pair.backward_inputs),
    "for the default partition",
)
