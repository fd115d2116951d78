"""Worked answers for 02_what_autograd_saves.ipynb, one section per exercise.

They run in that notebook's namespace: its cell `worked_answer("answers/02_what_autograd_saves.py", n)` runs section n there,
after the imports above the first section, and shows its code in that cell. Try the exercise first.
"""

from torch import nn

# %% 1
big = bw.extract(Block(width=64, heads=4), torch.randn(2, 128, 64), mode="fake")
by_op = Counter()
for s in big.saved_tensors:
    by_op[s.storage_op or s.producer] += s.activation_bytes  # a view is charged to the op that made its memory
for op, nbytes in by_op.most_common(3):
    print(f"{op:20} {nbytes:8} B")

# %% 2
predicted = by_batch[-1] * 2  # by_batch[-1] is batch 16
print("predicted", predicted, "B, measured", saved_bytes(32, 64), "B")

# %% 3
relu_mlp = MLP(width=256, depth=4)
for layer in relu_mlp.blocks:
    layer[1] = nn.ReLU()
relu = bw.extract(relu_mlp, x)
print("GELU:", g.saved_activation_bytes, "B   ReLU:", relu.saved_activation_bytes, "B")


# %% 4
class OffloadActivations(CountingOffload):
    """Moves saved tensors to the host, except those sharing a parameter's memory."""

    def __init__(self, model):
        self.parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
        super().__init__()

    def pack(self, t):
        if t.untyped_storage().data_ptr() in self.parameters:
            return None, t
        return super().pack(t)

    def unpack(self, packed):
        device, t = packed
        return t if device is None else t.to(device)


activations_only = OffloadActivations(mlp)
gradients(mlp, x, activations_only)
print("bytes moved:", activations_only.moved)


# %% 5
def offload_big(t):
    if t.numel() * t.element_size() > THRESHOLD:
        return t.device, t.to("cpu", copy=True)  # on a GPU: t.to("cpu", copy=True).pin_memory() ...
    return t


def bring_back(packed):
    if isinstance(packed, tuple):
        device, t = packed
        return t.to(device, non_blocking=True)
    return packed


assert check_offload(offload_big, bring_back)
