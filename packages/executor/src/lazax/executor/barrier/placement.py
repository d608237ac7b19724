"""SPMD placement: the barrier's (and the replay's) side of sharding.

Contract: ``placement(graph, runtime)`` (only once anything was sharded) is None for a
single-device graph; otherwise ``(key, arg_shardings)``: the input shardings as part of
the cache key (a changed sharding compiles a new graph, the same one never does) and the
shardings to compile with. An input that is not split is replicated over the mesh
(``place_arguments`` moves it once: the storage then keeps the replicated buffer).
``signature(tensors)``: the input shardings of a replay's call (None until anything was
sharded), checked on every call. ``kept_layouts(graph, written)``: for ``lower``'s
``layouts``, root -> a sharding to return it padded for, where jax would hand back an
uneven result replicated: a root that replaces an input held padded (split unevenly;
``written`` maps the root's index to the id of the device-data leaf it replaces: the
barrier's ``written_leaves(targets)``, a replay's written arguments) keeps that input's
split, an update in place; a new root (no input written) of the same shape and dtype
as padded inputs that all have one split takes that split (a gradient or an optimizer
state of an unevenly split parameter, as XLA's propagation splits those of an evenly
split one).
"""

from __future__ import annotations

from lazax import ir

from ..ops.manual import MANUAL_ENTER, MANUAL_EXIT
from ..ops.sharding import ACTIVE, CONSTRAINTS, SHARD_OP
from ..state.storage import is_storage

__all__ = ["kept_layouts", "place_arguments", "placement", "signature", "written_leaves"]


_MESH_OPS = frozenset((SHARD_OP, MANUAL_ENTER, MANUAL_EXIT))


def placement(graph: ir.Graph, runtime):
    """None (single device), or (cache-key part, one sharding per parameter)."""
    if not ACTIVE["active"]:
        return None
    mesh = None
    split: list = []
    spread = False  # an input already on several devices (a replicated result)
    for p in graph.parameters:
        s = getattr(p.data, "sharding", None)
        if s is None or s.is_fully_replicated:
            split.append(None)
            if s is not None and len(s.device_set) > 1:
                spread = True
                mesh = mesh or getattr(s, "mesh", None)
            continue
        split.append(s)
        mesh = s.mesh
    # ``reached``, not ``nodes``: the post-order ``nodes`` is computed on first use and
    # kept on the graph, one more holder of every node, which would stop donation.
    for node in graph.reached:
        if node.op in _MESH_OPS:  # a constraint, or manual sharding's ends
            mesh = mesh or CONSTRAINTS[node.attrs[0][1]].mesh
    if mesh is None:
        if spread:
            raise RuntimeError(
                "lazax: a graph's input is spread over several devices without a mesh; "
                "mark it with mark_sharding, or clear_sharding it"
            )
        return None
    replicated = runtime.named_sharding(mesh, ())
    shardings = [replicated if s is None else s for s in split]
    key = (mesh, tuple(None if s is None else s.spec for s in split))
    return key, shardings


def place_arguments(runtime, args: list, shardings: list, nodes=None) -> None:
    """Re-lay out each argument whose buffer is not as compiled (an unsplit input of a
    sharded graph: replicated); with ``nodes``, each device-data node keeps the result."""
    for k, (a, s) in enumerate(zip(args, shardings)):
        current = getattr(a, "sharding", None)
        if current is not None and current != s:
            args[k] = runtime.place(a, s)
            if nodes is not None:
                nodes[k].data = args[k]


def signature(tensors) -> tuple | None:
    """The input shardings, for the dynamo bridge's per-call signature (None until
    anything was sharded)."""
    if not ACTIVE["active"]:
        return None
    out = []
    for t in tensors:
        storage = getattr(t, "_lz_storage", None)  # None: a host tensor
        data = None if storage is None else storage.value.node.data
        s = getattr(data, "sharding", None)
        out.append(None if s is None or s.is_fully_replicated else s)
    return tuple(out)


def written_leaves(targets) -> dict[int, int]:
    """Root index -> the id of the device-data leaf its storage held before the graph
    (the barrier's targets: a storage per root, or something else for a new value)."""
    return {k: t.leaf_id for k, t in enumerate(targets) if is_storage(t) and t.leaf_id}


def kept_layouts(graph: ir.Graph, written: dict[int, int]) -> dict[int, object] | None:
    """Root -> sharding, for the roots that continue an input held padded (see the
    contract). Which roots those are is not part of the cache key: a run under the
    same key (the barrier's, a replay's of the same graph) with other written inputs
    gets its outputs laid out as this compile chose, and any layout holds the same
    value (a padded buffer says so by its shape); only where the result lives differs."""
    if not ACTIVE["active"]:
        return None
    params = graph.parameters
    padded: dict[int, int] = {}  # id(parameter) -> its index
    by_spec: dict = {}  # spec -> the shardings of the padded inputs of that spec
    for i, p in enumerate(params):
        if p.op == ir.DEVICE_DATA and tuple(getattr(p.data, "shape", ())) != p.specs[0].shape:
            padded[id(p)] = i
            by_spec.setdefault(p.specs[0], set()).add(p.data.sharding)
    if not padded:
        return None
    out = {}
    for k, leaf in written.items():
        i = padded.get(leaf)
        if i is not None and graph.roots[k].spec == params[i].specs[0]:
            out[k] = params[i].data.sharding
    for k, r in enumerate(graph.roots):
        if k in written:  # a written input that is not padded keeps its own layout
            continue
        shardings = by_spec.get(r.spec)
        if shardings is not None and len(shardings) == 1:
            out[k] = next(iter(shardings))
    return out
