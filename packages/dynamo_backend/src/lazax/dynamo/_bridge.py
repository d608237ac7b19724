"""The bridge: what AOTAutograd calls with each FX graph, and what runs it per call.

Contract: ``bridge(gm, example_inputs)`` returns a ``GraphBridge`` (a boxed callable).
On each call it
1. syncs any tensor argument that still holds pending IR, as one graph
   (``DynamoSyncInputExecuteTime``), so that the graph always starts from device data;
2. looks up the replay for this call's signature (symbolic ints and floats, tensor
   layouts, storage sharing): a dynamic-shape graph is traced per distinct shape and a
   shape seen before never traces or compiles again;
3. on a miss, captures the graph (``_capture``): ``DynamoExtractCompiledGraph`` the first
   time, ``DynamoSpecializeGraph`` for each further signature;
4. runs the replay: execute by hash, outputs wrapped, in-place writes copied back.
A graph whose capture breaks (an op that has no lowering, a read to the host, a
data-dependent shape) is interpreted on every call instead: its ops run lazily through
the tensor layer, the op without a lowering through the CPU fallback (counted under its
``aten::`` name), and the rest as graphs around it; each such call is counted as
``DynamoInterpretedGraph``.
Eager mode is off while the bridge works: a compiled graph runs as one graph.
"""

from __future__ import annotations

from time import perf_counter

import torch

from lazax import ir
from lazax.executor import EXECUTOR, LazyTensor, metrics

from ._capture import CaptureBroken, Replay, signature

__all__ = ["GraphBridge", "bridge"]

_DEVICE_DATA = ir.DEVICE_DATA


class GraphBridge:
    """One FX graph from AOTAutograd, traced on first use, then executed by hash."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs) -> None:
        # Boxed: called with one list of arguments. An instance attribute, so that
        # the ``functools.wraps`` of dynamo's ``disable`` (around backward) copies it.
        self._boxed_call = True
        self.gm = gm
        self.tensor_positions = [
            i for i, x in enumerate(example_inputs) if isinstance(x, torch.Tensor)
        ]
        self.sym_positions = [
            i for i, x in enumerate(example_inputs) if not isinstance(x, torch.Tensor)
        ]
        self.replays: dict[tuple, Replay] = {}
        self.traced = False
        # Why this graph is interpreted rather than replayed (None: it is replayed).
        self.broken: str | None = None

    def __call__(self, *args):
        # AOTAutograd calls boxed (one list: ``_boxed_call``) where it can, and unboxed
        # where it wraps the compiled backward in ``disable``. Graph inputs are tensors
        # and numbers, never lists, so the two cannot be confused.
        if len(args) == 1 and type(args[0]) is list:
            args = args[0]
        self._sync_pending_inputs(args)
        if self.broken is not None:
            return self._interpret(args)
        key = signature(args, self.tensor_positions, self.sym_positions)
        replay = self.replays.get(key)
        if replay is None:
            metrics.bump("DynamoSpecializeGraph" if self.traced else "DynamoExtractCompiledGraph")
            self.traced = True
            try:
                replay = Replay(self.gm, args, self.tensor_positions)
            except CaptureBroken as why:
                self.broken = str(why)
                return self._interpret(args)
            self.replays[key] = replay
        return replay.run(args)

    def _sync_pending_inputs(self, args) -> None:
        pending = None
        for i in self.tensor_positions:
            a = args[i]
            if type(a) is LazyTensor and a._lz_storage.value.node.op != _DEVICE_DATA:
                if pending is None:
                    pending = []
                pending.append(a._lz_storage)
        if pending is not None:
            start = perf_counter()
            eager = EXECUTOR.eager
            EXECUTOR.eager = False
            try:
                EXECUTOR.sync_storages(pending)
            finally:
                EXECUTOR.eager = eager
            metrics.record("DynamoSyncInputExecuteTime", perf_counter() - start)

    def _interpret(self, args):
        metrics.bump("DynamoInterpretedGraph")
        eager = EXECUTOR.eager
        EXECUTOR.eager = False
        try:
            with torch.no_grad():
                outputs = self.gm(*args)
            storages = [a._lz_storage for a in args if type(a) is LazyTensor]
            flat = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
            storages += [o._lz_storage for o in flat if type(o) is LazyTensor]
            EXECUTOR.sync_storages(storages)
        finally:
            EXECUTOR.eager = eager
        return outputs


def bridge(gm: torch.fx.GraphModule, example_inputs) -> GraphBridge:
    """AOTAutograd's forward, backward and inference compiler for ``"lazax"``."""
    return GraphBridge(gm, example_inputs)
