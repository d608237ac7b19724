"""The bridge: what AOTAutograd calls with each FX graph, and what runs it per call.

Contract: ``bridge(gm, example_inputs)`` returns a ``GraphBridge`` (a boxed callable).
On each call it
1. syncs any tensor argument that still holds pending IR, as one graph
   (``DynamoSyncInputExecuteTime``), so that the graph always starts from device data;
2. looks up the replay for this call's signature (symbolic ints and floats, tensor
   layouts, storage sharing): a dynamic-shape graph is traced per distinct shape and a
   shape seen before never traces or compiles again (the latest ``MAX_SIGNATURES``
   signatures are kept: a symbolic int that changes on every call, a step counter,
   re-traces every call, without growing memory);
3. on a miss, captures the graph (``lazax.executor.Replay``): ``DynamoExtractCompiledGraph``
   the first time, ``DynamoSpecializeGraph`` for each further signature;
4. runs the replay: execute by hash, outputs wrapped, in-place writes copied back.
A signature whose capture breaks at one op (an op that has no lowering, a read to the
host, a data-dependent shape) is split around it (``_partition``): the ops between such
ops become parts, each a ``GraphBridge`` of its own (captured once, replayed by hash;
split again if it breaks), and the op runs between them as lazy mode runs it (the CPU
fallback, counted under its ``aten::`` name), on every call (``DynamoSplitGraph`` counts
the splits). A signature that breaks otherwise (a view that reinterprets its storage's
dtype, a CPU tensor input with dimensions) is interpreted on every call instead: its
ops run lazily through the tensor layer; each such call is counted as
``DynamoInterpretedGraph``.
Eager mode is off while the bridge works: a compiled graph runs as one graph. Effect
tokens (AOTAutograd's ordering of ops with side effects, None at run time) are not
tensor arguments: each ``with_effects`` call runs its op in place. ``_assert_async``
and ``_linalg_check_errors`` (return nothing) become ``lazax::assert_async`` and
``lazax::linalg_check``, device-side checks whose results the program keeps as extra
outputs, dropped from the call's outputs.
"""

from __future__ import annotations

from collections import OrderedDict
from time import perf_counter

import torch

from lazax.executor import (
    EXECUTOR,
    CaptureBroken,
    Replay,
    metrics,
    replay_signature,
    sync_inputs,
)

from ._partition import breaking_node, split

__all__ = ["GraphBridge", "bridge"]

# Signatures kept per FX graph (most recently used first out when full).
MAX_SIGNATURES = 64


class GraphBridge:
    """One FX graph from AOTAutograd, traced on first use, then executed by hash."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs, name: str | None = None) -> None:
        # Boxed: called with one list of arguments. An instance attribute, so that
        # the ``functools.wraps`` of dynamo's ``disable`` (around backward) copies it.
        self._boxed_call = True
        self.gm = gm
        tokens = _effect_tokens(gm)
        self.asserts = _checked_asserts(gm)
        self.tensor_positions = [
            i
            for i, x in enumerate(example_inputs)
            if isinstance(x, torch.Tensor) and i not in tokens
        ]
        self.sym_positions = [
            i for i, x in enumerate(example_inputs) if not isinstance(x, torch.Tensor)
        ]
        # Signature -> Replay, or the reason (a str) that signature is interpreted.
        self.replays: OrderedDict[tuple, Replay | str] = OrderedDict()
        self.traced = False
        self.name = name or graph_name(gm)

    def __call__(self, *args):
        # AOTAutograd calls boxed (one list: ``_boxed_call``) where it can, and unboxed
        # where it wraps the compiled backward in ``disable``. Graph inputs are tensors
        # and numbers, never lists, so the two cannot be confused.
        if len(args) == 1 and type(args[0]) is list:
            args = args[0]
        # Ops and syncs of other threads wait: what a replay donates is decided from
        # who holds its inputs, until the mutated ones hold their new buffers.
        with EXECUTOR.sync_lock:
            return self._call(args)

    def _call(self, args):
        EXECUTOR.poll_checks()  # a sync point: earlier programs' failed checks raise here
        self._sync_pending_inputs(args)
        key = replay_signature(args, self.tensor_positions, self.sym_positions)
        replay = self.replays.get(key)
        if replay is None:
            replay = self._capture(key, args)
        else:
            self.replays.move_to_end(key)
        outputs = self._interpret(args) if type(replay) is str else replay.run(args)
        if self.asserts:  # the checks' results are no outputs of the user's graph
            return outputs[: -self.asserts]
        return outputs

    @property
    def broken(self) -> str | None:
        """Why the latest signature that is split or interpreted could not be replayed
        whole (None: every one is)."""
        kept = self.replays.values()
        reasons = [r if type(r) is str else r.reason for r in kept if type(r) is not Replay]
        return reasons[-1] if reasons else None

    def _capture(self, key: tuple, args):
        counter = "DynamoSpecializeGraph" if self.traced else "DynamoExtractCompiledGraph"
        try:
            replay = Replay(self.gm, args, self.tensor_positions, self.name)
        except CaptureBroken as why:
            replay = self._split(args, str(why)) or str(why)
        metrics.bump(counter)
        self.traced = True
        self.replays[key] = replay
        if len(self.replays) > MAX_SIGNATURES:
            # A value that changes on every call (a step counter passed as an int)
            # must not grow this without bound; the executables stay in the LRU cache.
            self.replays.popitem(last=False)
        return replay

    def _split(self, args, reason: str):
        """The graph split around the node where its capture broke, or None."""
        node = breaking_node(self.gm, args, self.tensor_positions)
        if node is None:
            return None
        top, names = split(self.gm, {node.name})
        for k, name in enumerate(names):
            setattr(top, name, _Part(getattr(top, name), f"{self.name}_part{k}"))
        metrics.bump("DynamoSplitGraph")
        return _Split(top, node.name, reason)

    def _sync_pending_inputs(self, args) -> None:
        start = perf_counter()
        if sync_inputs([args[i] for i in self.tensor_positions]):
            metrics.record("DynamoSyncInputExecuteTime", perf_counter() - start)

    def _interpret(self, args):
        metrics.bump("DynamoInterpretedGraph")
        return _run_lazily(self.gm, args)


def _run_lazily(fn, args):
    """``fn(*args)`` through the tensor layer (eager mode off), then what it left
    pending run as one graph: an interpreted graph, or a split one's top graph."""
    with EXECUTOR.mode(eager=False):
        with torch.no_grad():
            outputs = fn(*args)
        flat = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
        sync_inputs([*args, *flat])
    return outputs


class _Split:
    """A graph split around ops that cannot be replayed (``_partition``): its top graph
    runs per call, its parts replay."""

    def __init__(self, top: torch.fx.GraphModule, around: str, reason: str) -> None:
        self.top = top
        self.around = around  # the node it was split around
        self.reason = reason  # why the whole graph could not be replayed

    def run(self, args):
        return _run_lazily(self.top, args)


class _Part(torch.nn.Module):
    """One part of a split graph: a ``GraphBridge``, made on the part's first call."""

    def __init__(self, gm: torch.fx.GraphModule, name: str) -> None:
        super().__init__()
        self.gm = gm
        self.part_name = name
        self.bridge = None

    def forward(self, *args):
        if self.bridge is None:
            self.bridge = GraphBridge(self.gm, args, name=self.part_name)
        return self.bridge(list(args))


def _run_with_effects(token, op, *args, **kwargs):
    """``higher_order.with_effects`` without its token: the op runs where the graph
    calls it (lazax keeps the graph's order), and no token comes back."""
    out = op(*args, **kwargs)
    return (None, *out) if isinstance(out, tuple) else (None, out)


def _effect_tokens(gm: torch.fx.GraphModule) -> set[int]:
    """The input positions of AOTAutograd's effect tokens, which orders ops with side
    effects (``_linalg_check_errors``, ``torch.linalg.inv``'s error check) by threading a
    token through ``with_effects`` calls. At run time the tokens are None and the
    returned ones are dropped (``EffectTokensWrapper``); each ``with_effects`` is
    rewritten to call its op directly."""
    with_effects = getattr(torch.ops.higher_order, "with_effects", None)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    tokens = set()
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is with_effects:
            token = node.args[0]
            if token in placeholders:
                tokens.add(placeholders.index(token))
            node.target = _run_with_effects
    if tokens:
        gm.recompile()
    return tokens


# torch's words for _assert_async without a message.
_NO_MESSAGE = "Expected Tensor with single nonzero value, but got zero"


def _checked_asserts(gm: torch.fx.GraphModule) -> int:
    """Rewrite each check that returns nothing into one whose result the program keeps:
    ``_assert_async(cond, msg)`` (``F.one_hot``'s range checks) into
    ``lazax::assert_async``, and ``_linalg_check_errors`` (``torch.linalg.inv``'s, in a
    ``with_effects`` call once ``_effect_tokens`` ran) into ``lazax::linalg_check``;
    each checks on the device and returns a bool, appended to the graph's outputs so that
    the program holds the check. Returns how many were appended (the bridge drops them
    from each call's outputs). A failed check raises torch's error at the next sync point."""
    asserts = (torch.ops.aten._assert_async.msg, torch.ops.aten._assert_async.default)
    linalg = torch.ops.aten._linalg_check_errors.default
    checks = []
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        if node.target in asserts:
            message = node.args[1] if len(node.args) > 1 else _NO_MESSAGE
            with gm.graph.inserting_after(node):
                check = gm.graph.call_function(
                    torch.ops.lazax.assert_async.default, (node.args[0], message)
                )
            gm.graph.erase_node(node)
            checks.append(check)
        elif node.target is _run_with_effects and node.args[1] is linalg:
            token, _, info, api_name = node.args
            with gm.graph.inserting_after(node):
                check = gm.graph.call_function(
                    torch.ops.lazax.linalg_check.default,
                    (info, api_name, node.kwargs["is_matrix"]),
                )
            # The call stays for its token (AOTAutograd's wrapper reads it), checking
            # nothing itself.
            node.target = _checked_elsewhere
            node.args = (token,)
            node.kwargs = {}
            checks.append(check)
    if checks:
        output = next(n for n in gm.graph.nodes if n.op == "output")
        outs = output.args[0]
        output.args = (type(outs)([*outs, *checks]),)
        gm.recompile()
    return len(checks)


def _checked_elsewhere(token):
    """A rewritten ``with_effects(_linalg_check_errors)``: what ``_run_with_effects``
    returns for it (no token, no result), checking nothing."""
    return None, None


def graph_name(gm: torch.fx.GraphModule) -> str:
    """The program name of an FX graph in XLA's dumps and profiles: dynamo's compile id
    (frame/recompile) and which graph AOTAutograd made (a backward graph takes the
    forward's tangents), e.g. ``dynamo_0_0_forward``."""
    compile_id = torch._guards.CompileContext.current_compile_id()
    where = str(compile_id).replace("/", "_") if compile_id is not None else "graph"
    backward = any(n.op == "placeholder" and n.name.startswith("tangents") for n in gm.graph.nodes)
    return f"dynamo_{where}_{'backward' if backward else 'forward'}"


def bridge(gm: torch.fx.GraphModule, example_inputs) -> GraphBridge:
    """AOTAutograd's forward, backward and inference compiler for ``"lazax"``."""
    return GraphBridge(gm, example_inputs)
