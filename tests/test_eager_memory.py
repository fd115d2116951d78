"""An eager step's device memory under saved-tensor hooks, on fakes on a stand-in device (core/eager_memory.py).

What stays on the device after forward is held against what autograd itself saved in a real run (its own
pack calls, counted); what the pasted offload hooks move is held against the same count."""

import copy

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.nn.attention import SDPBackend, sdpa_kernel
from zoo_models import BY_NAME

import bwd_widgets as bw
from bwd_widgets.core.eager_memory import eager_step_memory
from bwd_widgets.examples import MLP, Transformer
from bwd_widgets.studio.advisor.code import offload_code


def saved_by_autograd(model, args=(), kwargs=None, min_bytes=0):
    """Bytes of the distinct storages a real eager forward saves, as autograd's own pack calls hand them over,
    less those of the parameters and inputs (they were on the device before the step); only storages of
    `min_bytes` or more."""
    held = [*model.parameters(), *model.buffers(), *args, *(kwargs or {}).values()]
    before = {id(t.untyped_storage()) for t in held if isinstance(t, torch.Tensor)}
    seen: dict[int, int] = {}
    keep = []

    def pack(t):
        storage = t.untyped_storage()
        if id(storage) not in before and storage.nbytes() >= min_bytes:
            seen[id(storage)] = storage.nbytes()
            keep.append(storage)  # alive until counted: ids stay unique
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(*args, **(kwargs or {}))
    del out
    return sum(seen.values())


def hooks_of(code, model):
    namespace = {"model": model}
    exec(code, namespace)
    return namespace["offload"]


@pytest.fixture(scope="module")
def course():
    torch.manual_seed(0)
    return Transformer(), torch.randint(0, 64, (4, 16))


def test_what_stays_after_forward_is_what_autograd_saved(course):
    model, tokens = course
    step = eager_step_memory(model, (tokens,))
    assert step.after_forward_bytes == saved_by_autograd(model, (tokens,))
    assert step.cpu_bytes == 0
    assert step.activation_peak_bytes >= step.after_forward_bytes


def test_the_pasted_hooks_move_every_saved_activation_above_their_size_off_the_device(course):
    model, tokens = course
    without = eager_step_memory(model, (tokens,))
    for min_bytes in (1, 16_384, 32_768):
        step = eager_step_memory(model, (tokens,), hooks=hooks_of(offload_code(min_bytes), model))
        moved_storages = saved_by_autograd(model, (tokens,), min_bytes=min_bytes)
        assert moved_storages > 0
        assert step.after_forward_bytes == without.after_forward_bytes - moved_storages, min_bytes
        assert step.cpu_bytes >= moved_storages  # a storage saved twice is copied twice
        assert step.activation_peak_bytes < without.activation_peak_bytes


def test_hooks_that_move_nothing_change_nothing(course):
    model, tokens = course
    largest = max(b.nbytes() for b in [t.untyped_storage() for t in model.parameters()])
    step = eager_step_memory(model, (tokens,), hooks=hooks_of(offload_code(10 * largest), model))
    assert step == eager_step_memory(model, (tokens,))


def test_parameters_and_inputs_that_need_a_gradient_stay_on_the_device():
    """Offloading a parameter's saved view would only copy it back beside itself in backward."""
    torch.manual_seed(0)
    model, x = MLP(), torch.randn(4, 16, requires_grad=True)
    e = bw.extract(model, x, partitioner="min_cut")
    step = eager_step_memory(model, (x,), hooks=hooks_of(offload_code(1), model), requires_grad={"x": True})
    assert step.cpu_bytes == e.saved_activation_bytes == saved_by_autograd(model, (x,))
    assert step.after_forward_bytes == 0
    with_input = eager_step_memory(model, (x.detach(),), hooks=hooks_of(offload_code(1), model))
    assert with_input.cpu_bytes == step.cpu_bytes + x.nbytes  # an input needing no gradient is copied too


def test_the_model_is_left_as_it_was(course):
    model, tokens = course
    before = copy.deepcopy(model.state_dict())
    flags = [p.requires_grad for p in model.parameters()]
    frozen = {"embed.weight": False}
    eager_step_memory(model, (tokens,), hooks=hooks_of(offload_code(1), model), requires_grad=frozen)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None and p.device.type == "cpu" for p in model.parameters())
    assert [p.requires_grad for p in model.parameters()] == flags


def _wide_mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4096))


def test_the_peak_is_what_the_step_holds_by_hand_and_leaves_the_parameters_gradients_out():
    """x 64 x 256 (no gradient): at the loss's sum the step holds the last Linear's output (64 x 4096 floats,
    1,048,576 B), the ReLU's output it saved (65,536 B) and the loss (4 B). In backward the last weight's
    gradient (4096 x 256 floats, 4,194,304 B) is a parameter's: out, as in the extraction's peak."""
    model, x = _wide_mlp(), torch.randn(64, 256)
    step = eager_step_memory(model, (x,))
    assert step.activation_peak_bytes == 64 * 4096 * 4 + 64 * 256 * 4 + 4 == 1_114_116
    assert step.after_forward_bytes == 64 * 256 * 4  # the ReLU's output, saved by the last Linear
    assert step.activation_peak_bytes == bw.extract(model, x, partitioner="min_cut").peak_activation_only_bytes + 4
    model[0].weight.requires_grad_(False)  # a frozen parameter (LoRA, partial fine-tuning) is counted alike
    try:
        assert eager_step_memory(model, (x,)) == step
    finally:
        model[0].weight.requires_grad_(True)


def test_a_model_built_as_fakes_is_counted_on_new_fakes_and_left_as_it_was():
    real, x = _wide_mlp(), torch.randn(64, 256)
    with FakeTensorMode():
        model = _wide_mlp()
        fake_x = torch.empty(64, 256)
    parameters = [(p, p.requires_grad) for p in model.parameters()]
    assert eager_step_memory(model, (fake_x,)) == eager_step_memory(real, (x,))
    assert [(p, p.requires_grad) for p in model.parameters()] == parameters and all(
        p.grad is None for p in model.parameters()
    )


def test_a_transformers_model_called_with_keywords_starts_backward_from_its_loss():
    """GPT-2 as its docs call it for training: `model(input_ids=..., attention_mask=..., labels=...)`."""
    model, inputs = BY_NAME["gpt2"].make()
    step = eager_step_memory(model, (), inputs)
    with sdpa_kernel(
        SDPBackend.MATH
    ):  # the attention kernel the stand-in device picks (the CPU's fused one saves less)
        assert step.after_forward_bytes == saved_by_autograd(model, (), inputs)
    offloaded = eager_step_memory(model, (), inputs, hooks=hooks_of(offload_code(1), model))
    assert offloaded.after_forward_bytes == 0
    assert offloaded.activation_peak_bytes < step.activation_peak_bytes


class _ParameterInTheLoss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(16, 16))
        self.b = torch.nn.Parameter(torch.randn(1024, 1024))

    def forward(self, x):
        return (x @ self.w).sum() + self.b.sum()  # b's gradient is an expanded one: AccumulateGrad copies it


def test_a_gradient_accumulate_grad_copies_is_still_a_parameters_gradient():
    torch.manual_seed(0)
    model, x = _ParameterInTheLoss(), torch.randn(4, 16)
    step = eager_step_memory(model, (x,))
    assert step.activation_peak_bytes < model.b.nbytes  # the 4 MB copy in b.grad is not an activation
    assert step.activation_peak_bytes <= bw.extract(model, x).peak_activation_only_bytes + 4


class _LazyCache(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(16, 16)
        self.cached = None
        self.table = torch.randn(4096, 64)  # a plain attribute, neither parameter nor buffer

    def forward(self, x):
        if self.cached is None:
            self.cached = torch.arange(16, dtype=x.dtype, device=x.device)  # set lazily, as rotary caches are
        return self.linear(x + self.cached) * self.table[:4, :16].sum()


def test_attributes_the_forward_sets_are_put_back_and_a_view_of_an_old_tensor_is_not_new_memory():
    torch.manual_seed(0)
    with torch.device("meta"):
        on_meta = _LazyCache()
        x = torch.empty(4, 16)
    step = eager_step_memory(on_meta, (x,))
    assert on_meta.cached is None, "the user's model keeps no fake the step made"
    assert step.after_forward_bytes < on_meta.table.nbytes, "a slice of the table is no new storage"
    real = _LazyCache()
    eager_step_memory(real, (torch.randn(4, 16),))
    assert real.cached is None and real(torch.randn(4, 16)).shape == (4, 16)


class _Mask(torch.nn.Module):
    def __init__(self, out: bool):
        super().__init__()
        self.w, self.out = torch.nn.Parameter(torch.randn(256, 256)), out

    def forward(self, x):
        if self.out:
            mask = torch.empty(0, device=x.device)
            torch.ones(256, 256, out=mask)  # grows an empty storage to 262,144 B
        else:
            mask = torch.ones(256, 256, device=x.device)
        return (self.w * mask).sum() + x.sum()


def test_a_storage_that_grows_is_counted_at_its_new_size():
    x = torch.randn(4)
    assert eager_step_memory(_Mask(out=True), (x,)).after_forward_bytes == 256 * 256 * 4
    assert eager_step_memory(_Mask(out=True), (x,)) == eager_step_memory(_Mask(out=False), (x,))
