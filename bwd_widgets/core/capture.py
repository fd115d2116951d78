"""Capture forward, backward and joint fx graphs through AOT Autograd, after torch.fx or Dynamo.

No analysis happens here: this module only records what torch hands its compilers.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import weakref
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import torch
import torch.fx

from .aliasing import AliasedOutputs, aliased_inputs, aliasing_outputs, outputs_aliasing_inputs
from .analysis import storage_root
from .compat import (
    FakeTensorMode,
    TracingContext,
    aot_autograd,
    aot_module_simplified,
    detect_fake_mode,
    dynamo_backends,
    dynamo_cache_entries,
    dynamo_convert_frame,
    dynamo_frames,
    graph_text_skipped_unless_logged,
    inductor_compile,
    make_boxed_func,
    mark_boxed,
    pytree,
    storage_id,
    tensor_version,
    tracing,
)
from .decisions import Decisions
from .errors import NotForFx
from .fx_route import fake_values, fx_trace
from .kinds import DEFAULT_BACKEND, Backend, EagerStorage, InputKind, InputSource, RegionStorages, is_tangent
from .naming import TensorNames, data_key, nested_argument, parse_source_name, wrapper_argument
from .outputs import picked_output
from .partitioners import Partitioner
from .trace import Partition, RealValues, Split, Trace, build_partition

if TYPE_CHECKING:
    from .logger_calls import LoggerCalls

_C = TypeVar("_C", bound=Callable[..., Any])


@dataclass(eq=False)
class _Region:
    """What the compilers record about one compiled region while the run goes on; `CaptureSession.build`
    turns each into a Partition once the run is over."""

    trace: Trace
    forward: torch.fx.GraphModule
    backward_with_nones: torch.fx.GraphModule
    decisions: Decisions
    """What torch's partitioner decided in the capture's split (read from torch)."""
    forward_values: list | None = None
    forward_versions: list[int | None] | None = None
    backward_inputs: list | None = None
    tangent_values: dict[str, torch.Tensor] | None = None
    forward_runs: int = 0
    """How often the run called this region's forward: more than once when Dynamo compiled one frame (a
    block's forward past a graph break, say) and the model called it again."""
    made: list[dict[int, tuple[int, int]]] = field(default_factory=list)
    handed_on: list[dict[str, int]] = field(default_factory=list)
    """Per run, what it took in that the forward made, and what it handed on (`kinds.RegionStorages`)."""


_ISOLATED: dict[str, bool] = (
    {"isolate_recompiles": True} if "isolate_recompiles" in inspect.signature(torch.compile).parameters else {}
)
"""Our compile keeps its recompiles apart from the user's own compiles where torch.compile can (2.13 on; torch's
typing overloads omit the argument). An older torch, outside the tested range, compiles without it."""


@dataclass
class CaptureSession:
    """Records each compiled region by one of two routes, and builds its Trace and first Partition.

    `compile_fx` traces an nn.Module with torch.fx and hands it straight to AOT Autograd, as GraphNet's
    own extractor does (no bytecode tracing); `compile_dynamo` goes through Dynamo, which reads any
    Python. Both end in the same compilers, so a region looks the same whichever route captured it.
    """

    partitioner: Partitioner
    keep_real_inputs: bool
    input_names: dict[str, tuple[InputKind, str]] = field(default_factory=dict)
    """Local argument name -> (kind, human name), for GraphNet samples."""
    signature: list[str] = field(default_factory=list)
    regions: list[_Region] = field(default_factory=list)
    rng_state: torch.Tensor | None = None
    """The CPU generator's state before the real forward: replays draw the same random numbers."""
    module: torch.nn.Module | None = None
    """The user's model: parameters and buffers are named as it names them, whatever was compiled (a
    wrapper, a function closing over it). When unset, the module compiled, if it is one."""
    _compiled_module: torch.nn.Module | None = None
    _arguments: dict[object, tuple[str, torch.Tensor]] = field(default_factory=dict)
    """The tensors the compiled callable was last called with (argument name, tensor), by identity and by
    the data they cover (a compiled region hands an input on as a new alias of it)."""
    _inputs: list[InputSource] = field(default_factory=list)
    _current: _Region | None = None
    _mutable: list[tuple[torch.Tensor, torch.Tensor, int]] = field(default_factory=list)
    graph_breaks: Counter[str] = field(default_factory=Counter)
    """The graph-break reasons Dynamo recorded during this capture (its counters, `compat.graph_break_reasons`)."""
    started_from_loss: bool = False
    """The backward started from one scalar, as `loss.backward()` does (`outputs.starts_from_loss`)."""
    recording: bool = True
    """False once `finish` ran: compiled code that outlives the capture (Dynamo's cache) records nothing."""
    _fx_outputs: int | None = None
    """On the torch.fx route, how many outputs the traced graph hands AOT Autograd: the forward compiler
    then checks torch's own aliasing metadata for them (`outputs_aliasing_inputs`)."""
    _aliasing_unknown: bool = False
    _lifted: int = 0
    """On the torch.fx route, how many primals are the module's own parameters and buffers (they come first)."""
    notes: list[str] = field(default_factory=list)
    """What the captured graphs do that the model does not (a copy of an output aliasing an input)."""
    eager_storages: list[EagerStorage] = field(default_factory=list)
    """On Dynamo's route, each storage eager autograd saved outside every compiled region in the forward, with the
    key the regions know it by (`core/eager_saves.py`); empty where none, or not read."""
    torch_compile_settings: dict[str, object] = field(default_factory=dict)
    """The `torch._dynamo.config` settings under which `torch.compile` makes the graphs this capture made, beside
    the user's own: those the capture set for its own trace, and the logger methods it traced past
    (`LoggerCalls.setting`); empty where the user's settings give them already."""
    reads_scalar: bool = False
    """A graph the capture compiled reads a Python number from a tensor (`.item()`, `int(t)`), which Dynamo keeps
    in the graph only under `capture_scalar_outputs` (`extract`'s `capture_scalars`)."""
    held: list[torch.Tensor] | None = None
    """The model's tensors and the call's as the forward runs them (fake ones in fake mode), set before the run
    and dropped after it (`forward_ran`): a region's input sharing none of their storages is one the forward made
    (`RegionStorages.made`). None: no run being noted."""
    _held_storages: set[int] | None = None
    """The storages of `held`, by identity, read at the forward's first region run."""
    _copies: dict[int, tuple[torch.UntypedStorage, torch.UntypedStorage]] = field(default_factory=dict)
    """This forward's output copies (`_copy_outputs`) by their storage's identity -> (the storage of the input the
    output is a view of in torch.compile's run, the copy's storage, held so that its identity stays unique)."""
    _storage_keys: dict[int, tuple[int, torch.UntypedStorage]] = field(default_factory=dict)
    """Each storage a region's run took in or handed on, by identity -> its key, with the storage held until the
    forward is over (`forward_ran`) so that no later storage of the forward takes its identity."""
    backend: Backend = DEFAULT_BACKEND
    """Whose partition each region shows: on "inductor", Inductor's own compile runs (`compat.inductor_compile`) and
    the compilers below record the joint graph its passes made and the graphs its split gave."""

    def compilers(self) -> tuple[Callable, Callable, Callable]:
        """The fw/bw compilers and partition_fn that record what AOT Autograd hands them.

        They hold the session weakly: compiled code Dynamo keeps (on code the user compiled too) must not
        keep a capture's graphs and real values alive.
        """
        partition = weakref.WeakMethod(self._partition)
        forward, backward = weakref.WeakMethod(self._compiled_forward), weakref.WeakMethod(self._compiled_backward)

        def partition_fn(
            joint: torch.fx.GraphModule, joint_inputs: list, *, num_fwd_outputs: int, **kwargs: Any
        ) -> tuple:
            return _alive(partition)(joint, joint_inputs, dict(kwargs, num_fwd_outputs=num_fwd_outputs))

        def fw_compiler(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
            return _alive(forward)(gm)

        def bw_compiler(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
            return _alive(backward)(gm)

        return fw_compiler, bw_compiler, partition_fn

    def build(self, notes: list[str], backward_ran: bool) -> list[Partition]:
        """The capture's partitions, each built once; `notes` go to the first region's trace."""
        partitions = []
        for region in self.regions:
            real = None
            if region.forward_values is not None and region.forward_versions is not None:
                tangents = region.tangent_values if backward_ran else None
                real = RealValues(region.forward_values, region.forward_versions, self.rng_state, tangents)
            storages = RegionStorages(tuple(region.made), tuple(region.handed_on)) if region.made else RegionStorages()
            region.trace.record(real, notes if region is self.regions[0] else [], storages)
            backward_inputs = region.backward_inputs if backward_ran else None
            partitions.append(
                build_partition(
                    region.trace,
                    self.partitioner,
                    Split(region.forward, region.backward_with_nones, region.decisions),
                    backward_inputs,
                )
            )
        return partitions

    def _partition(self, joint: torch.fx.GraphModule, joint_inputs: list, partition_kwargs: dict) -> tuple:
        if self._fx_outputs is not None:
            partition_kwargs = dict(partition_kwargs, static_lifetime_input_indices=self._static_inputs())
        trace = Trace(
            index=len(self.regions),
            joint=joint,
            joint_inputs=joint_inputs,
            partition_kwargs=partition_kwargs,
            inputs=self._inputs,
            backend=self.backend,
        )
        split = trace.split(self.partitioner)
        self._current = _Region(trace, *split)
        self.regions.append(self._current)
        return split.forward, split.backward_with_nones

    def _static_inputs(self) -> list[int]:
        """The primals torch.compile tells the partitioner live as long as the model (parameters and buffers):
        Dynamo marks every one it lifts static, where AOT Autograd straight on a torch.fx graph marks none
        (`aot_autograd`'s frontend_utils). min-cut weighs saving a value derived from one by that (a weight's
        transpose is cheap to keep alive by recomputing it), so the torch.fx route tells it as Dynamo does: the
        partition is then torch.compile's at every budget. Tensors the model takes as arguments are not static
        for torch.compile, whatever they stand for (a GraphNet sample's weights)."""
        return list(range(self._lifted))

    def _compiled_forward(self, gm: torch.fx.GraphModule) -> Callable:
        region = self._current
        if region is None:  # an inference graph: nothing needs a gradient here
            boxed: Callable = make_boxed_func(gm.forward)
            return boxed
        if self._fx_outputs is not None:
            aliased = outputs_aliasing_inputs(self._fx_outputs)
            self._aliasing_unknown = aliased is None
            if aliased:
                raise AliasedOutputs(aliased)
        region.forward = gm  # the graph AOT Autograd runs, after its own rewrites of the split
        return self._recorded(gm, CaptureSession._keep_forward_inputs, region, counted=True)

    def _compiled_backward(self, gm: torch.fx.GraphModule) -> Callable:
        region = self._current
        if region is None:
            raise RuntimeError("AOT Autograd compiled a backward graph before its forward")
        region.backward_with_nones = gm
        return self._recorded(gm, CaptureSession._keep_backward_inputs, region)

    def compile_dynamo(self, model: Callable) -> Callable:
        region = weakref.WeakMethod(self._dynamo_region)  # Dynamo keeps its backend with code the user compiled too
        remember = weakref.WeakMethod(self._remember_arguments)

        def backend(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
            return _alive(region)(gm, example_inputs)

        owner = getattr(model, "__self__", model)  # a module, or a method bound to one
        self._compiled_module = owner if isinstance(owner, torch.nn.Module) else None
        compiled = torch.compile(model, backend=backend, dynamic=False, **_ISOLATED)  # type: ignore[call-overload]

        def run(*args: Any, **kwargs: Any) -> Any:
            method = remember()
            if method is not None:
                method(args, kwargs)
            return compiled(*args, **kwargs)

        return run

    def _remember_arguments(self, args: tuple, kwargs: dict) -> None:
        """Name the call's tensors as the extraction does (by the signature, `input_i` past its end, keywords
        by their own name): a graph input that is one of them is that argument, whichever frame Dynamo
        compiled (after a graph break, a nested frame's `L['args'][0]` is something else)."""
        named = [(self.signature[i] if i < len(self.signature) else f"input_{i}", v) for i, v in enumerate(args)]
        named += list(kwargs.items())
        tensors = [(n, v) for n, v in reversed(named) if isinstance(v, torch.Tensor)]
        self._arguments = {id(v): (n, v) for n, v in tensors}
        self._arguments.update((key, (n, v)) for n, v in tensors if (key := data_key(v)) is not None)

    def _dynamo_region(self, gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        self.reads_scalar |= _reads_scalar(gm)
        order = _signature_order(gm, self.signature)
        if order is not None:
            # Dynamo calls the compiled graph in its placeholders' final order.
            _reorder_placeholders(gm, order)
            example_inputs = [example_inputs[i] for i in order]
        self._inputs = self._dynamo_sources(gm, example_inputs)
        self._current = None
        values = {n: n.meta.get("example_value") for n in gm.graph.nodes}
        aliased = aliasing_outputs(gm, values)
        sources = aliased_inputs(gm, values, aliased)
        self._copy_outputs(gm, aliased)
        fw_compiler, bw_compiler, partition_fn = self.compilers()
        regions_before = len(self.regions)
        with graph_text_skipped_unless_logged():
            if self.backend == "inductor":

                def compile_graph(graph: torch.fx.GraphModule, inputs: list, is_backward: bool) -> Callable:
                    compiled: Callable = (bw_compiler if is_backward else fw_compiler)(graph, inputs)
                    return compiled

                region = inductor_compile(gm, example_inputs, compile_graph, partition_fn)
            else:
                region = aot_autograd(fw_compiler=fw_compiler, bw_compiler=bw_compiler, partition_fn=partition_fn)(
                    gm, example_inputs
                )
        made_one = len(self.regions) > regions_before  # none where nothing needs a gradient (an inference graph)
        return self._noting_copies(region, sources) if sources and made_one else region

    def _noting_copies(self, compiled: Callable, sources: dict[int, int]) -> Callable:
        """`compiled`, the region just made, noting for each output copy `_copy_outputs` made (`sources`: output ->
        input position) the input it is a view of in torch.compile's run (`canonical`), while the forward's
        storages are noted. Dynamo calls a backend's result with the graph's inputs as arguments (whatever
        `_boxed_call` AOT Autograd's wrapper copied from the function it wraps)."""
        session, target = weakref.ref(self), weakref.ref(self.regions[-1])

        def run(*args: Any) -> Any:
            outputs = compiled(*args)
            owner, region = session(), target()
            if owner is not None and region is not None and owner.held is not None:
                owner._note_copies(region, {i: args[j] for i, j in sources.items()}, outputs)  # noqa: SLF001
            return outputs

        return run

    def _note_copies(self, region: _Region, sources: dict[int, object], outputs: object) -> None:
        """Each output copy of this run stands for the storage of the input it copies (`sources`: output index ->
        that input), as torch.compile's view does: later regions' inputs and eager autograd's saves of it resolve
        there (`canonical`), and the region's record of what it handed on names that storage."""
        if not isinstance(outputs, (tuple, list)):
            return
        for i, source in sources.items():
            copy, original = _storage_of(outputs[i]), _storage_of(source)
            if copy is None or original is None:
                continue
            self._copies[storage_id(copy)] = (original, copy)
            copied = self._storage_keys.get(storage_id(copy))
            if copied is not None and region.handed_on:
                kept = self._storage_key(original)
                handed_on = region.handed_on[-1]
                handed_on.update({name: kept for name, key in handed_on.items() if key == copied[0]})

    def canonical(self, storage: torch.UntypedStorage) -> torch.UntypedStorage:
        """The storage a `torch.compile` run has where this capture has `storage`: the input's, for an output copy
        `_copy_outputs` made (`_note_copies`); else `storage` itself."""
        copied = self._copies.get(storage_id(storage))
        return storage if copied is None else copied[0]

    def compile_fx(self, module: torch.nn.Module, inputs: list, logger_calls: LoggerCalls) -> Callable:
        """Trace with torch.fx (module paths and source lines kept), then AOT Autograd; raises NotForFx.

        The compiled call returns what `outputs.picked_output` does on the Dynamo route: the part of the
        output the backward starts from (the loss when the output holds one), its keys, and whether the
        loss was picked by default; the choice is made on the traced graph's output, before AOT Autograd."""
        self._compiled_module = module
        gm = fx_trace(module, logger_calls)
        self.reads_scalar = _reads_scalar(gm)
        self._inputs = self._fx_sources(gm)
        self._current = None
        output = gm.graph.output_node()
        picked, keys, by_default = picked_output(output.args[0], None)
        leaves, spec = pytree.tree_flatten(picked)
        traced = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.fx.Node)]
        output.args = (tuple(leaves[i] for i in traced),)  # AOT Autograd wants a flat tuple out
        gm.recompile()
        compiled = self._aot_fx(gm, inputs)

        def run(*args: Any) -> tuple[Any, tuple[str, ...], bool]:
            values = list(leaves)
            for i, value in zip(traced, compiled(*args)):
                values[i] = value
            return pytree.tree_unflatten(values, spec), keys, by_default

        return run

    def _aot_fx(self, gm: torch.fx.GraphModule, inputs: list) -> Callable:
        """AOT Autograd on the torch.fx route's graph, traced again in the rare case an output aliases an
        input (`_copy_outputs`). Which outputs do is AOT Autograd's own finding, handed to the forward
        compiler as it is to Inductor, so no extra run of the forward is needed to know it; a torch that does
        not hand it over gets the check from a fake run of the graph."""
        fw_compiler, bw_compiler, partition_fn = self.compilers()
        fake_mode = detect_fake_mode(inputs) or FakeTensorMode()  # the mode AOT Autograd would make itself
        output = gm.graph.output_node().args[0]
        assert isinstance(output, (tuple, list))  # compile_fx hands AOT Autograd a flat tuple

        def compiled() -> Callable:
            self._fx_outputs, self._aliasing_unknown = len(output), False
            try:
                with tracing(TracingContext(fake_mode)), graph_text_skipped_unless_logged():
                    return aot_module_simplified(
                        gm, inputs, fw_compiler=fw_compiler, bw_compiler=bw_compiler, partition_fn=partition_fn
                    )
            finally:
                self._fx_outputs = None

        try:
            run = compiled()
            aliased = aliasing_outputs(gm, fake_values(gm, inputs)) if self._aliasing_unknown else []
        except AliasedOutputs as found:
            aliased = found.indices
        if not aliased:
            return run
        self.regions.pop()  # the region traced with the aliasing outputs, forgotten
        self._current = None
        self._copy_outputs(gm, aliased)
        return compiled()

    def _copy_outputs(self, gm: torch.fx.GraphModule, indices: list[int]) -> None:
        """AOT Autograd regenerates an output that is a view of an input outside its graphs, so its gradient
        reached the input through eager autograd, never through the backward graph: return a copy of each
        output at `indices` instead. Graphs without such an output are left as they are."""
        if not indices:
            return
        output = gm.graph.output_node()
        leaves = list(output.args[0])  # type: ignore[arg-type]  # both routes hand AOT Autograd a flat tuple
        for i in indices:
            leaf = leaves[i]
            with gm.graph.inserting_before(output):
                leaves[i] = gm.graph.call_method("clone", (leaf,))
            leaves[i].meta = dict(leaf.meta)
        output.args = (tuple(leaves),)
        gm.recompile()
        self.notes.append(
            f"the forward graph returns a copy of each output that is a view of an input ({len(indices)}), so "
            "their gradients flow through the backward graph, not around it."
        )

    @property
    def repeated_region(self) -> bool:
        """A compiled region whose forward the run called more than once (see `_Region.forward_runs`)."""
        return any(region.forward_runs > 1 for region in self.regions)

    def finish(self) -> None:
        """Stop recording: compiled callables that outlive the capture (Dynamo's cache) keep nothing alive."""
        if self.recording:
            for index, region in enumerate(self.regions):
                if region.forward_runs > 1:
                    self.notes.append(
                        f"compiled region {index} ran {region.forward_runs} times in one forward (Dynamo compiled "
                        "one frame, such as a block's forward past a graph break or inside checkpoint_sequential, "
                        "and the model called it again): its graphs are one of those runs; the extraction's saved "
                        "bytes count every run, its memory timeline and FLOPs one."
                    )
        self.recording = False
        self._current = None
        self._arguments = {}
        self.forward_ran()

    def keep_unchanged(self, tensors: list[torch.Tensor]) -> None:
        """Copies of what the real run may change in place, taken before it: `restore_mutated` puts them back
        whatever happens, a hook raising after batch norm ran eagerly included."""
        self._mutable.extend((t, t.detach().clone(), tensor_version(t)) for t in tensors)

    def restore_mutated(self) -> None:
        """Put back buffers and inputs the real run changed in place (batch-norm statistics...); the earliest
        copy of a tensor is put back last, so it wins. Values are compared too: AOT Autograd writes some
        mutations back without bumping the version counter."""
        with torch.no_grad():
            for tensor, before, version in reversed(self._mutable):
                if tensor_version(tensor) != version or not torch.equal(tensor, before):
                    tensor.copy_(before)
        self._mutable.clear()

    def _recorded(self, gm: torch.fx.GraphModule, keep: Callable, region: _Region, counted: bool = False) -> Callable:
        """Torch's boxed calling convention around gm, keeping its real inputs while recording."""
        session = weakref.ref(self)
        target = weakref.ref(region)

        def run(args: list) -> Any:
            owner, current = session(), target()
            if owner is None or current is None or not owner.recording:
                return gm(*args)
            if counted:
                current.forward_runs += 1
            if owner.keep_real_inputs:
                keep(owner, args, current)
            outputs = gm(*args)
            if counted and owner.held is not None:
                owner._note_storages(current, gm, args, outputs)  # noqa: SLF001 - the session's own record
            return outputs

        return mark_boxed(run)

    def _note_storages(self, region: _Region, gm: torch.fx.GraphModule, args: list, outputs: object) -> None:
        """One run of a region: which of its primals the forward made (no storage of `held`), and the storage of
        each value its forward graph `gm` returned, by the name of the value's storage root there."""
        assert self.held is not None
        if self._held_storages is None:
            self._held_storages = {storage_id(storage) for t in self.held if (storage := _storage_of(t)) is not None}
        held = self._held_storages
        made: dict[int, tuple[int, int]] = {}
        for index, value in enumerate(args[: len(region.trace.inputs)]):
            storage = _storage_of(value)
            storage = None if storage is None else self.canonical(storage)
            if storage is not None and storage_id(storage) not in held:
                made[index] = (self._storage_key(storage), int(storage.nbytes()))
        handed_on: dict[str, int] = {}
        returned = gm.graph.output_node().args[0]
        if isinstance(returned, (tuple, list)) and isinstance(outputs, (tuple, list)):
            for node, value in zip(returned, outputs):
                storage = _storage_of(value)
                if isinstance(node, torch.fx.Node) and storage is not None:
                    handed_on.setdefault(storage_root(node).name, self._storage_key(storage))
        region.made.append(made)
        region.handed_on.append(handed_on)

    def forward_ran(self) -> None:
        """The capture's forward is over: no more runs to note, and the storages noted are let go before backward."""
        self.held = self._held_storages = None
        self._storage_keys, self._copies = {}, {}

    def noted_key(self, storage: torch.UntypedStorage) -> int | None:
        """The key of a storage a region's run took in or handed on in this forward (`RegionStorages`), `canonical`
        first; None for any other. Only while the forward's storages are held (before `forward_ran`)."""
        noted = self._storage_keys.get(storage_id(self.canonical(storage)))
        return None if noted is None else noted[0]

    def _storage_key(self, storage: torch.UntypedStorage) -> int:
        identity = storage_id(storage)
        if identity not in self._storage_keys:
            self._storage_keys[identity] = (len(self._storage_keys), storage)
        return self._storage_keys[identity][0]

    def _keep_forward_inputs(self, args: list, region: _Region) -> None:
        """Parameters and inputs requiring grad are kept by reference (autograd forbids changing them in
        place during the run; their version counters show any change after); anything else is copied,
        since the forward may change it in place (running statistics)."""
        values: list = []
        versions: list[int | None] = []
        for value in args:
            if isinstance(value, torch.Tensor):
                if value.requires_grad and value.is_leaf:
                    versions.append(tensor_version(value))
                else:  # our own copy, which nothing else changes: no version to compare later
                    versions.append(None)
                    copy = value.detach().clone()
                    self._mutable.append((value, copy, tensor_version(value)))
                    value = copy
            else:
                versions.append(None)
            values.append(value)
        region.forward_values, region.forward_versions = values, versions

    def _keep_backward_inputs(self, args: list, region: _Region) -> None:
        """By reference: autograd lets go of its saved values after backward; these are the same tensors."""
        region.backward_inputs = list(args)
        names = [n.name for n in region.backward_with_nones.graph.find_nodes(op="placeholder")]
        region.tangent_values = {name: value for name, value in zip(names, args) if is_tangent(name)}

    def _tensor_names(self) -> TensorNames:
        """The user's model's tensors by identity, as they are now (fake ones inside fake mode)."""
        return TensorNames(self.module if self.module is not None else self._compiled_module)

    def _fx_sources(self, gm: torch.fx.GraphModule) -> list[InputSource]:
        """AOT Autograd's primals for a torch.fx graph: its parameters, its buffers, then the arguments."""
        names = self._tensor_names()
        tensors: list[tuple[InputKind, str, torch.Tensor]] = [
            ("parameter", n, t) for n, t in gm.named_parameters(remove_duplicate=False)
        ]
        tensors += [("buffer", n, t) for n, t in gm.named_buffers(remove_duplicate=False)]
        if len({id(t) for _, _, t in tensors}) < len(tensors):  # each would get a partial gradient
            raise NotForFx("a tensor reached by two names that torch.fx's graph keeps apart")
        sources = [_named(names, tensor) or InputSource(kind, n, n) for kind, n, tensor in tensors]
        self._lifted = len(sources)
        # the signature's names, not the placeholders': torch.fx renames `input` to `input_1`
        return sources + [InputSource(*self.input_names.get(n, ("input", n)), n) for n in self.signature]

    def _dynamo_sources(self, gm: torch.fx.GraphModule, example_inputs: list) -> list[InputSource]:
        names = self._tensor_names()
        placeholders = list(gm.graph.find_nodes(op="placeholder"))
        if len(example_inputs) != len(placeholders):
            example_inputs = [None] * len(placeholders)
        return [
            _named(names, value) or self._argument(value) or self._dynamo_source(node)
            for node, value in zip(placeholders, example_inputs)
        ]

    def _argument(self, value: object) -> InputSource | None:
        if not isinstance(value, torch.Tensor):
            return None
        entry = self._arguments.get(id(value))
        if entry is None or entry[1] is not value:
            key = data_key(value)
            entry = self._arguments.get(key) if key is not None else None
        if entry is None:
            return None
        kind, name = self.input_names.get(entry[0], ("input", entry[0]))
        return InputSource(kind, name, entry[0])

    def _dynamo_source(self, node: torch.fx.Node) -> InputSource:
        """A graph input that is no tensor of the model, named from Dynamo's source expression."""
        source = getattr(node.meta.get("grapharg"), "source", None)
        if source is None:
            return InputSource("input", node.name, node.name)
        kind, name = parse_source_name(source.name)
        local = getattr(source, "local_name", None)
        if self._arguments:  # the call's own tensors are named by identity: this is a nested frame's value
            argument = nested_argument(source.name)
        else:
            argument = wrapper_argument(source.name, self.signature)
        if argument is not None:  # forward(*args, **kwargs), or a function wrapping the model so
            local = name = argument
        key = name if local is None else local
        if local is not None and local in self.input_names:
            kind, name = self.input_names[local]
        return InputSource(kind, name, key)


_SCALAR_READS = frozenset({"item"})
"""The tensor methods in a graph that hand Python a number (`int(t)` and `float(t)` are recorded as `item`; Dynamo
breaks the graph at `tolist` under either setting)."""


def _reads_scalar(gm: torch.fx.GraphModule) -> bool:
    """Whether Dynamo's or torch.fx's graph reads a Python number from a tensor (`_SCALAR_READS`)."""
    return any(node.op == "call_method" and node.target in _SCALAR_READS for node in gm.graph.nodes)


def _storage_of(value: object) -> torch.UntypedStorage | None:
    """A tensor's storage (a fake one's too); None for no tensor, no elements, or no plain storage (sparse)."""
    if not isinstance(value, torch.Tensor) or not value.numel():
        return None
    try:
        return value.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return None


def _named(names: TensorNames, value: object) -> InputSource | None:
    known = names.lookup(value)
    if known is None:
        return None
    kind, name, aliases = known
    return InputSource(kind, name, name, aliases)


def _alive(method: weakref.WeakMethod[_C]) -> _C:
    bound = method()
    if bound is None:
        raise RuntimeError("a capture's compiler was called after the capture ended")
    return bound


@contextlib.contextmanager
def own_dynamo_entries() -> Iterator[None]:
    """Dynamo keeps compiled code on the code objects it traced, and every backend in a global table.
    Afterwards, drop the entries this capture added to code nobody had compiled before, and its backend
    (which holds the session, its graphs and real values), and never reset the session: the user's own
    compiled models must not recompile."""
    eval_frame, convert_frame, cached_backends = dynamo_frames, dynamo_convert_frame, dynamo_backends

    def counts() -> dict:
        live = (weak() for weak in convert_frame.input_codes.seen)
        return {code: dynamo_cache_entries(code) for code in live if code is not None}

    before, backends_before = counts(), set(cached_backends)
    try:
        yield
    finally:
        for code, count in counts().items():
            if count and not before.get(code):
                eval_frame.reset_code(code)
        for key in set(cached_backends) - backends_before:
            del cached_backends[key]


def _signature_order(gm: torch.fx.GraphModule, signature: list[str]) -> list[int] | None:
    """Dynamo orders graph inputs by first use; GraphNet (and users) expect argument order.

    Only when every graph input is a plain argument of forward is the order restored.
    """
    if not signature:
        return None
    positions = []
    for node in gm.graph.find_nodes(op="placeholder"):
        source = getattr(node.meta.get("grapharg"), "source", None)
        local = getattr(source, "local_name", None)
        if local is None or local not in signature or type(source).__name__ != "LocalSource":
            return None
        positions.append(signature.index(local))
    order = sorted(range(len(positions)), key=positions.__getitem__)
    return None if order == list(range(len(order))) else order


def _reorder_placeholders(gm: torch.fx.GraphModule, order: list[int]) -> None:
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    anchor = next(n for n in gm.graph.nodes if n.op != "placeholder")
    for i in order:
        anchor.prepend(placeholders[i])
    gm.recompile()


_TORCH_FAILURE_LOGS = ("torch._subclasses.fake_tensor", "torch._higher_order_ops.wrap")
"""Loggers quiet while a capture runs: the one torch writes a failing op's whole traceback to (a shape mismatch:
18 lines on stderr) before raising it, the failure itself reaching the user as one sentence; and the one that
warns a torch.compile user that a `context_fn` checkpointed region must hold no in-place op, which every
selective checkpoint plan of the advisor set off (issue 43, item 8): a capture explains, it compiles nothing
the user runs."""


@contextlib.contextmanager
def torch_failure_logs_quiet() -> Iterator[None]:
    """`_TORCH_FAILURE_LOGS` quiet for the block: around every compile a capture runs (its routes, and the trace
    cache's guard capture, which meets the same failing op first)."""
    loggers = [logging.getLogger(name) for name in _TORCH_FAILURE_LOGS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
