"""Worked answers for 08_what_you_choose_to_save.ipynb, one section per exercise.

They run in that notebook's namespace: its cell `worked_answer("answers/08_what_you_choose_to_save.py", n)` runs
section n there, after the imports above the first section, and shows its code in that cell. Try the exercise first.
"""


# %% 1
class Exp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        result = torch.exp(x)
        ctx.save_for_backward(result)  # exp's derivative is exp itself: its output
        return result

    @staticmethod
    def backward(ctx, grad):
        (result,) = ctx.saved_tensors
        return grad * result


print("gradcheck:", torch.autograd.gradcheck(Exp.apply, (torch.randn(8, dtype=torch.double, requires_grad=True),)))
custom = saved_by(lambda: second(Exp.apply(first(batch))), *params)
builtin_exp = saved_by(lambda: second(torch.exp(first(batch))), *params)
print("custom Exp keeps", custom[0], "B; torch.exp keeps", builtin_exp[0], "B")
assert custom[0] == builtin_exp[0]


# %% 2
def relu_gradient(inplace, between=None):
    torch.manual_seed(0)
    linear, inputs = torch.nn.Linear(16, 16), torch.randn(4, 16, requires_grad=True)
    hidden = linear(inputs) if between is None else between(linear(inputs))
    torch.nn.ReLU(inplace=inplace)(hidden).sum().backward()
    return inputs.grad


print("Linear -> ReLU(inplace=True) matches out of place:", torch.equal(relu_gradient(True), relu_gradient(False)))
try:
    relu_gradient(True, between=torch.exp)
    print("Linear -> exp -> ReLU(inplace=True): no error")
except RuntimeError as error:
    print("Linear -> exp -> ReLU(inplace=True):", str(error).split(",")[0])

# %% 3
if hasattr(torch, "float8_e5m2"):
    e5m2 = Compress(torch.float8_e5m2, held)
    error = gradient_error(mlp_gradients(mlp, data, e5m2), reference)
    print(f"float8_e5m2:   keeps {sum(e5m2.kept.values())} B, gradient error {error:.1e}")
    print(
        f"float8_e4m3fn: keeps {compressed['float8_e4m3fn'][0]} B, gradient error {compressed['float8_e4m3fn'][1]:.1e}"
    )
else:
    print("This torch has no torch.float8_e5m2.")

# %% 4
print("budgets (0.5, 0.5):", region_saves(TwoRegions((0.5, 0.5)), x))
