"""Never a stale result, no side effects, random ops told apart, names as written, causes named."""

import resource
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

import bwd_widgets as bw
from bwd_widgets.views.payload import graph_payload

GAIN = 1.0


class Editable(nn.Module):
    """A model with everything a notebook user edits between two runs of a cell."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.act = nn.ReLU()
        self.drop = nn.Dropout(0.5)
        self.scale = 2.0

    def forward(self, x):
        return self.drop(self.act(self.lin(x))) * self.scale * GAIN


def _same(cached, fresh):
    assert cached.backward_code == fresh.backward_code
    assert cached.forward_code == fresh.forward_code
    assert cached.autograd_gradients.keys() == fresh.autograd_gradients.keys()
    for key, value in fresh.autograd_gradients.items():
        torch.testing.assert_close(cached.autograd_gradients[key], value)


def _edit_swap(model):
    model.act = nn.Tanh()


def _edit_attribute(model):
    model.scale = 3.0


def _edit_dropout_p(model):
    model.drop.p = 0.2


def _edit_submodule_eval(model):
    model.drop.eval()


def _edit_instance_forward(model):
    model.forward = lambda x: model.lin(x).sigmoid()


def _edit_global(model):
    global GAIN
    GAIN = 5.0


EDITS = [_edit_swap, _edit_attribute, _edit_dropout_p, _edit_submodule_eval, _edit_instance_forward, _edit_global]


@pytest.mark.parametrize("edit", EDITS, ids=lambda f: f.__name__[6:])
def test_the_cache_never_returns_what_a_fresh_trace_would_not(edit, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "GAIN", 1.0)
    torch.manual_seed(0)
    model, x = Editable(), torch.randn(3, 4)
    before = bw.extract(model, x)
    edit(model)
    cached, fresh = bw.extract(model, x), bw.extract(model, x, cache=False)
    _same(cached, fresh)
    assert cached.backward_code != before.backward_code or cached.forward_code != before.forward_code


def test_the_cache_sees_autocast_and_nested_inputs():
    torch.manual_seed(0)
    model, x = Editable(), torch.randn(3, 4)
    plain = bw.extract(model, x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cached, fresh = bw.extract(model, x), bw.extract(model, x, cache=False)
    _same(cached, fresh)
    assert "bfloat16" in cached.forward_code and "bfloat16" not in plain.forward_code

    class Lists(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(()))

        def forward(self, xs):
            return sum((t * self.weight).sin().sum() for t in xs)

    lists = Lists()
    small = bw.extract(lists, [torch.randn(2, 2)])
    bigger = [torch.randn(5, 5)]
    _same(bw.extract(lists, bigger), bw.extract(lists, bigger, cache=False))
    assert bw.extract(lists, bigger).saved_activation_bytes == 5 * 5 * 4 != small.saved_activation_bytes


def test_function_models_are_never_cached():
    def f(x):
        return (x * GAIN).sin()

    x = torch.randn(3)
    first = bw.extract(f, x)
    assert bw.extract(f, x) is not first and bw.extract(f, x).partitions[0].trace is not first.partitions[0].trace


class Dropping(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.lin(x).relu()).sum()


def _replays_autograd(extraction):
    partition = extraction.partitions[0]
    assert partition.backward_inputs is not None
    for output, gradient in zip(partition.backward(*partition.backward_inputs), partition.gradients):
        torch.testing.assert_close(output, extraction.autograd_gradients[gradient.key])


def test_random_ops_keep_their_numbers_through_reruns_and_the_cache():
    torch.manual_seed(0)
    model, x = Dropping(), torch.randn(16, 8)
    state = torch.get_rng_state()
    first = bw.extract(model, x)
    assert torch.equal(torch.get_rng_state(), state), "extract() leaves the user's random state alone"
    _replays_autograd(first)
    _replays_autograd(first.rerun("default"))
    _replays_autograd(first.rerun("min_cut"))
    torch.manual_seed(1)
    cached, fresh = bw.extract(model, x), bw.extract(model, x, cache=False)
    _same(cached, fresh)
    assert not torch.equal(cached.autograd_gradients["lin.weight"], first.autograd_gradients["lin.weight"])


def test_min_cut_recomputing_a_random_op_says_so():
    torch.manual_seed(0)
    extraction = bw.extract(Dropping(), torch.randn(16, 8))
    assert not extraction.notes
    low = extraction.rerun("min_cut", 0.0)
    if not any(op.startswith("aten.native_dropout") for _, op in low.recomputed):
        pytest.fail("expected min-cut at budget 0 to recompute the dropout on this model")
    assert any("recomputes random op(s) aten.native_dropout" in n for n in low.notes)
    assert any("random op" in n for n in graph_payload(low)["notes"])


def test_graphnet_name_rule_is_for_samples_only():
    class Heads(nn.Module):
        def __init__(self):
            super().__init__()
            self.mask_head = nn.Linear(4, 4)
            self.anchor_proj = nn.Linear(4, 4)
            self.out = nn.Linear(4, 1)

        def forward(self, unmasked):
            return self.out(self.anchor_proj(self.mask_head(unmasked))).sum()

    extraction = bw.extract(Heads(), torch.randn(2, 4), requires_grad="floating")  # a loss: else the batch has none
    assert all(extraction.requires_grad.values())
    assert {"unmasked", "mask_head.weight", "anchor_proj.weight"} <= set(extraction.autograd_gradients)
    ruled = bw.extract(Heads(), torch.randn(2, 4), requires_grad=bw.default_requires_grad, cache=False)
    assert not ruled.requires_grad["mask_head.weight"] and not ruled.requires_grad["unmasked"]
    assert ruled.requires_grad["out.weight"]


def test_unknown_requires_grad_names_are_an_error_naming_close_matches():
    with pytest.raises(bw.BwdWidgetsError) as error:
        bw.extract(nn.Linear(3, 3), torch.randn(2, 3), requires_grad={"wieght": False})
    assert "'wieght'" in str(error.value) and "'weight'" in str(error.value) and "\n" not in str(error.value)


def test_extract_leaves_the_model_and_its_gradients_as_they_were():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    model[0].weight.grad = marker = torch.ones_like(model[0].weight)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    flags = [p.requires_grad for p in model.parameters()]
    bw.extract(model, torch.randn(2, 3, 8, 8))
    bw.extract(model, torch.randn(2, 3, 8, 8), partitioner="min_cut", capture_scalars=False)  # the Dynamo route
    for key, value in model.state_dict().items():
        assert torch.equal(value, state[key]), key
    assert model[0].weight.grad is marker and model[1].weight.grad is None
    assert [p.requires_grad for p in model.parameters()] == flags


def test_the_users_compiled_code_is_not_recompiled():
    compiled_graphs = []

    def backend(gm, example_inputs):
        compiled_graphs.append(gm)
        return gm.forward

    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
    model[0] = torch.compile(model[0], backend=backend)
    standalone = torch.compile(nn.Sequential(nn.Linear(4, 4)), backend=backend)
    x = torch.randn(2, 4)
    model(x), standalone(x)
    compiled = len(compiled_graphs)
    assert compiled >= 1
    assert bw.extract(model, x).backward_node_count > 0
    assert bw.extract(nn.Sequential(nn.Linear(4, 4)), x, capture_scalars=False).backward_node_count > 0
    model(x), standalone(x)
    assert len(compiled_graphs) == compiled, "the user's compiled modules ran from their cache, not recompiled"


def test_a_dropped_extraction_frees_its_graphs_and_real_values_on_both_routes():
    """Nothing global (Dynamo's table of backends, compiled code kept on code the user compiled too)
    keeps a capture alive."""
    import gc
    import weakref

    users_own = torch.compile(nn.Linear(3, 2), backend=lambda gm, example_inputs: gm.forward)
    users_own(torch.randn(4, 3))  # Linear.forward now holds compiled code that must stay
    for capture_scalars in (True, False):  # torch.fx, then Dynamo
        extraction = bw.extract(nn.Linear(3, 2), torch.randn(4, 3), capture_scalars=capture_scalars, cache=False)
        partition = weakref.ref(extraction.partitions[0])
        inputs = weakref.ref(extraction.partitions[0].backward_inputs[0])
        del extraction
        gc.collect()
        assert partition() is None and inputs() is None, f"capture_scalars={capture_scalars}: the capture leaked"


def test_one_name_per_input_on_both_routes():
    for capture_scalars in (True, False):  # torch.fx, then Dynamo
        extraction = bw.extract(nn.Linear(3, 2), torch.randn(4, 3), capture_scalars=capture_scalars, cache=False)
        names = {g.grad_of for g in extraction.gradients}
        assert names == {"input", "weight", "bias"}, names
        assert {g.key for g in extraction.gradients} == set(extraction.autograd_gradients)
        sources = {s.source for s in extraction.saved_tensors if s.kind == "input"}
        assert sources == {"input"}


def _write_sample(folder, weight_meta, model="return (x * w).sum(),", signature="x, w"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.py").write_text(
        f"import torch\n\nclass GraphModule(torch.nn.Module):\n    def forward(self, {signature}):\n        {model}\n"
    )
    (folder / "weight_meta.py").write_text(textwrap.dedent(weight_meta))
    return folder


def _meta(name, shape, dtype="torch.float32", **extra):
    def literal(value):
        return (
            f"float('{value}')"
            if isinstance(value, float) and value != value or value in (float("inf"),)
            else repr(value)
        )

    fields = "".join(f"    {k} = {literal(v)}\n" for k, v in extra.items())
    return f"class Program_weight_tensor_meta_{name}:\n    name = {name!r}\n    shape = {shape!r}\n    dtype = {dtype!r}\n{fields}\n"


def test_fake_mode_builds_no_real_tensors_from_sample_metas(tmp_path):
    folder = _write_sample(tmp_path / "big", _meta("x", [256, 1024, 1024]) + _meta("w", [1024]))
    script = f"""
import resource, torch, bwd_widgets as bw
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
sample = bw.load_graphnet_sample({str(folder)!r})
g = bw.extract(sample, mode="fake")
assert g.backward_node_count > 0
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    grown = int(done.stdout.split()[-1])
    assert grown < 0.5 * 2**30, f"fake mode grew by {grown / 2**30:.2f} GiB for a 1 GiB input"
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss > 0


def test_sample_metas_are_read_without_running_them(tmp_path):
    sentinel = tmp_path / "ran"
    folder = _write_sample(tmp_path / "s", f"open({str(sentinel)!r}, 'w')\n" + _meta("x", [3]) + _meta("w", [3]))
    sample = bw.load_graphnet_sample(folder)
    assert [m.name for m in sample.metas] == ["x", "w"] and not sentinel.exists()
    (folder / "weight_meta.py").write_text(
        f"class Program_weight_tensor_meta_x:\n    name = 'x'\n    shape = [__import__('os').system('touch {sentinel}')]\n"
    )
    with pytest.raises(bw.SampleError) as error:
        bw.load_graphnet_sample(folder)
    assert "not a literal value" in str(error.value) and not sentinel.exists()


@pytest.mark.parametrize("field", ["mean", "std"])
def test_non_finite_mean_or_std_builds_finite_inputs_and_says_so(tmp_path, field):
    value = float("nan") if field == "mean" else float("inf")
    folder = _write_sample(tmp_path / "odd", _meta("x", [64], **{field: value}) + _meta("w", [64]))
    extraction = bw.extract(bw.load_graphnet_sample(folder))
    assert torch.isfinite(extraction.partitions[0].forward_inputs[0]).all()
    assert any(f"x has {field} = {value}" in note and "\n" not in note for note in extraction.notes)


BAD_METAS = [
    (_meta("x", [4], data=[1.0, 2.0]), "2 data values for shape [4]"),
    (_meta("x", [2.5]), "whole numbers"),
    (_meta("x", [4], dtype="torch.int64", min_val=5, max_val=1), "min_val 5 above max_val 1"),
    (_meta("x", [2], data=["a", "b"]), "not a list of numbers"),
    (_meta("x", [-3]), "negative size"),
]


@pytest.mark.parametrize("meta, message", BAD_METAS, ids=[m for _, m in BAD_METAS])
def test_bad_metas_are_one_line_sample_errors(tmp_path, meta, message):
    folder = _write_sample(tmp_path / "bad", meta + _meta("w", [4]))
    with pytest.raises(bw.SampleError) as error:
        bw.extract(bw.load_graphnet_sample(folder))
    text = str(error.value)
    assert message in text and "\n" not in text and "weight_meta.py: x" in text


def test_unreadable_and_huge_metas(tmp_path):
    folder = _write_sample(tmp_path / "latin", _meta("x", [4]) + _meta("w", [4]))
    (folder / "weight_meta.py").write_bytes("# caf\xe9\n".encode("latin-1") + (folder / "weight_meta.py").read_bytes())
    with pytest.raises(bw.SampleError, match="not UTF-8"):
        bw.load_graphnet_sample(folder)
    huge = _write_sample(tmp_path / "huge", _meta("x", [2**40]) + _meta("w", [1]))
    with pytest.raises(bw.SampleError) as error:
        bw.extract(bw.load_graphnet_sample(huge))
    assert "mode='fake'" in str(error.value) and "\n" not in str(error.value)
    assert bw.extract(bw.load_graphnet_sample(huge), mode="fake").backward_node_count > 0


def test_torch_failures_name_the_real_cause_and_the_line(tmp_path):
    class InPlace(nn.Module):
        def forward(self, x):
            x.div_(255)  # the line the message must point at
            return x.sum()

    with pytest.raises(bw.ExtractionFailed) as error:
        bw.extract(InPlace(), torch.randn(3))
    text = str(error.value)
    assert "leaf Variable that requires grad" in text and "x.div_(255)" in text and "\n" not in text

    with pytest.raises(bw.ExtractionFailed) as error:
        bw.extract(nn.Conv2d(3, 4, 3), torch.randn(1, 5, 8, 8))
    text = str(error.value)
    assert "expected input" in text and "5 channels" in text and "\n" not in text
    assert "fake tensor call" not in text


def test_checkpointing_keeps_its_meaning_however_it_is_called():
    from torch.utils.checkpoint import checkpoint

    from bwd_widgets.examples import Block

    class Checkpointed(nn.Module):
        def __init__(self, reentrant):
            super().__init__()
            self.block, self.reentrant = Block(32, 4), reentrant

        def forward(self, x):
            return checkpoint(self.block, x, use_reentrant=self.reentrant).sum()

    class Offloaded(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, x):
            with torch.autograd.graph.save_on_cpu():
                return self.lin(x).tanh().sum()

    torch.manual_seed(0)
    x = torch.randn(2, 8, 32)
    plain = bw.extract(Block(32, 4), x)
    kept = bw.extract(Checkpointed(reentrant=False), x)
    assert kept.recomputed and kept.saved_activation_bytes < plain.saved_activation_bytes
    for model in (Checkpointed(reentrant=True), Offloaded()):
        routes = []
        real = bw.core.capture.CaptureSession.compile_dynamo

        def counting(self, *args, real=real, routes=routes, **kwargs):
            routes.append("dynamo")
            return real(self, *args, **kwargs)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(bw.core.capture.CaptureSession, "compile_dynamo", counting)
            try:
                bw.extract(model, x if isinstance(model, Checkpointed) else torch.randn(2, 8))
            except bw.BwdWidgetsError:
                pass  # what Dynamo makes of it is Dynamo's; torch.fx must not silently drop it
        # Dynamo, never torch.fx (twice where the loss's batch is captured again without a gradient)
        assert routes and set(routes) == {"dynamo"}


def test_the_command_line_help_says_a_sample_is_code(capsys):
    from bwd_widgets.cli import main

    with pytest.raises(SystemExit):
        main(["--help"])
    assert "A sample is code: its model.py runs" in capsys.readouterr().out
