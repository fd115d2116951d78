"""Worked answers for 01_first_backward_graph.ipynb, one section per exercise.

They run in that notebook's namespace: its cell `worked_answer("answers/01_first_backward_graph.py", n)` runs section n there,
after the imports above the first section, and shows its code in that cell. Try the exercise first.
"""

# %% 1
largest = max(g.saved_tensors, key=lambda s: s.bytes)
weight = next(s for s in g.saved_tensors if s.source == "conv.weight")
print(f"{largest.source or largest.producer}: {largest.bytes} / {weight.bytes} = {largest.bytes / weight.bytes:.2f}")

# %% 2
conv_bn.eval()
evaluated = bw.extract(conv_bn, image)
conv_bn.train()
for s in evaluated.saved_tensors:
    print(f"{s.kind:10} {s.source or s.producer:45} {str(list(s.shape)):15} {s.bytes:6} B")

# %% 3
a = torch.randn(5, requires_grad=True)
b = torch.randn(5)
node = (a * b).grad_fn
print("keeps b:", node._saved_other is b, "  keeps a:", node._saved_self is not None)

# %% 4
frozen = bw.extract(conv_bn, image, requires_grad={"conv.weight": False, "x": False})
print(
    "no longer saved:", sorted({s.source for s in g.saved_tensors} - {s.source for s in frozen.saved_tensors} - {None})
)
print(
    "backward ops:",
    sorted({str(n.target) for n in frozen.backward.graph.nodes if isinstance(n.target, torch._ops.OpOverload)}),
)
