"""The memory picture: the liveness walk's timeline against a measurement of live storages.

The measurement runs a partition's forward and backward graphs on their real inputs, with the boxed
calling convention AOT Autograd uses (the argument list is cleared, so saved values die after their
last use), under a dispatch mode that adds up the storages the ops allocate while any tensor holds them.
"""

import copy
import weakref

import pytest
import torch
import torch.utils._pytree as pytree
from torch.fx.graph import _BoxedCodeGen
from torch.utils._python_dispatch import TorchDispatchMode

import bwd_widgets as bw
from bwd_widgets.core import memory
from bwd_widgets.examples import MLP

from shared_data import shared_path

SAMPLES = ["timm/test_efficientnet.r160_in1k", "timm/test_byobnet.r160_in1k", "torchgeometric/RECT_L"]
PARTITIONS = [("default", None), ("min_cut", 0.0), ("min_cut", 0.5)]


class LiveStorages(TorchDispatchMode):
    """Bytes of the storages ops allocate, alive after each op; storages in `external` never count."""

    def __init__(self, external: set[int], blocks=None):
        super().__init__()
        self.external = external
        self.blocks = blocks or (lambda nbytes: nbytes)  # what an allocator books for so many bytes
        self.tensors: dict[int, int] = {}  # storage pointer -> live tensors holding it
        self.sizes: dict[int, int] = {}
        self.live = 0
        self.after: list[int] = []

    def hold(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        pointer = storage.data_ptr()
        if pointer in self.external or storage.nbytes() == 0:
            return
        if pointer not in self.tensors:
            self.tensors[pointer] = 0
            self.sizes[pointer] = self.blocks(storage.nbytes())
            self.live += self.sizes[pointer]
        self.tensors[pointer] += 1
        weakref.finalize(tensor, self._release, pointer)

    def _release(self, pointer: int) -> None:
        self.tensors[pointer] -= 1
        if not self.tensors[pointer]:
            del self.tensors[pointer]
            self.live -= self.sizes.pop(pointer)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for value in pytree.tree_leaves(out):
            if isinstance(value, torch.Tensor):
                self.hold(value)
        self.after.append(self.live)
        return out


def _boxed(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    graph = copy.deepcopy(gm.graph)
    graph.set_codegen(_BoxedCodeGen())
    return torch.fx.GraphModule(gm, graph)


def _pointers(values) -> set[int]:
    return {v.untyped_storage().data_ptr() for v in values if isinstance(v, torch.Tensor)}


def measured_peak(partition, blocks=None) -> tuple[int, int]:
    """(peak in forward, peak in backward) of live storages, running the graphs on real inputs; with `blocks`,
    each storage as that allocator books it."""
    inputs = list(partition.trace.forward_inputs)
    tracker = LiveStorages(_pointers(inputs), blocks)
    with torch.no_grad():
        with tracker:
            outputs = _boxed(partition.forward)(list(inputs))
        forward = max(tracker.after)
        names = [getattr(n, "name", None) for n in partition.forward.graph.output_node().args[0]]
        by_name = dict(zip(names, outputs))
        del outputs  # the user's outputs leave; the saved values live on in `arguments`
        by_name.update(partition.trace.tangent_values)
        placeholders = [n.name for n in partition.backward.graph.find_nodes(op="placeholder")]
        arguments = [by_name[name] for name in placeholders]
        del by_name
        tracker.external |= _pointers(partition.trace.tangent_values.values())
        tracker.after = []
        with tracker:
            gradients = _boxed(partition.backward)(arguments)
        assert not arguments, "the boxed call hands its arguments over"
        del gradients
    return forward, max(tracker.after)


def _check(extraction: bw.BackwardExtraction) -> None:
    (partition,) = extraction.partitions
    forward, backward = measured_peak(partition)
    peak = extraction.peak
    assert peak.live_bytes == extraction.peak_activation_bytes == pytest.approx(max(forward, backward), rel=0.1)
    timeline = extraction.memory_timeline()
    phases = [s["phase"] for s in timeline]
    assert max(s["live_bytes"] for s in timeline if s["phase"] == "forward") == pytest.approx(forward, rel=0.1)
    assert max(s["live_bytes"] for s in timeline if s["phase"] == "backward") == pytest.approx(backward, rel=0.1)
    assert phases == sorted(phases, key=["forward", "backward"].index), "forward, then backward"
    shown = [n.name for n in partition.backward.graph.nodes if n.op == "call_function"]
    assert [s["node"] for s in timeline if s["phase"] == "backward"] == shown, "the walk's ops are the views' ops"
    assert timeline[peak.step]["node"] == peak.node and timeline[peak.step]["phase"] == peak.phase
    graph = partition.forward if peak.phase == "forward" else partition.backward
    assert peak.node in {n.name for n in graph.graph.nodes}
    by_module = extraction.memory_by_module()
    assert sum(by_module.values()) == extraction.saved_activation_bytes
    assert list(by_module.values()) == sorted(by_module.values(), reverse=True)


@pytest.mark.parametrize("partitioner, budget", PARTITIONS)
@pytest.mark.parametrize("name", ["MLP", "Block", "Transformer"])
def test_timeline_peak_matches_live_storages_on_the_course_models(course_models, name, partitioner, budget):
    _check(course_models[name].rerun(partitioner, budget))


@pytest.mark.parametrize("partitioner, budget", PARTITIONS)
@pytest.mark.parametrize("name", ["MLP", "Block", "Transformer"])
def test_the_timeline_in_cuda_blocks_matches_live_storages_booked_so(course_models, name, partitioner, budget):
    """`torch.cuda.max_memory_allocated` counts the caching allocator's blocks, 512-byte multiples: the course
    models' storages are mostly under 512 bytes, so the booked peak is far above the bytes' one, and the
    timeline in blocks follows the same run counted in blocks."""
    extraction = course_models[name].rerun(partitioner, budget)
    (partition,) = extraction.partitions
    forward, backward = measured_peak(partition, memory.allocator_block)
    timeline = memory.timeline(extraction.partitions, memory.allocator_block)
    assert max(s["live_bytes"] for s in timeline if s["phase"] == "forward") == forward
    assert max(s["live_bytes"] for s in timeline if s["phase"] == "backward") == backward
    assert all(s["live_bytes"] % memory.CUDA_BLOCK_BYTES == 0 for s in timeline)
    plain = [s["live_bytes"] for s in extraction.memory_timeline()]
    assert all(b >= p for b, p in zip((s["live_bytes"] for s in timeline), plain))
    assert [memory.allocator_block(n) for n in (0, 1, 511, 512, 513, 4096)] == [0, 512, 512, 512, 1024, 4096]


@pytest.mark.parametrize("sample", SAMPLES)
def test_timeline_peak_matches_live_storages_on_graphnet_samples(sample):
    _check(bw.extract(bw.load_graphnet_sample(shared_path("graphnet_samples", sample))))


def test_saved_bytes_are_not_peak_memory(course_models):
    """Min-cut at budget 0 saves the least but recomputes the forward at the start of backward."""
    base = course_models["Transformer"]
    peaks = {budget: base.rerun("min_cut", budget).peak_activation_bytes for budget in (0.0, 0.5, 1.0)}
    saved = {budget: base.rerun("min_cut", budget).saved_activation_bytes for budget in (0.0, 0.5, 1.0)}
    assert saved[0.0] < saved[0.5] < saved[1.0]
    assert peaks[0.5] < peaks[0.0] == peaks[1.0]


def test_memory_by_module_names_the_modules(course_models):
    by_module = course_models["Transformer"].memory_by_module()
    assert set(by_module) <= {s.module or "" for s in course_models["Transformer"].saved_tensors}
    assert any(module.startswith("blocks.1.") for module in by_module)
    assert all(b > 0 for b in by_module.values())


def test_fake_mode_has_the_same_timeline_as_real_mode():
    torch.manual_seed(0)
    model, x = MLP(width=16, depth=2), torch.randn(4, 16)
    real, fake = bw.extract(model, x), bw.extract(model, x, mode="fake")
    assert real.memory_timeline() == fake.memory_timeline()
    assert real.peak == fake.peak
