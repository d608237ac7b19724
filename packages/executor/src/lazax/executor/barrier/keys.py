"""Cache keys from named parts, and explanations of recompiles.

Contract:
- ``KeyParts(runtime)`` builds ``CacheKey``s with the parts ``graph`` (the graph hash:
  post-order node hashes and the outputs taken), ``inputs`` (the parameters' specs),
  ``device`` (platform, device kind and count), ``donated`` (the inputs whose buffers
  the program writes over, when any), ``options`` (the runtime's compile
  options, re-read on every key: a jax option changed between two compiles must not
  reuse an executable), ``checks`` (whether programs check values on the device:
  ``barrier.checks``) and ``versions`` (lazax, jax, jaxlib, torch).
  ``memory_key(graph_hash, shardings, donate)`` is the same key in the flat form the
  in-memory LRU uses on every sync (no new hashing): the graph hash, the digest of the
  environment parts, the input shardings' key and the donated inputs. It leaves out
  ``inputs``, which the graph hash covers (device data hashes by spec); the named form
  exists to say which part changed. The barrier and the replay build both here.
- ``GraphFacts(graph)``: what is kept of a graph to key, explain and dump a compile.
- ``RecompileLog.on_compile(site, facts, key)`` is told of every compile (by the compile
  stage, for the barrier, eager ops and replays alike); when ``site`` (a graph name, an
  eager op's name, a dynamo graph's name, or else the user's code location) already
  compiled a graph, it records why this one differs: the first differing key part
  and, inside the graph, the first differing input spec or node, with the user's Python
  frame. ``LAZAX_DEBUG_RECOMPILES=1`` prints each report to stderr. Misses are logged
  with their parts at DEBUG level on the ``lazax.cache`` logger.
"""

from __future__ import annotations

import logging
import sys
from collections import Counter

import torch

from lazax import ir
from lazax.cache import CacheKey, environment_part

from .. import metrics
from .._version import __version__
from ..config import settings
from .checks import CHECKS

__all__ = ["GraphFacts", "KeyParts", "RecompileLog"]

_LOG = logging.getLogger("lazax.cache")


class KeyParts:
    """Builds cache keys for graphs run by one runtime (see the module docstring)."""

    def __init__(self, runtime, device_salt_hash: int) -> None:
        self.runtime = runtime
        self.device = device_salt_hash
        versions = {**runtime.versions(), "torch": torch.__version__}
        versions["lazax-executor"] = __version__
        versions["lazax-ir"] = ir.__version__
        self.versions = environment_part(versions)
        self._options: tuple | None = None
        self._environment: dict[str, int] = {}
        self._digest = 0

    def environment(self) -> dict[str, int]:
        options = (self.runtime.compile_options(), CHECKS.enabled)
        if options != self._options:
            self._options = options
            self._environment = {
                "device": self.device,
                "options": environment_part(dict(options[0])),
                "versions": self.versions,
                "checks": int(options[1]),
            }
            self._digest = hash(tuple(self._environment.values()))
        return self._environment

    def memory_key(self, graph_hash: int, shardings=None, donate: tuple = ()) -> tuple:
        """The LRU's key: ``cache_key``'s parts, flat (see the module docstring)."""
        self.environment()
        return graph_hash, self._digest, shardings, donate

    def cache_key(
        self, graph: ir.Graph | GraphFacts, shardings: tuple | None = None, donate: tuple = ()
    ) -> CacheKey:
        """``graph``: the graph, or what was kept of it (``GraphFacts``); ``shardings``:
        the SPMD input shardings (mesh, per-input spec), if any; ``donate``: the donated
        input indices."""
        specs = graph.inputs if type(graph) is GraphFacts else _input_specs(graph)
        parts = {"graph": graph.hash, "inputs": ir.stable_hash(specs), **self.environment()}
        if shardings is not None:
            parts["shardings"] = ir.stable_hash(repr(shardings))
        if donate:
            parts["donated"] = ir.stable_hash(tuple(donate))
        return CacheKey(parts)


def _input_specs(graph: ir.Graph) -> tuple:
    return tuple((p.specs[0].shape, p.specs[0].dtype) for p in graph.parameters)


def _summary(graph: ir.Graph) -> tuple[list, list]:
    params = [p.specs[0] for p in graph.parameters]
    nodes = [(n.op, n.attrs, n.specs) for n in graph.nodes if n.operands or n.op not in _LEAVES]
    return params, nodes


_LEAVES = (ir.DEVICE_DATA, ir.SCALAR)


class GraphFacts:
    """What the compile stage keeps of a graph to key, explain and dump its compiles:
    its hash, its inputs' specs, the summary a recompile report compares, and (``text``,
    when asked) its readable IR. It holds no node, so no device buffer: a replay keeps
    it to explain a compile after an eviction."""

    __slots__ = ("hash", "inputs", "summary", "text")

    def __init__(self, graph: ir.Graph, text: bool = False) -> None:
        self.hash = graph.hash
        self.inputs = _input_specs(graph)
        self.summary = _summary(graph)
        self.text = ir.dump(graph) if text else None


def _graph_difference(before: tuple[list, list], now: tuple[list, list]) -> str:
    (old_params, old_nodes), (params, nodes) = before, now
    # Inputs are matched by spec, not position: a new shape can move an input in the
    # walk order (a slice that became the whole tensor is no longer a view node).
    gone, new = Counter(old_params) - Counter(params), Counter(params) - Counter(old_params)
    if sum(gone.values()) == 1 and sum(new.values()) == 1:
        (a,), (b,) = gone, new
        i = params.index(b)
        if a.shape != b.shape:
            return f"input {i} shape changed from {a.shape} to {b.shape}"
        return f"input {i} dtype changed from {a.dtype} to {b.dtype}"
    for i, (a, b) in enumerate(zip(old_nodes, nodes)):
        if a[0] != b[0]:
            return f"node {i} is now {b[0]} (was {a[0]})"
        if a[1] != b[1]:
            return (
                f"{b[0]} (node {i}) has other attributes: a scalar baked as a constant or an "
                f"argument changed, from {a[1]} to {b[1]}"
            )
        if a[2] != b[2]:
            return f"{b[0]} (node {i}) output changed from {a[2]} to {b[2]}"
    if len(nodes) > len(old_nodes):
        return f"new op {nodes[len(old_nodes)][0]} (graph grew from {len(old_nodes)} nodes)"
    if len(nodes) < len(old_nodes):
        return f"op {old_nodes[len(nodes)][0]} is gone (graph shrank to {len(nodes)} nodes)"
    if len(old_params) != len(params):
        return f"{len(params)} inputs instead of {len(old_params)}"
    return "the outputs taken from the graph changed"


def _sharding_difference(before, now) -> str:
    """Which input's SPMD sharding changed (``(mesh, per-input spec)``, or None)."""
    if before is None or now is None:
        return "the graph now runs " + ("sharded" if now is not None else "on one device")
    if before[0] != now[0]:
        return "the device mesh changed"
    for i, (a, b) in enumerate(zip(before[1], now[1])):
        if a != b:
            return f"input {i} sharding changed from {a or 'replicated'} to {b or 'replicated'}"
    return "the input shardings changed"


def _donation_difference(before: tuple, now: tuple) -> str:
    """Which inputs are donated now and were not (or the reverse): something else
    started or stopped holding them (a kept clone, a view, a graph hook)."""
    gained, lost = sorted(set(now) - set(before)), sorted(set(before) - set(now))
    said = []
    if gained:
        said.append(f"input(s) {gained} are now donated (nothing else holds them)")
    if lost:
        said.append(f"input(s) {lost} are no longer donated (something else holds them)")
    return "; ".join(said) or "the donated inputs changed"


class RecompileLog:
    """What each compile site compiled last, and why it compiled again."""

    def __init__(self) -> None:
        self.last: dict[str, tuple[CacheKey, tuple[list, list]]] = {}

    def explain(
        self, site: str, facts: GraphFacts, key: CacheKey, shardings=None, donate=()
    ) -> str | None:
        """Why ``site`` compiles again (None: it never compiled), recording nothing."""
        previous = self.last.get(site)
        if previous is None:
            return None
        part = key.first_difference(previous[0])
        if part is None:  # the very key compiled before: the cache no longer held it
            return "the same graph compiled again (the cache had evicted it, or was reset)"
        if part in ("graph", "inputs"):
            return _graph_difference(previous[1], facts.summary)
        if part == "shardings" or shardings != previous[2]:
            return _sharding_difference(previous[2], shardings)
        if donate != previous[3]:
            return _donation_difference(previous[3], donate)
        return f"the {part} part of the cache key changed (same graph)"

    def on_compile(
        self, site: str, facts: GraphFacts, key: CacheKey, frame: str, shardings=None, donate=()
    ) -> str | None:
        """Record this compile of ``site``; the report if ``site`` compiled before."""
        if _LOG.isEnabledFor(logging.DEBUG):
            _LOG.debug("lazax cache miss at %s: %r", site, key)
        why = self.explain(site, facts, key, shardings, donate)
        self.last[site] = (key, facts.summary, shardings, donate)
        if why is None:
            return None
        report = f"recompile of {site}: {why} at {frame}"
        metrics.add_recompile_report(report)
        if settings().debug_recompiles:
            print(f"lazax: {report}", file=sys.stderr)
        return report
