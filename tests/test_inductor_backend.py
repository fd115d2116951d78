"""`bw.extract(..., backend="inductor")` shows the partition `torch.compile(model)` makes: Inductor's joint graph (after
its pre-grad passes, decompositions and joint-graph passes), split by min-cut.

Held against real Inductor on this machine's CPU (its C++ code compiled by gcc): the saved set, by the independent
pack-hook count (tests/compiled_saves.py; every model, budget and backend of tests/test_torch_partition.py's one list
is held there too), the joint graph Inductor's own partition_fn receives, and what every other feature does on such an
extraction: works exactly, or says in one sentence why not.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
import torch._inductor.compile_fx as inductor_compile_fx
import torch._inductor.config as inductor_config
from compiled_saves import counted_saves
from IPython.utils.capture import capture_output
from ipython_shell import notebook_shell

import bwd_widgets as bw
from bwd_widgets.core.kinds import BACKENDS
from bwd_widgets.core.partitioners import registered_partitioners
from bwd_widgets.examples import MLP, Block, ConvBN, Transformer
from bwd_widgets.views.payload import graph_payload
from bwd_widgets.views.static import headline


def notebook_3s_model() -> tuple[torch.nn.Module, torch.Tensor]:
    """notebooks/03_partitioners.ipynb's model and tokens."""
    torch.manual_seed(0)
    return Transformer(width=64, depth=2, heads=4, vocab=128), torch.randint(0, 128, (4, 32))


def shown_storages(extraction: bw.BackwardExtraction) -> list[int]:
    """The bytes of each new storage the partition saves, as bwd_widgets counts them (each storage once)."""
    return sorted(s.activation_bytes for s in extraction.saved_tensors if s.activation_bytes)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_notebook_3s_model_saves_what_torch_compile_saves_on_each_backend(backend: str) -> None:
    """Storage by storage: the sizes bwd_widgets shows are the sizes the pack hook sees around torch.compile(model,
    backend=...) (min-cut on both: aot_eager's and Inductor's own partitioner). Inductor's decompositions and joint
    passes save fewer values than aot_eager on this model, and a different set."""
    model, tokens = notebook_3s_model()
    ours = bw.extract(model, tokens, partitioner="min_cut", backend=backend, cache=False)
    compiled = counted_saves(model, (tokens,), backend=backend)
    assert shown_storages(ours) == sorted(compiled.storage_bytes)
    assert ours.saved_activation_bytes == compiled.bytes
    other = bw.extract(model, tokens, partitioner="min_cut", backend=({*BACKENDS} - {backend}).pop(), cache=False)
    inductor, aot_eager = (ours, other) if backend == "inductor" else (other, ours)
    assert len(inductor.saved_tensors) < len(aot_eager.saved_tensors)
    assert shown_storages(inductor) != shown_storages(aot_eager)


def _joint_inductor_partitions(model: torch.nn.Module, inputs: tuple) -> torch.fx.GraphModule:
    """The joint graph real Inductor hands min-cut inside `torch.compile(model)` (its own partition_fn, after its
    joint passes), recorded by wrapping the min-cut that Inductor's module calls."""
    seen: list[torch.fx.GraphModule] = []
    original = inductor_compile_fx.min_cut_rematerialization_partition

    def recording(joint: torch.fx.GraphModule, *args: object, **kwargs: object) -> object:
        seen.append(torch.fx.GraphModule(joint, joint.graph.__deepcopy__()))
        return original(joint, *args, **kwargs)

    torch._dynamo.reset()
    inductor_compile_fx.min_cut_rematerialization_partition = recording
    try:
        torch.compile(model)(*inputs)
    finally:
        inductor_compile_fx.min_cut_rematerialization_partition = original
        torch._dynamo.reset()
    (joint,) = seen
    return joint


def _ops(gm: torch.fx.GraphModule) -> Counter[str]:
    return Counter(str(n.target) for n in gm.graph.nodes if n.op == "call_function")


@pytest.mark.slow
@pytest.mark.parametrize(
    "build",
    [lambda: (MLP(width=32, depth=3), torch.randn(8, 32)), lambda: (Block(width=32, heads=4), torch.randn(2, 8, 32))],
    ids=["MLP", "Block"],
)
def test_the_joint_graph_shown_is_the_one_inductor_partitions(build) -> None:
    """Op for op, the joint graph of an inductor extraction is the one Inductor's partition_fn hands min-cut in a real
    torch.compile(model); aot_eager's joint graph is not (it is not decomposed)."""
    torch.manual_seed(0)
    model, x = build()
    shown = bw.extract(model, x, backend="inductor", cache=False)
    x = x.detach().requires_grad_(shown.requires_grad["x"])
    partitioned = _joint_inductor_partitions(model, (x,))
    assert _ops(shown.joint) == _ops(partitioned)
    assert _ops(bw.extract(model, x, partitioner="min_cut", cache=False).joint) != _ops(partitioned)


@pytest.mark.slow
def test_an_inductor_sweep_point_is_what_torch_compile_saves_at_its_budget() -> None:
    model, tokens = notebook_3s_model()
    sweep = bw.sweep(model, tokens, budgets=[0.2, 0.6], progress=False, backend="inductor")
    for point in sweep.points:
        assert point.extraction.backend == "inductor"
        assert (
            point.saved_activation_bytes
            == counted_saves(model, (tokens,), backend="inductor", budget=point.budget).bytes
        )


@pytest.mark.slow
def test_inductors_channels_last_copies_are_what_the_note_names() -> None:
    """Where Inductor's code generation lays convolutions out channels_last (torch's own decision), it keeps
    channels_last copies of saved convolution inputs; each extra storage the pack hook sees is one the note names,
    and with that layout off torch.compile(model) saves the partition exactly."""
    torch.manual_seed(0)
    model, image = ConvBN(), torch.randn(2, 3, 16, 16)
    ours = bw.extract(model, image, backend="inductor", cache=False)
    copies = ours.partitions[0].layout_copies
    assert copies and any("channels_last" in note for note in ours.notes)
    image = image.detach().requires_grad_(ours.requires_grad["x"])
    compiled = counted_saves(model, (image,), backend="inductor")
    extra = Counter(compiled.storage_bytes) - Counter(shown_storages(ours))
    assert extra and not extra - Counter(s.bytes for s in copies)
    with inductor_config.patch(layout_optimization=False):
        assert sorted(counted_saves(model, (image,), backend="inductor").storage_bytes) == shown_storages(ours)
    assert not bw.extract(model, image, partitioner="min_cut", cache=False).partitions[0].layout_copies


# --- every other feature on an inductor extraction: exact, or one sentence -----------------------------------


@pytest.fixture(scope="module")
def inductor_mlp() -> tuple[torch.nn.Module, torch.Tensor, bw.BackwardExtraction]:
    torch.manual_seed(0)
    model, x = MLP(width=16, depth=3), torch.randn(8, 16)
    return model, x, bw.extract(model, x, backend="inductor")


def test_inductor_splits_with_min_cut_only_and_says_so_in_one_sentence(inductor_mlp) -> None:
    model, x, extraction = inductor_mlp
    assert extraction.backend == "inductor" and extraction.partitioner == "min_cut"
    for refused in (
        lambda: extraction.rerun("default"),
        lambda: bw.extract(model, x, backend="inductor", partitioner="default"),
    ):
        with pytest.raises(
            bw.PartitionerError, match=r"^this is Inductor's joint graph .* backend='aot_eager'"
        ) as error:
            refused()
        assert "\n" not in str(error.value)
    with pytest.raises(bw.BwdWidgetsError, match="unknown backend 'eager'"):
        bw.extract(model, x, backend="eager")
    assert extraction.rerun().label == "min_cut" and extraction.rerun(0.3).memory_budget == 0.3


def test_the_header_and_the_selector_say_which_backend(inductor_mlp) -> None:
    model, x, extraction = inductor_mlp
    for shown, backend in ((extraction, "inductor"), (bw.extract(model, x), "aot_eager")):
        data = graph_payload(shown)
        assert data["backend"] == backend and headline(data)[0].endswith(f"\u00b7 {backend}")
        assert f"backend={backend!r}" in repr(shown)
        offered = [option["name"] for option in data["partitioners"]]
        everyone = [entry.name for entry in registered_partitioners()]
        assert offered == (["min_cut"] if backend == "inductor" else everyone)


def test_compare_sets_aot_eager_and_inductor_side_by_side(inductor_mlp) -> None:
    model, x, extraction = inductor_mlp
    comparison = bw.compare(model, x, backends=["aot_eager", "inductor"], partitioners=["min_cut", 0.0])
    assert [(r["backend"], r["partition"]) for r in comparison.rows] == [
        ("aot_eager", "min_cut"),
        ("aot_eager", "min_cut budget 0"),
        ("inductor", "inductor min_cut"),
        ("inductor", "inductor min_cut budget 0"),
    ]
    assert comparison.rows[2]["saved_activation_bytes"] == extraction.saved_activation_bytes
    own = bw.compare(extraction)  # unless told, each backend's own partitioners
    assert [r["partition"] for r in own.rows] == [
        "inductor min_cut",
        "inductor min_cut budget 0.5",
        "inductor min_cut budget 0",
    ]
    with pytest.raises(bw.BwdWidgetsError, match="holds inductor's joint graph only"):
        bw.compare(extraction, backends=["aot_eager", "inductor"])


def test_the_trace_cache_keeps_each_backends_trace_apart(inductor_mlp) -> None:
    model, x, extraction = inductor_mlp
    assert bw.extract(model, x).backend == "aot_eager"
    again = bw.extract(model, x, backend="inductor")
    assert again.backend == "inductor" and again.joint is extraction.joint


def test_fake_mode_and_measure_give_the_real_partition(inductor_mlp) -> None:
    model, x, extraction = inductor_mlp
    fake = bw.extract(model, x, backend="inductor", mode="fake", cache=False)
    assert shown_storages(fake) == shown_storages(extraction) and _ops(fake.joint) == _ops(extraction.joint)
    measured = extraction.rerun(0.5).measure()
    assert measured.peak_bytes == measured.predicted_peak_bytes


def test_save_graphnet_writes_inductors_graphs(inductor_mlp, tmp_path) -> None:
    _, _, extraction = inductor_mlp
    folders = extraction.save_graphnet(tmp_path, "mlp", validate=True)
    backward = (folders["train_backward"] / "model.py").read_text()
    assert backward.count("def forward") == 1 and extraction.partitions[0].backward_code in backward


def test_the_magic_takes_a_backend() -> None:
    with notebook_shell(
        "%load_ext bwd_widgets\nimport torch\nfrom bwd_widgets.examples import MLP\ntorch.manual_seed(0)\n"
        "model = MLP(width=8, depth=2)\nx = torch.randn(4, 8)"
    ) as shell:
        with capture_output():
            result = shell.run_cell("g = %bwd_extract --backend inductor --budget 0.5 --no-display model(x)")
        assert result.success and shell.user_ns["g"].backend == "inductor" and shell.user_ns["g"].memory_budget == 0.5
        with capture_output() as captured:
            shell.run_cell("%bwd_extract --backend inductor --partitioner default --no-display model(x)")
        assert "this is Inductor's joint graph" in captured.stderr + captured.stdout
