"""`bw.load_trace`: a TORCH_TRACE that a real `torch.compile` run wrote, read back as extractions.

Each trace is made here by a real run in a fresh Python process (`TORCH_TRACE=<dir>`), the course's models
compiled with aot_eager and with Inductor (its C++ code compiled on this CPU), at budgets 1 and below, with and
without a graph break. What the loaded region shows as saved is held against two independent counts: `bw.extract`
of the same model and budget, and the pack-hook count of the very run that wrote the trace
(`tests/compiled_saves.py`, run inside that process). A trace whose graph text would run code if executed is
refused, region by region, and nothing of it runs.
"""

from __future__ import annotations

import itertools
import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch_trace_runs import traced_run

import bwd_widgets as bw
from bwd_widgets.core.errors import BwdWidgetsError
from bwd_widgets.core.kinds import BACKENDS
from bwd_widgets.examples import Transformer
from bwd_widgets.extraction.loaded_trace import NOT_IN_TRACE

from shared_data import shared_path

TESTS = Path(__file__).resolve().parent


def _made(name: str) -> tuple[torch.nn.Module, torch.Tensor]:
    """The model and input the traced run made, made again the same way (the same seed, the same order)."""
    torch.manual_seed(0)
    if name == "transformer":
        return Transformer(), torch.randint(0, 64, (2, 8))
    raise AssertionError(name)


def _saved(extraction: bw.BackwardExtraction) -> list[tuple[str, tuple, int]]:
    return [(s.name, s.shape, s.activation_bytes) for s in extraction.saved_tensors if s.kind == "activation"]


def _slow_for_inductor(*cases: tuple) -> list:
    """Inductor compiles C++ in the traced run (a minute on a loaded machine): those cases go to the slow tier."""
    return [pytest.param(*case, marks=[pytest.mark.slow] if "inductor" in case else []) for case in cases]


@pytest.mark.parametrize(("backend", "budget"), _slow_for_inductor(*itertools.product(BACKENDS, [1.0, 0.5])))
def test_a_loaded_region_saves_what_the_run_saved(tmp_path: Path, backend: str, budget: float) -> None:
    counted = traced_run(tmp_path / "trace", "transformer", backend, budget, debug=True)
    load = bw.load_trace(tmp_path / "trace")
    assert not load.refused and len(load) == 1
    (region,) = load
    model, tokens = _made("transformer")
    extracted = bw.extract(
        model, tokens, backend=backend, partitioner="min_cut", memory_budget=budget, cache=False, mode="fake"
    )
    assert _saved(region) == _saved(extracted)
    assert region.saved_activation_bytes == extracted.saved_activation_bytes == counted["bytes"]
    assert sum(1 for s in region.saved_tensors if s.activation_bytes) == counted["tensors"]
    assert region.memory_budget == budget and region.compile_id == "0/0" and region.rank is None
    assert region.backend == extracted.backend == backend
    assert [s.name for s in region.saved_tensors] == [
        n.name for n in region.backward.graph.find_nodes(op="placeholder") if not n.name.startswith("tangents_")
    ]
    # the memory picture too: the ops' outputs are made by torch's ops on fake tensors, so a view shares its input's
    # storage as in the extraction (an annotation alone made each view a storage of its own: 8% over, peak too)
    assert region.peak_activation_bytes == extracted.peak_activation_bytes > 0
    timeline = [step["live_bytes"] for step in region.memory_timeline()]
    assert timeline == [step["live_bytes"] for step in extracted.memory_timeline()]
    # The inputs are named as the model names them, read from the names Dynamo gave its graph's inputs.
    assert sorted((s.kind, s.source) for s in region.saved_tensors if s.kind != "activation") == sorted(
        (s.kind, s.source) for s in extracted.saved_tensors if s.kind != "activation"
    )
    # torch's reasons: below budget 1 its knapsack ran and wrote min_cut_information; at 1 nothing is written.
    reasons = {s.name: s.torch_reason for s in region.saved_tensors if s.kind == "activation"}
    if budget < 1:
        assert reasons == {s.name: s.torch_reason for s in extracted.saved_tensors if s.kind == "activation"}
        assert {"knapsack: saved", "min-cut: in the cut"} <= set(reasons.values())
    else:
        assert set(reasons.values()) == {NOT_IN_TRACE}


@pytest.mark.slow
def test_a_compile_that_hits_inductors_caches_reads_as_inductor(tmp_path: Path) -> None:
    """A compile served from AOT Autograd's and Inductor's caches (a training step's, backward run) writes no
    pre-grad graph, and its post-grad graph and output code after the AOT graphs: the region is Inductor's all the
    same, with the saved set of the compile that filled the caches."""
    cold, warm = (
        traced_run(tmp_path / run, "transformer", "inductor", 0.5, cache=tmp_path / "cache", backward=True)
        for run in "ab"
    )
    logs = [next((tmp_path / run).iterdir()).read_text() for run in "ab"]
    assert "after_pre_grad_graph" in logs[0] and "after_pre_grad_graph" not in logs[1]
    assert "aotautograd_cache_hit" in logs[1]  # the second compile was served from the caches the first filled
    first, second = (bw.load_trace(tmp_path / run)[0] for run in "ab")
    assert first.backend == second.backend == "inductor"
    assert _saved(first) == _saved(second) and second.saved_activation_bytes == cold["bytes"] == warm["bytes"]


@pytest.mark.slow
def test_the_two_budgets_differ_on_the_course_transformer(tmp_path: Path) -> None:
    """The budget test above would hold trivially if torch saved the same at both: it does not."""
    whole, half = (traced_run(tmp_path / f"t{b}", "transformer", "aot_eager", b) for b in (1.0, 0.5))
    assert half["bytes"] < whole["bytes"]


@pytest.mark.parametrize("backend", _slow_for_inductor(*((b,) for b in BACKENDS)))
def test_a_graph_break_gives_two_regions_each_showable(tmp_path: Path, backend: str) -> None:
    counted = traced_run(tmp_path / "trace", "broken", backend, 0.5)
    load = bw.load_trace(tmp_path / "trace")
    assert not load.refused
    assert [r.compile_id for r in load] == ["0/0_1", "1/0"]
    # The second region's input `h` is the first's output: to that region's graphs a forward input kept alive
    # (the trace sees a graph input), to the pack hook a value saved that neither the model nor the caller holds.
    (crossing,) = [s for s in load[1].saved_tensors if s.source == "h"]
    assert crossing.kind == "input" and crossing.shape == (4, 32)
    assert sum(r.saved_activation_bytes for r in load) + crossing.bytes == counted["bytes"]
    for region in load:
        shown = bw.show(region)
        assert shown.can_rerun is False  # the partitioner, budget and sweep controls are off: the run's partition
        rows = shown.data["saved"]
        assert [(r["name"], tuple(r["shape"]), r["bytes"]) for r in rows] == [
            (s.name, s.shape, s.bytes) for s in region.saved_tensors
        ]
        assert any("min_cut_information" in note for note in region.notes)
        assert {s.torch_reason for s in region.saved_tensors if s.kind == "activation"} <= {NOT_IN_TRACE}


RANKS = """
import os, sys, torch, torch.distributed as dist
import torch.multiprocessing as mp
from bwd_widgets.examples import MLP

def run(rank, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = MLP(width=16, depth=2, out=2)
    torch.compile(model, backend="aot_eager")(torch.randn(4, 16)).sum().backward()
    dist.barrier()
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(run, args=(sys.argv[1],), nprocs=2)
"""


def test_two_ranks_give_a_region_each(tmp_path: Path) -> None:
    """Two processes of one gloo job on this machine: a log per rank, each region named by its rank."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = str(free.getsockname()[1])
    script = tmp_path / "ranks.py"
    script.write_text(RANKS)
    folder = tmp_path / "trace"
    env = {"TORCH_TRACE": str(folder), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(TESTS.parent)}
    done = subprocess.run([sys.executable, str(script), port], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    load = bw.load_trace(folder)
    assert [(r.rank, r.compile_id) for r in load] == [(0, "0/0"), (1, "0/0")] and not load.refused
    assert sorted(p.name.split("_")[5] for p in folder.iterdir()) == ["0", "1"]  # torch's `..._rank_<r>_` names
    assert (
        _saved(load[0]) == _saved(load[1]) and repr(load) == "TraceLoad(2 regions: rank 0 0/0, rank 1 0/0; 0 refused)"
    )


def test_one_log_of_the_folder_loads_alone(tmp_path: Path) -> None:
    traced_run(tmp_path / "trace", "broken", "aot_eager", 1.0)
    (log,) = (tmp_path / "trace").iterdir()
    assert [r.compile_id for r in bw.load_trace(log)] == ["0/0_1", "1/0"]


def test_what_a_loaded_region_cannot_do_says_so_in_one_sentence(tmp_path: Path) -> None:
    traced_run(tmp_path / "trace", "transformer", "aot_eager", 1.0)
    load = bw.load_trace(tmp_path / "trace")
    (region,) = load
    for attempt in (
        lambda: region.rerun("min_cut", 0.3),
        region.measure,
        lambda: bw.compare(region, ["default", 0.5]),
    ):
        with pytest.raises(BwdWidgetsError) as error:
            attempt()
        assert "\n" not in str(error.value) and "TORCH_TRACE" in str(error.value)
    for whole in (lambda: bw.show(load), lambda: bw.extract(load), lambda: bw.advise(load, target="1KB")):
        with pytest.raises(bw.CallError) as error:  # the load, where one of its regions is meant
            whole()
        assert (
            "\n" not in str(error.value)
            and "run's 1 compiled region," in str(error.value)
            and "load[0]" in str(error.value)
        )


def _graphnet(*arguments: str) -> subprocess.CompletedProcess:
    """One of GraphNet's own tools, run as its README runs them: `python -m graph_net...` from its folder."""
    peer = shared_path("peer")
    return subprocess.run(
        [sys.executable, *arguments], cwd=peer, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL
    )


@pytest.mark.parametrize("device", ["cpu", "cuda:0"])
def test_samples_written_from_a_trace_pass_graphnets_validator(tmp_path: Path, device: str) -> None:
    """A region's GraphNet samples, from a CPU run's trace and from the same text on `cuda:0` (held on the CPU by a
    CPU build of torch, as fake CUDA tensors by a CUDA build): written for the CPU either way, as every sample
    bwd_widgets writes, validated by ours and run by GraphNet's own validator here."""
    traced_run(tmp_path / "trace", "transformer", "aot_eager", 0.5)
    (log,) = (tmp_path / "trace").iterdir()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / log.name).write_text(log.read_text().replace(']cpu"', f']{device}"'))
    (region,) = bw.load_trace(tmp_path / "run")
    written = region.save_graphnet(tmp_path / "out", validate=True)
    assert sorted(written) == ["train_backward", "train_forward"]
    for split, sample in written.items():
        assert sample == tmp_path / "out" / split / "region_0_0" / f"region_0_0_{split}"
        metas = (sample / "weight_meta.py").read_text() + (sample / "input_meta.py").read_text()
        assert "original_name = 'blocks.0.attn.qkv.weight'" in metas
        assert not any("cuda" in f.read_text() for f in sample.iterdir() if f.suffix in (".py", ".json"))
        copy = tmp_path / "validated" / split
        shutil.copytree(sample, copy)
        workspace = str(tmp_path / "ws" / split)
        run = _graphnet(
            "-m",
            "graph_net.torch.validate",
            "--model-path",
            str(copy),
            "--no-check-redundancy",
            "--workspace",
            workspace,
        )
        assert run.returncode == 0 and "Validation success" in run.stdout, run.stdout[-800:] + run.stderr[-800:]


EVIL = {
    "a call of a builtin": "__import__('os').system('touch {marker}')",
    "an attribute chain off a builtin": "().__class__.__base__.__subclasses__()[0]('{marker}')",
    "a lambda": "(lambda: open('{marker}', 'w'))()",
    "an op off a private torch namespace": "torch.ops._private.x.default(primals_1)",
    "a method of a value": "primals_1.__class__('{marker}')",
    "a dunder op name": "torch.ops.aten.__class__.__call__(primals_1)",
    "a public torch function": "torch.ops.aten.relu.default(torch.load('{marker}'))",
    "nesting past the parser's depth": "torch.ops.aten.relu.default(" + "[" * 400 + "]" * 400 + ")",
}


def _evil_trace(folder: Path, expression: str) -> None:
    """A trace whose forward graph would run `expression` if it were executed."""
    forward = (
        "class GraphModule(torch.nn.Module):\n"
        '    def forward(self, primals_1: "f32[4][1]cpu"):\n'
        f'        relu: "f32[4][1]cpu" = {expression}\n'
        "        return (relu, primals_1)\n"
    )
    backward = (
        "class GraphModule(torch.nn.Module):\n"
        '    def forward(self, primals_1: "f32[4][1]cpu", tangents_1: "f32[4][1]cpu"):\n'
        '        mul: "f32[4][1]cpu" = torch.ops.aten.mul.Tensor(tangents_1, primals_1)\n'
        "        return (mul,)\n"
    )
    lines = []
    for entry, text in (("aot_forward_graph", forward), ("aot_backward_graph", backward)):
        header = {entry: {}, "frame_id": 0, "frame_compile_id": 0, "attempt": 0, "has_payload": "0"}
        lines.append(
            f"V1205 16:44:56.599000 1 torch/_functorch/_aot_autograd/graph_compile.py:1886] {json.dumps(header)}"
        )
        lines += ["\t" + line for line in text.splitlines()]
    folder.mkdir()
    (folder / "dedicated_log_torch_trace_evil.log").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("what", sorted(EVIL))
def test_a_trace_whose_graph_would_run_code_is_refused_and_nothing_runs(tmp_path: Path, what: str) -> None:
    marker = tmp_path / "ran"
    _evil_trace(tmp_path / "trace", EVIL[what].format(marker=marker))
    load = bw.load_trace(tmp_path / "trace")
    assert len(load) == 1 and not load.refused  # indexed: its text is read when the region is asked for
    assert list(load) == [] and not marker.exists()
    (sentence,) = load.refused
    with pytest.raises(BwdWidgetsError, match="refused, nothing of it run"):
        load[0]
    assert not marker.exists()
    assert "refused, nothing of it run" in sentence and "\n" not in sentence and "line 3" in sentence


def test_an_op_another_library_registered_is_read_never_run(tmp_path: Path) -> None:
    """A loaded graph's values are made by running torch's own ops on fake tensors; an op this process registered
    (a library's, with Python code of its own, its fake implementation included) is named by the trace, not run:
    its value is its annotation."""
    marker = tmp_path / "ran"

    @torch.library.custom_op("bwd_widgets_test::touches", mutates_args=())
    def touches(x: torch.Tensor) -> torch.Tensor:
        marker.touch()
        return x.clone()

    @touches.register_fake
    def _(x: torch.Tensor) -> torch.Tensor:
        marker.touch()
        return torch.empty_like(x)

    _evil_trace(tmp_path / "trace", "torch.ops.bwd_widgets_test.touches.default(primals_1)")
    (region,) = bw.load_trace(tmp_path / "trace")
    assert [s.name for s in region.saved_tensors] == ["primals_1"] and region.memory_timeline()
    assert not marker.exists()


def test_the_safe_twin_of_the_refused_trace_loads(tmp_path: Path) -> None:
    """The refusal test's trace with an op call in place of the code: it loads, so the refusals are the code's."""
    _evil_trace(tmp_path / "trace", "torch.ops.aten.relu.default(primals_1)")
    (region,) = bw.load_trace(tmp_path / "trace")
    assert [s.name for s in region.saved_tensors] == ["primals_1"]


def test_a_cuda_trace_loads_where_this_torch_can_hold_it(tmp_path: Path) -> None:
    """The same run's text with its values on `cuda:0`: a CUDA build makes fake CUDA tensors (no GPU needed); a
    CPU build holds them on the CPU and says so."""
    traced_run(tmp_path / "trace", "transformer", "aot_eager", 1.0)
    (log,) = (tmp_path / "trace").iterdir()
    cuda = tmp_path / "cuda" / log.name
    cuda.parent.mkdir()
    cuda.write_text(log.read_text().replace(']cpu"', ']cuda:0"'))
    (on_cpu,) = bw.load_trace(tmp_path / "trace")
    (region,) = bw.load_trace(cuda)
    assert _saved(region) == _saved(on_cpu)
    device = next(iter(region.saved_tensors)).name
    value = next(n for n in region.backward.graph.nodes if n.name == device).meta["val"]
    if torch.backends.cuda.is_built():
        assert value.device.type == "cuda" and not any("held here on the CPU" in n for n in region.notes)
    else:
        assert value.device.type == "cpu" and any("held here on the CPU" in n for n in region.notes)


def test_a_path_without_a_trace_says_so(tmp_path: Path) -> None:
    for path in (tmp_path / "missing", tmp_path):
        with pytest.raises(BwdWidgetsError) as error:
            bw.load_trace(path)
        assert "TORCH_TRACE" in str(error.value) and "\n" not in str(error.value)
