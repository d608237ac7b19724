"""Capturing one FX graph, at one set of input layouts and symbolic values, for replay.

Contract: ``Replay(fn, args, tensor_positions)`` traces ``fn`` (an FX graph module, or
any function of tensors that returns tensors) once through lazax
tensors that stand in for its tensor arguments (shadows over the same device data: the
caller's tensors are never touched, even if the trace fails), collects the IR of the
outputs and of the arguments the graph writes in place, lowers and compiles it (the
cache is warmed; nothing executes). ``Replay.run(args)`` runs the graph on new
arguments of the same layouts with no interpretation, no aten dispatch and no
hashing (the only IR built is a view node for each output that is a strided view):
gather the input buffers, execute the cached executable by hash (lowering it again if it
was evicted), wrap the outputs, write the mutated arguments back. The first and the last
two phases are timed as ``RunCachedGraphInputData`` and ``RunCachedGraphOutputData``
(torch_xla's names for its cached-graph runner's), one sample per run of a program.
It compiles and runs through the barrier's compile and execute stages, so metrics,
out-of-memory errors and device-side checks are the barrier's. A mutated argument
whose buffer nothing else holds (no other tensor's IR, no second storage) is donated:
the executable writes the new value over it, as lazy mode's sync does; an executable is
kept per donation pattern. A program's device-side checks (a bad index) are queued
like lazy mode's and raise at the next sync or read; the replay's results stay.

A graph is replayable only if tracing it runs nothing: a CPU fallback, a read to the
host or a data-dependent shape would bake a value of this call into every later one.
Any of those raises ``CaptureBroken`` (naming what happened) before it runs, as do what
a replay cannot express: a CPU input with dimensions or written in place, a CPU output,
a view that reinterprets its storage's dtype. The dynamo bridge then interprets that
signature on every call instead. The trace leaves the device RNG as it found it: the replay draws
the call's seeds itself, in the order the ops took them.
"""

from __future__ import annotations

from collections import Counter
from time import perf_counter

import numpy as np
import torch

from lazax import ir

from .. import metrics
from ..barrier.agreement import describe
from ..barrier.checks import CHECKS
from ..barrier.execute import execute
from ..barrier.executor import EXECUTOR
from ..barrier.keys import GraphFacts
from ..barrier.lower import lower
from ..barrier.placement import kept_layouts, place_arguments, placement
from ..barrier.placement import signature as sharding_signature
from ..ops import checked_ops
from ..ops.manual import MANUAL
from ..profiling import span
from ..state.layout import Layout
from ..state.rng import RNG
from ..state.storage import Storage
from ..tensor.device import device
from ..tensor.lazy import LazyTensor, rebind
from ..tensor.transfer import from_cpu

__all__ = ["CaptureBroken", "Replay", "signature", "sync_inputs"]


class CaptureBroken(Exception):
    """Tracing the FX graph would have executed something; it cannot be replayed."""


def signature(args, tensor_positions, sym_positions) -> tuple:
    """What a replay is specialised on: the symbolic values, each tensor argument's
    layout, and which tensor arguments share a storage (None: no two do)."""
    symbols = tuple([args[i] for i in sym_positions])
    tensors = [args[i] for i in tensor_positions]
    try:
        layouts = tuple([t._lz_key for t in tensors])
        storages = [id(t._lz_storage) for t in tensors]
    except AttributeError:  # a host tensor (a lifted constant), uploaded on each call
        layouts = tuple(
            [
                t._lz_key if type(t) is LazyTensor else (tuple(t.shape), t.dtype, "host")
                for t in tensors
            ]
        )
        storages = [id(t._lz_storage) if type(t) is LazyTensor else id(t) for t in tensors]
    sharing = None
    if len(set(storages)) != len(storages):
        first: dict[int, int] = {}
        sharing = tuple([first.setdefault(s, k) for k, s in enumerate(storages)])
    # Input shardings, on every call (torch_xla stops looking after a few calls and then
    # runs a stale executable): None until anything was sharded.
    return symbols, layouts, sharing, sharding_signature(tensors)


def _reinterprets(t: LazyTensor) -> bool:
    """A view whose dtype is not its storage's (``.real``, ``view_as_real``): its
    layout is in other units than the storage's, which a replay cannot re-read."""
    return t._lz_view is not None and t._lz_value.spec.dtype != t._lz_storage.spec.dtype


def _trace(fn, args, tensor_positions):
    """Run ``fn`` on shadows of ``args``; returns the outputs, the shadow storages with
    the first argument on each and its device-data leaf before the trace, the uploaded
    0-dim host inputs as (argument index, leaf), and the seeds the trace took in order.
    The device RNG is left where it was: the replay draws this call's seeds itself."""
    shadows = list(args)
    storages: dict[int, tuple] = {}  # id(real storage) -> (shadow, first arg, leaf)
    host: list[tuple[int, object, LazyTensor]] = []
    for i in tensor_positions:
        a = args[i]
        if type(a) is not LazyTensor:
            if a.dim() != 0:
                raise CaptureBroken(f"input {i} is a {a.device} tensor with dimensions")
            shadows[i] = a.to(device())
            host.append((i, shadows[i]._lz_storage.value, shadows[i]))
            continue
        if _reinterprets(a):
            raise CaptureBroken(f"input {i} is a view with another dtype than its storage")
        real = a._lz_storage
        known = storages.get(id(real))
        if known is None:
            data = real.value.node.data
            leaf = ir.device_data(real.spec, data)
            known = storages[id(real)] = (Storage(leaf, real.device_index), i, leaf)
        shadows[i] = rebind(known[0], Layout(*a._lz_key))

    def refuse(what: str) -> None:
        raise CaptureBroken(what)

    seeds: list = []
    saved = (RNG.recorder, RNG.counter)
    RNG.recorder = seeds
    try:
        with EXECUTOR.mode(eager=False, capture_guard=refuse), torch.no_grad():
            outputs = fn(*shadows)
    finally:
        RNG.recorder, RNG.counter = saved
    for i, leaf, shadow in host:
        if shadow._lz_storage.value is not leaf:
            raise CaptureBroken(f"the graph writes to input {i}, a {args[i].device} tensor")
    return outputs, list(storages.values()), [(i, leaf) for i, leaf, _ in host], seeds


class Replay:
    """One compiled specialisation of an FX graph, run by hash."""

    def __init__(self, fn, args, tensor_positions, name: str | None = None) -> None:
        self.name = name
        outputs, shadows, host, seeds = _trace(fn, args, tensor_positions)
        self.device_index = shadows[0][0].device_index if shadows else 0
        initial = {id(leaf): i for _, i, leaf in shadows}
        shadow_arg = {id(s): i for s, i, _ in shadows}
        new_storages: dict[int, int] = {}  # id(storage) -> root index
        roots: list = []
        recipes = []
        single = not isinstance(outputs, (tuple, list))
        for out in [outputs] if single else outputs:
            if type(out) is LazyTensor:
                if _reinterprets(out):
                    raise CaptureBroken("an output is a view with another dtype than its storage")
                storage = out._lz_storage
                layout = Layout(*out._lz_key)
                arg = shadow_arg.get(id(storage))
                if arg is not None:
                    recipes.append(("input", arg, layout))
                    continue
                index = new_storages.get(id(storage))
                if index is None:
                    index = new_storages[id(storage)] = len(roots)
                    roots.append(storage.value)
                recipes.append(("new", index, layout))
            elif isinstance(out, torch.Tensor):
                # Computed on the host during the trace: it may depend on the inputs.
                raise CaptureBroken(f"an output is a {out.device} tensor")
            else:
                recipes.append(("const", out, None))
        self.new_count = len(roots)
        self.mutated: list[int] = []
        shadows_leaf = {arg: leaf for _, arg, leaf in shadows}
        for shadow, arg, leaf in shadows:
            if shadow.value is not leaf:
                roots.append(shadow.value)
                self.mutated.append(arg)
        self.recipes = recipes
        self.single = single
        # Outputs over one new storage (``a = x.float(); return a, a.t()``) must come
        # out as torch views of one base: AOTAutograd leaves aliasing among outputs to
        # the backend, and dynamo learns that later graphs' inputs alias only from
        # ``_base``. Without it a write to one would not reach the other.
        made_per_root = Counter(ref for kind, ref, _ in recipes if kind == "new")
        self.aliased_roots = {ref for ref, n in made_per_root.items() if n > 1}
        self.root_specs = [r.spec for r in roots]
        compiler = EXECUTOR.compiler
        salt = compiler.device_salt_hash
        if self.device_index:  # compiled for the device its inputs live on (lazax:N)
            salt = hash((salt, self.device_index))
        graph = ir.collect(roots, salt=salt)
        self.hash = graph.hash
        # What explains (and dumps) each compile of this replay, without its IR's nodes.
        self.facts = GraphFacts(graph, text=compiler.dumps.directory is not None)
        # Where each op with device-side checks was traced, by its place in the walk
        # (what a failed check names; the compiled program says which ones check).
        checked = checked_ops()
        self.sites = {k: (n.op, n.data) for k, n in enumerate(graph.reached) if n.op in checked}
        # SPMD: the input shardings this replay is compiled for (part of its key).
        self.placement = placement(graph, compiler.runtime)
        # What a job's processes compare before compiling a cross-process program
        # (text only: a replay keeps no IR).
        self.lines = None
        if self.placement is not None and compiler.runtime.process_count > 1:
            self.lines = describe(graph)
        seed_order = {id(s): k for k, s in enumerate(seeds)}
        host_nodes = {id(leaf): i for i, leaf in host}
        self.template: list = []
        self.storage_slots: list[tuple[int, int]] = []
        self.host_slots: list[tuple[int, int]] = []
        self.seed_slots: list[int] = []
        for slot, p in enumerate(graph.parameters):
            self.template.append(p.data)
            if id(p) in initial:
                self.storage_slots.append((slot, initial[id(p)]))
            elif id(p) in host_nodes:
                self.host_slots.append((slot, host_nodes[id(p)]))
            elif id(p) in seed_order:
                self.seed_slots.append(slot)
        # Seeds drawn in the order the ops took them, as lazy mode draws them.
        self.seed_slots.sort(key=lambda slot: seed_order[id(graph.parameters[slot])])
        # Keep only constants: a replay must not keep the first call's inputs alive.
        for slot, _ in self.storage_slots + self.host_slots:
            self.template[slot] = None
        mutated = set(self.mutated)
        self.mutated_slots = [(slot, i) for slot, i in self.storage_slots if i in mutated]
        # What an eviction needs to compile again: the lowered function, never the IR
        # (which holds the first call's buffers).
        # A written input held padded (split unevenly) comes back padded, as it went in.
        written = {self.new_count + j: id(shadows_leaf[arg]) for j, arg in enumerate(self.mutated)}
        layouts = kept_layouts(graph, written)
        self.lowered = lower(graph, self._output_order(), layouts) if roots else None
        # The donation patterns this replay compiled (the first call compiles its own:
        # which mutated inputs it may donate is known only from that call's arguments).
        self.compiled: set[tuple] = set()

    def _output_order(self) -> list[int] | None:
        """The written inputs' new values first, in the order of their slots, then the
        new outputs: jax gives the k-th donated input of a shape and dtype the k-th
        output of that shape and dtype, so with every written input donated, each
        buffer takes its own tensor's new value (see ``donation.output_order``); paired
        with another output, XLA would copy the input first."""
        if not self.mutated_slots:
            return None
        slot_of = {i: slot for slot, i in self.mutated_slots}
        # (A written input whose old value the graph does not read is no input.)
        read = [k for k, arg in enumerate(self.mutated, self.new_count) if arg in slot_of]
        read.sort(key=lambda k: slot_of[self.mutated[k - self.new_count]])
        first = set(read)
        return read + [k for k in range(len(self.root_specs)) if k not in first]

    def _key(self, donate: tuple = ()):
        shardings = None if self.placement is None else self.placement[0]
        return EXECUTOR.compiler.keys.memory_key(self.hash, shardings, donate)

    def _compile(self, key, donate: tuple = ()):
        # Compiled before and gone: evicted from the LRU, lowered again (never an
        # error; torch_xla stops here).
        evicted = donate in self.compiled
        metrics.bump("DynamoRecompileAfterEviction" if evicted else "UncachedCompile")
        runtime = EXECUTOR.compiler.runtime
        entry = EXECUTOR.compiler.compile(
            key,
            lambda: self.lowered,
            arg_shardings=None if self.placement is None else self.placement[1],
            donate=donate,
            lines=self.lines,
            name=EXECUTOR.graph_name or self.name,
            site=(EXECUTOR.graph_name, EXECUTOR.compile_site()[1]),
            facts=self.facts,
            shardings=None if self.placement is None else self.placement[0],
            device=runtime.devices[self.device_index] if self.device_index else None,
        )
        # Only once it compiled: a refused compile (compile_limit) is no eviction later.
        self.compiled.add(donate)
        return entry

    def run(self, args):
        """The graph's outputs for ``args`` (see the module docstring); a profiler span
        ``lazax::replay <name>``."""
        with span("replay", lambda: EXECUTOR.graph_name or self.name):
            return self._run(args)

    def _run(self, args):
        outputs = []
        if self.lowered is not None:
            buffers = self._execute(args)
            wrapping = perf_counter()
            outputs = self._adopt(buffers, args)
        results = []
        bases: dict[int, LazyTensor] = {}
        for kind, ref, layout in self.recipes:
            if kind == "new" and ref in self.aliased_roots:
                base = bases.get(ref)
                if base is None and layout.view is None:
                    base = bases[ref] = rebind(outputs[ref], layout)
                    results.append(base)
                    continue
                if base is None:
                    storage = outputs[ref]
                    whole = Layout(storage.spec.shape, layout.dtype)
                    base = bases[ref] = rebind(storage, whole)
                # Through the dispatcher, so that autograd records it as a view of base.
                results.append(base.as_strided(layout.shape, layout.stride, layout.offset))
            elif kind == "new":
                results.append(rebind(outputs[ref], layout))
            elif kind == "input":
                results.append(rebind(args[ref]._lz_storage, layout))
            else:
                results.append(ref)
        if self.lowered is not None:
            metrics.record("RunCachedGraphOutputData", perf_counter() - wrapping)
        return results[0] if self.single else results

    def _donations(self, args) -> tuple[int, ...]:
        """The slots of mutated arguments that nothing but their storage can read."""
        slots = self.mutated_slots
        may = EXECUTOR.donation.choose_written([args[i]._lz_storage.value for _, i in slots])
        return tuple(slot for (slot, _), ok in zip(slots, may) if ok)

    def _execute(self, args) -> list:
        """Run the program on ``args``; its result buffers."""
        gathering = perf_counter()
        donate = self._donations(args) if self.mutated_slots else ()
        params = self.template.copy()
        for slot, i in self.storage_slots:
            params[slot] = args[i]._lz_storage.value.node.data
        for slot, i in self.host_slots:
            params[slot] = from_cpu(args[i]).data
        for slot in self.seed_slots:
            params[slot] = np.int64(RNG.next_key())
        compiler = EXECUTOR.compiler
        runtime = compiler.runtime
        if self.placement is not None:
            place_arguments(runtime, params, self.placement[1])
        metrics.record("RunCachedGraphInputData", perf_counter() - gathering)
        key = self._key(donate)
        entry = compiler.lookup(key)
        if entry is None:  # a replay's hits are not counted: it runs by hash every call
            entry = self._compile(key, donate)
        buffers = execute(
            runtime,
            entry,
            params,
            donated=len(donate),
            what=self._what,
            spmd=self.placement is not None,
        )
        checks = entry.annotations.checks
        if checks:  # the results stay (see lazax.executor.barrier.checks)
            sites = [self.sites.get(p, ("?", None)) for p, _, _ in checks]
            CHECKS.queue(buffers[-1], checks, sites, EXECUTOR.graph_name, "replay")
        return buffers

    def _adopt(self, buffers, args) -> list[Storage]:
        """New storages for the graph's new values; the mutated arguments' storages
        take their new buffers."""
        specs = self.root_specs
        device = self.device_index
        made = [
            Storage(ir.device_data(specs[k], buffers[k]), device) for k in range(self.new_count)
        ]
        for k, arg in enumerate(self.mutated, start=self.new_count):
            args[arg]._lz_storage.set(ir.device_data(specs[k], buffers[k]))
        return made

    def _what(self) -> str:
        return f"the captured graph {EXECUTOR.graph_name or self.name or ''}".rstrip()


def sync_inputs(tensors) -> bool:
    """Run the pending IR of the storages of the lazax tensors among ``tensors`` as one
    graph, not in eager mode (a replay starts from device data); whether any was."""
    pending = None
    for a in tensors:
        if type(a) is LazyTensor and a._lz_storage.pending:
            if pending is None:
                pending = []
            pending.append(a._lz_storage)
    if pending is None:
        return False
    if MANUAL.active and MANUAL.split(pending)[1]:
        raise RuntimeError(
            "lazax: an input of a compiled graph holds a value per device (between "
            "enable_manual_sharding and disable_manual_sharding), which a graph cannot "
            "take; under torch.compile, put the per-device code in lx.shard_map, which "
            "runs outside the compiled graphs"
        )
    with EXECUTOR.mode(eager=False):
        EXECUTOR.sync_storages(pending)
    return True
