"""The barrier: turning pending IR into device data.

Contract of ``GraphExecutor.sync_tensors_graph(tensors, wait, sync_ltc_data)``:
1. Collect the IR of the given tensors that is still pending (a non-view tensor syncs
   its whole storage; a view syncs its own value). Nothing pending: nothing happens.
2. Walk it once (``lazax.ir.collect``): post-order, parameters, graph hash (salted by
   the device kind).
3. If execution is not allowed (inside ``compile(full_graph=True)``), report and raise
   before anything runs.
4. Key it and look it up (``compile``: the compile stage); on a miss lower the graph to
   one jax function and compile it (``UncachedCompile``), else count ``CachedCompile``.
5. Execute asynchronously (``execute``: the execute stage): results are futures.
6. Only now are tensors touched: each synced storage (or view) holds device data and its
   IR is dropped. A failed lowering, compile or execution raises before step 6, so every
   tensor keeps the value it had and can still be read.
Donation (``donation``): before the cache lookup, the inputs that nothing can read
after this sync and that an output can take over are chosen; the executable is compiled
with them donated (the choice is part of the cache key) and writes its outputs over
them. The decision, the execution and the hand-back run under ``sync_lock``. An
execution that fails synchronously has consumed nothing, so the rule above still holds.
``wait=True`` blocks until the results are ready. ``sync_ltc_data=False`` (eager mode's
per-op sync) leaves the views of a synced storage holding their IR (it does not bump
the storage version), which is all an op's fresh outputs need.
``sync()`` syncs every live storage with pending IR in one graph, its roots in the
order of their hashes (the same work is the same graph, however it became pending).
Manual sharding (``ops.manual``): a value that differs per device has no value a
storage could hold, so it stays pending: ``sync()`` and eager mode's syncs
(``hold_manual=True``) leave it out, and any other sync of it (a read, a move) raises
``RuntimeError`` before anything runs, asking for ``disable_manual_sharding``.
Device-side checks (``checks``): a program's flags are queued after it runs; each
sync first reads those that are ready, and every read to the host reads them all, so
a bad index raises at the first sync or read after its graph ran. A held check
(``CHECKS.hold``: one whose result nothing reads) joins the graph of the next sync.
Threads: results are handed back with ``Storage.settle`` (see ``state.storage``), so a sync
never overwrites a write that another thread made while the graph ran; the cache is
locked. Mode flags (eager, graph name, allow-execution, capture guard, graph-count
session) are process-wide and change through ``GraphExecutor.mode`` (restored on exit;
see ``barrier.flags``).
"""

from __future__ import annotations

import threading

from lazax import ir

from .. import metrics
from ..ops.manual import MANUAL
from ..profiling import span
from ..state.storage import COMMIT_LOCK, DEVICES_IN_USE, PENDING, by_device, is_storage
from ..state.values import ir_value
from .agreement import CollectiveGraphsDiffer, describe
from .checks import CHECKS
from .collective_cut import PENDING_COLLECTIVES, CutKeys, holds_collective, run_cut
from .debug import unexpected_execution
from .donation import DonationPolicy, agreed, output_order
from .execute import execute
from .flags import ExecutorFlags
from .keys import GraphFacts
from .lower import lower
from .placement import kept_layouts, place_arguments, placement, written_leaves

__all__ = ["EXECUTOR", "GraphExecutor"]


class GraphExecutor(ExecutorFlags):
    """Process-wide executor state: the flags (``ExecutorFlags``) and the sync entry
    points every graph goes through."""

    def __init__(self) -> None:
        super().__init__()
        # While a graph runs cut at its collectives (``collective_cut``); the graphs
        # the processes agreed to cut.
        self._cutting = False
        self.cut_keys = CutKeys()
        # Held from a sync's donation decision until its results are in place.
        self.sync_lock = threading.RLock()
        self.donation = DonationPolicy()

    # -- the barrier ---------------------------------------------------------------
    def sync_tensors_graph(
        self, tensors, wait: bool = False, sync_ltc_data: bool = True, hold_manual: bool = False
    ):
        """``hold_manual``: leave per-device values pending (see the contract)."""
        if hold_manual and MANUAL.active:
            tensors = [t for t in tensors if MANUAL.of(ir_value(t).node) is None]
        with self.sync_lock:
            self.poll_checks()
            held = CHECKS.take_held() if CHECKS.held else ()
            try:
                self._sync_tensors([*tensors, *held] if held else tensors, sync_ltc_data)
            except BaseException:
                for t in held:
                    CHECKS.hold(t)
                raise
            finally:
                del held
        if wait:
            self.wait(tensors)

    def _sync_tensors(self, tensors, sync_ltc_data: bool) -> None:
        roots: list[ir.Value] = []
        targets: list = []
        seen: set[int] = set()
        for t in tensors:
            storage = t._lz_storage
            if t._lz_view is None:
                if storage.pending and id(storage) not in seen:
                    seen.add(id(storage))
                    roots.append(storage.value)
                    targets.append(storage)
                continue
            if ir_value(t).node.op != ir.DEVICE_DATA and id(t) not in seen:
                seen.add(id(t))
                roots.append(t._lz_value)
                targets.append(t)
        if not roots:
            return
        if DEVICES_IN_USE.several:  # one graph per device
            for index, pairs in _per_device(targets, roots):
                self._run_and_settle(
                    [p[1] for p in pairs], [p[0] for p in pairs], sync_ltc_data, index
                )
            return
        self._run_and_settle(roots, targets, sync_ltc_data)

    def _run_and_settle(self, roots, targets, sync_ltc_data: bool, device_index: int = 0):
        results = self.run_graph(roots, targets, bump=sync_ltc_data, device_index=device_index)
        for target, root, value in zip(targets, roots, results):
            if is_storage(target):
                # sync_ltc_data: views re-read from the materialised base rather
                # than keep the old graph alive (and recompute it).
                target.settle(root, value, bump=sync_ltc_data)
            else:
                with COMMIT_LOCK:
                    if target._lz_value is root:
                        target._lz_value = value

    def run_new(self, roots, device_index: int = 0) -> list[ir.Value]:
        """Eager mode's functional op: run the values ``roots`` (one op's outputs, held
        by no tensor yet) now on ``lazax:device_index``, without blocking; their device
        data, in order. Nothing to donate or settle: the caller makes the tensors from
        the results."""
        with self.sync_lock:
            self.poll_checks()
            return self.run_graph(list(roots), device_index=device_index)

    def sync_storages(self, storages, hold_manual: bool = False) -> None:
        """Run the pending IR of these storages as one graph (an eager in-place write:
        the base is what changed, whether the write went through a view or not).
        ``hold_manual``: leave per-device values pending (see the contract)."""
        seen: set[int] = set()
        pending = []
        hold = hold_manual and MANUAL.active
        for s in storages:
            if hold and s.pending and MANUAL.of(s.value.node) is not None:
                continue
            if s.pending and id(s) not in seen:
                seen.add(id(s))
                pending.append(s)
        if not pending:
            return
        with self.sync_lock:
            self.poll_checks()
            for index, group in by_device(pending):
                roots = [s.value for s in group]
                results = self.run_graph(roots, group, device_index=index)
                for storage, root, value in zip(group, roots, results):
                    storage.settle(root, value)

    def sync(self, wait: bool = False) -> None:
        """Sync every live tensor with pending IR, as one graph. ``wait``: block until
        it has run and read its device-side checks (``barrier.checks``)."""
        with self.sync_lock:
            self.poll_checks()
            # Held checks are live, pending storages: PENDING hands them to this graph.
            checks = CHECKS.take_held() if CHECKS.held else ()
            storages = PENDING.take()
            if MANUAL.active:  # per-device values stay pending (see the contract)
                storages, held = MANUAL.split(storages)
                PENDING.restore(held)
                del held
            for index, group in by_device(storages) if storages else ():
                # In the order of their Merkle hashes, not of when each became pending
                # (history: a parameter pending since model.to(), or since the step's
                # update), so that the same step is the same graph whatever came before.
                group.sort(key=_root_hash)
                roots = [s.value for s in group]
                try:
                    results = self.run_graph(roots, group, device_index=index)
                except BaseException:
                    PENDING.restore([s for s in storages if s.pending])
                    for t in checks:
                        CHECKS.hold(t)
                    # The traceback keeps this frame (and run_graph's) alive: it must
                    # not keep the storages, or a tensor the user drops stays pending.
                    storages.clear()
                    group.clear()
                    raise
                for storage, root, value in zip(group, roots, results):
                    storage.settle(root, value)
                del roots, results, group
        if wait:
            self.runtime.wait([s.value.node.data for s in storages if not s.pending])
            self.read_checks()

    def poll_checks(self) -> None:
        """At a sync point, first: raise the first failed device-side check of the
        programs that have finished (never waits; see ``barrier.checks``). Under ``sync_lock``."""
        if CHECKS.unread:
            CHECKS.poll(self.runtime)

    def read_checks(self, wait: bool = True) -> None:
        """Raise the first failed device-side check of what has run: of everything
        executed so far, waiting for it (``wait_device_ops``, ``sync(wait=True)``), or
        (``wait=False``, after a read to the host) of every execution that finished."""
        if CHECKS.unread:
            with self.sync_lock:
                if wait:
                    CHECKS.resolve(self.runtime)
                else:
                    CHECKS.read_finished(self.runtime)

    def wait(self, tensors) -> None:
        buffers = []
        for t in tensors:
            node = ir_value(t).node
            if node.op == ir.DEVICE_DATA:
                buffers.append(node.data)
        if buffers:
            self.runtime.wait(buffers)

    def run_graph(
        self, roots: list[ir.Value], targets=(), bump: bool = True, device_index: int = 0
    ) -> list[ir.Value]:
        """Compile (or find) and execute the graph of ``roots``; device-data values.
        ``targets``: what each root's result will replace (storages, or view tensors):
        their IR is dropped (and, with ``bump``, their views' cached IR), so it does not
        keep an input from being donated. ``device_index``: the device the graph's
        tensors live on (``lazax:N``), which it is compiled for and runs on. The caller
        holds ``sync_lock`` until the results are in place."""
        if self.capture_guard is not None:  # before hooks and counters see a graph
            self.capture_guard("an execution")
        if MANUAL.active and MANUAL.meshes([r.node for r in roots]):
            raise RuntimeError(
                "lazax: this tensor holds a value that differs per device (it is computed "
                "from enable_manual_sharding's result inside manual sharding), so it has "
                "no single value to read, move or sync; call disable_manual_sharding on "
                "it first"
            )
        # A span per sync, named as its program, while a profiler records (else free).
        with span("sync", lambda: self.program_name(roots, self.eager)):
            compiler = self.compiler
            salt = compiler.device_salt_hash
            if device_index:  # the same graph on another device is another program
                salt = hash((salt, device_index))
            graph = ir.collect(roots, salt=salt)
            for hook in self.graph_hooks:
                hook(self.graph_name, graph)
            if self.graph_count_session is not None:
                self.graph_count_session.check(graph)
            eager = self.eager
            runtime = compiler.runtime
            placed = placement(graph, runtime)  # None unless something was ever sharded
            donate = copies = ()
            if targets:
                donate = self.donation.choose(graph, roots, targets, bump)
                if PENDING_COLLECTIVES and holds_collective(graph):  # (see there)
                    donate, copies = agreed(graph, targets, donate, self.donation.enabled)
            shardings = placed[0] if placed is not None else None
            key = compiler.keys.memory_key(graph.hash, shardings, donate)
            entry = compiler.lookup(key)
            if entry is None and key in self.cut_keys:
                # Agreed before that the processes' graphs differ: cut again, as every
                # process with its own key from that meeting does (no meeting).
                metrics.bump("CollectiveGraphCuts")
                return self._run_cut(roots, device_index)
            if entry is None:
                metrics.bump("UncachedCompile")
                self.check_execution_allowed("a compile", graph)
                name = self.program_name(roots, eager)
                site, frame = self.compile_site()
                try:
                    entry = compiler.compile(
                        key,
                        lambda: lower(
                            graph,
                            output_order(graph, donate, targets),
                            kept_layouts(graph, written_leaves(targets)),
                        ),
                        timer="EagerOpCompileTime" if eager else "CompileTime",
                        arg_shardings=placed[1] if placed is not None else None,
                        donate=donate,
                        lines=lambda: describe(graph),
                        name=name,
                        site=(self.graph_name, frame),
                        facts=GraphFacts(graph, text=compiler.dumps.directory is not None),
                        shardings=shardings,
                        # An eager op's shapes are its site; a lazy graph's, where it synced.
                        report_as=name if eager and not self.graph_name else site,
                        device=runtime.devices[device_index] if device_index else None,
                        cut_if_differ=not self._cutting,
                    )
                except CollectiveGraphsDiffer:
                    # Every process learnt it at the same meeting: each runs its own
                    # graph cut at the collectives, which it issued in the same order,
                    # and remembers it for this graph (a key of its own).
                    self.cut_keys.add(key)
                    metrics.bump("CollectiveGraphCuts")
                    return self._run_cut(roots, device_index)
            else:
                metrics.bump("CachedCompile")
                self.check_execution_allowed("an execution", graph)
            args = [p.data for p in graph.parameters]
            for i in copies:  # donated by every process, held by more here
                args[i] = runtime.copy(args[i])
                metrics.bump("DonationCopies")
            if placed is not None:
                place_arguments(runtime, args, placed[1], graph.parameters)
            outputs = execute(
                runtime,
                entry,
                args,
                timer="EagerOpExecuteTime" if eager else "ExecuteTime",
                donated=len(donate),
                what=self._describe_for_oom,
                graph=graph,
                spmd=placed is not None,
            )
            results = [ir.device_data(r.spec, buf) for r, buf in zip(roots, outputs)]
            checks = entry.annotations.checks
            if checks:  # device-side checks: the flags are the last output
                reached = graph.reached
                sites = [(reached[p].op, reached[p].data) for p, _, _ in checks]
                name = self.graph_name
                if eager:  # the op raises itself, before its outputs are handed out
                    CHECKS.queue(outputs[-1], checks, sites, name, "eager")
                    CHECKS.resolve(runtime)
                elif donate:
                    CHECKS.queue(outputs[-1], checks, sites, name, "donated")
                else:
                    nodes = [reached[p] for p, _, _ in checks]
                    undo = (list(targets), roots, results, nodes)
                    CHECKS.queue(outputs[-1], checks, sites, name, "reverted", undo)
            return results

    def _run_cut(self, roots, device_index: int) -> list[ir.Value]:
        self._cutting = True
        try:
            return run_cut(lambda values: self.run_graph(values, device_index=device_index), roots)
        finally:
            self._cutting = False

    def _describe_for_oom(self) -> str:
        what = f"graph {self.graph_name}" if self.graph_name else "a graph"
        return f"{what} (synced at {self.compile_site()[1]})"

    def check_execution_allowed(self, what: str, graph: ir.Graph | None = None) -> None:
        """Inside ``compile(full_graph=True)``: report and raise before anything runs.
        During a capture the capture guard is told first (and normally raises)."""
        if self.capture_guard is not None:
            self.capture_guard(what)
        if self.allow_execution:
            return
        raise unexpected_execution(what, self.graph_name, graph)


def _root_hash(storage) -> int:
    return storage.value.hash


def _per_device(targets: list, roots: list) -> list[tuple[int, list]]:
    """(target, root) pairs grouped by their device, in first-seen order."""
    groups: dict[int, list] = {}
    for target, root in zip(targets, roots):
        index = target.device_index if is_storage(target) else target._lz_storage.device_index
        groups.setdefault(index, []).append((target, root))
    return list(groups.items())


EXECUTOR = GraphExecutor()
