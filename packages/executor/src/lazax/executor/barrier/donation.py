"""Donation: which input buffers a graph may write its outputs over.

Contract: ``DonationPolicy.choose(graph, roots, targets)`` returns the indices of
``graph.parameters`` to donate (jax's ``donate_argnums``), as a sorted tuple, empty when
donation is off. An input is donated only when
- nothing can read it after this sync: ``lazax.ir.private_parameters`` finds no holder
  of it (or of any node between it and the roots) besides the graph, the ``roots`` list
  and the ``targets`` (storages, or view tensors, whose IR the results replace). A kept
  alias or ``.detach()`` shares the storage and reads its new value; a pending clone, a
  view's cached IR, a tensor autograd saved, the dynamo bridge's inputs, a buffer two
  storages share and a graph hook that kept the graph are all holders, so their
  buffers are never donated;
- an output of the same shape and dtype can take it over (donating a buffer that no
  output can reuse frees nothing and makes jax warn);
``DonationPolicy.choose_written(leaves)`` is the same rule for a replayed graph, which
keeps no IR: of the inputs it writes (their storages' device-data leaves), those whose
leaf only its storage holds (no other tensor's IR) and whose buffer only that leaf holds
(no second storage over it). The replay compiles one executable per pattern.
``output_order(graph, donate, targets)`` is the order the program should return the
roots in so that each donated input is written over by the new value of the storage that
held it: jax pairs the k-th donated input of a shape and dtype with the k-th output of
that shape and dtype, and a donated buffer paired with an output computed before the
input's last read makes XLA copy the input first (at 24 layers, a copy of almost every
parameter and optimizer state, each step). None when the roots' order already pairs them.
``agreed(graph, targets, chosen)``: for a graph with collectives between the job's
processes, ``(donate, copies)``. Every process must look up the same cache key for the
same program, so what it donates cannot depend on what it alone still holds:
``donate`` is the graph's own, the inputs that are the old value of a storage the sync
writes with a value of the same spec (the same in every process that traced the same
graph); ``copies``, those of them that ``chosen`` (this process's ``choose``) did not
pick because something else holds them: the caller passes a copy of each instead, which
the program writes over, so the holder keeps its value.
``LAZAX_DONATION=0`` turns donation off (``EXECUTOR.donation``), for debugging.
The caller holds ``EXECUTOR.sync_lock`` from the decision until the results have
replaced the targets' IR, and every op holds it while it reads IR (``dispatch``): no
thread can take a new reference to the graph in between.
"""

from __future__ import annotations

from lazax import ir

from ..config import settings
from ..state.storage import StaleView, is_storage

__all__ = ["DonationPolicy", "agreed", "output_order"]


class DonationPolicy:
    def __init__(self) -> None:
        self.enabled = settings().donation

    def choose(self, graph: ir.Graph, roots: list, targets, bump: bool = True) -> tuple[int, ...]:
        if not self.enabled:
            return ()
        if not bump and not any(not is_storage(t) or t.version for t in targets):
            # An eager op's fresh outputs: its inputs are held by the tensors it was
            # called with, so nothing could be donated; skip the analysis (per op).
            return ()
        # The graph object itself: the caller's variable and this parameter (two calls
        # down from the caller's frame). A graph hook that kept it can read every node
        # (the count above it says so).
        if ir.holder_count(graph, calls=2) != 2:
            return ()
        params = graph.parameters
        wanted = _output_specs(graph)
        dropped = _dropped_references(roots, targets, bump)
        donate = []
        for i in ir.private_parameters(graph, dropped):
            spec = params[i].specs[0]
            left = wanted.get(spec, 0)
            if left:
                wanted[spec] = left - 1
                donate.append(i)
        return tuple(donate)

    def choose_written(self, leaves: list) -> tuple[bool, ...]:
        """For each device-data leaf of an input a replay writes: may it be donated?"""
        if not self.enabled:
            return (False,) * len(leaves)
        buffers = [leaf.data for leaf in leaves]
        # Counted from the caller's list (one reference each) and the storage's slot.
        leaf_counts, buffer_counts = ir.holder_counts(leaves), ir.holder_counts(buffers)
        if leaf_counts is None or buffer_counts is None:
            return (False,) * len(leaves)
        return tuple(leaf == buffer == 1 for leaf, buffer in zip(leaf_counts, buffer_counts))


def agreed(
    graph: ir.Graph, targets, chosen: tuple[int, ...], enabled: bool = True
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The donation of a graph with collectives (see the module's contract)."""
    if not enabled or not targets:
        return (), ()
    params = graph.parameters
    index_of = {id(p): i for i, p in enumerate(params) if p.op == ir.DEVICE_DATA}
    donate = set()
    for k, t in enumerate(targets):
        i = index_of.get(t.leaf_id) if is_storage(t) else None
        if i is not None and graph.roots[k].spec == params[i].specs[0]:
            donate.add(i)
    kept = set(chosen)
    return tuple(sorted(donate)), tuple(sorted(donate - kept))


def output_order(graph: ir.Graph, donate: tuple[int, ...], targets) -> list[int] | None:
    """Root indices in the order the program returns them (see the module's contract).
    Called on a compile only: the executable keeps the order."""
    if not donate:
        return None
    params = graph.parameters
    index_of = {id(params[i]): i for i in donate}
    wanted: dict[int, int] = {}  # donated input -> the root that replaces its storage
    for k, t in enumerate(targets):
        i = index_of.get(t.leaf_id) if is_storage(t) else None
        if i is not None and graph.roots[k].spec == params[i].specs[0]:
            wanted[i] = k
    if not wanted:
        return None
    claimed = set(wanted.values())
    free: dict = {}  # spec -> roots no donated input asks for, in order
    for k, r in enumerate(graph.roots):
        if k not in claimed:
            free.setdefault(r.spec, []).append(k)
    first = []
    for i in donate:  # ascending: the order jax takes donated inputs in
        k = wanted.get(i)
        if k is None:
            spare = free.get(params[i].specs[0])
            if not spare:
                continue
            k = spare.pop(0)
        first.append(k)
    placed = set(first)
    order = first + [k for k in range(len(graph.roots)) if k not in placed]
    return None if order == list(range(len(order))) else order


def _output_specs(graph: ir.Graph) -> dict:
    """How many outputs of each spec the graph has (a function of its own: a loop
    variable left holding a root would count as a holder of it)."""
    wanted: dict = {}
    for r in graph.roots:
        wanted[r.spec] = wanted.get(r.spec, 0) + 1
    return wanted


def _dropped_references(roots: list, targets, bump: bool) -> dict[int, int]:
    """References into the graph that go once the results are in: the roots list
    itself, each target's slot (a storage's value, a view's cached IR) and, when the
    storages' versions move (``bump``), the IR their views cached."""
    dropped: dict[int, int] = {}
    for r in roots:
        dropped[id(r)] = dropped.get(id(r), 0) + 1
    for t in targets:
        if not is_storage(t):
            dropped[id(t._lz_value)] = dropped.get(id(t._lz_value), 0) + 1
            continue
        dropped[id(t.value)] = dropped.get(id(t.value), 0) + 1
        if bump and t.views is not None:
            for ref in t.views:
                view = ref()
                if (
                    view is not None
                    and view._lz_view is not None
                    and view._lz_storage is t
                    and type(view._lz_value) is not StaleView
                ):
                    key = id(view._lz_value)
                    dropped[key] = dropped.get(key, 0) + 1
    return dropped
