"""Automatic layer loops: a model's own ``for layer in self.layers`` as one XLA loop.

Contract: after ``install()``, iterating an ``nn.ModuleList`` of two or more modules of
one type while ``EXECUTOR.scan_layers`` is on (``lx.compile(step, scan_layers=True)``,
or ``LAZAX_SCAN_LAYERS=1``), outside dynamo's tracing, hands out the same modules, each
with its ``forward`` replaced until the iteration moves on:
- Layer 0's call ``layer(x, *args, **kwargs)`` (``x`` a lazax tensor) prepares the loop
  over every layer of the list (``scan_layers.prepare_loop``, carrying every layer's
  output) and returns layer 0's output, read from the loop. When the layers cannot loop
  (they differ, write buffers in place, read the host, return more tensors than ``x``),
  or an argument is not a tensor, number, string, None or dtype (a KV cache object),
  every layer runs as written.
- Layer ``i``'s call returns layer ``i``'s output from the loop only if it is called in
  order, with the tensor the previous call returned (unwritten since) and the very
  arguments layer 0 got (the same tensors, unwritten; equal other values). Any other
  call (a layer skipped or called twice, something done to ``x`` in between, another
  mask) runs that layer and every later one as written: the outputs already handed out
  are what those layers compute, so the result is the unrolled loop's either way.
- Counters: ``AutoLayerLoop`` (loops formed), ``AutoLayerLoopUnrolled`` (loops that ran
  as written from some layer on).
Where it stops, and why: it sees only loops that iterate a ``ModuleList`` and call each
element once with the previous output; a layer that returns other tensors besides
(attention weights) or takes per-layer state (a KV cache, whose writes are Python side
effects) stays unrolled, as does everything under ``torch.compile`` (dynamo unrolls the
loop before lazax sees it; call ``lx.scan_layers`` there). A loop left early (``break``)
has computed every layer: correct, but the work past the break is wasted. Random ops
draw their seeds for every layer when the loop forms, so if it then runs unrolled from
some layer on, those layers draw other (equally random) values than an unrolled run.
"""

from __future__ import annotations

import torch

from .. import metrics
from ..barrier.executor import EXECUTOR
from ..state.values import ir_value
from ..tensor.lazy import LazyTensor
from .scan_layers import prepare_loop

__all__ = ["install"]

_SIMPLE = (type(None), bool, int, float, str, torch.dtype)


class _AutoLoop:
    """One iteration of a ModuleList: the loop it formed, and what the next call must
    look like to be served from it."""

    def __init__(self, layers: list) -> None:
        self.layers = layers
        self.unrolled = False
        self.outputs = None  # every layer's output, stacked
        self.template = None  # (tuple or list, the other elements) or None
        self.next = 0
        self.last = None  # (the tensor handed out, its IR value then)
        self.arguments = None  # (leaves, their IR values or values, the tree)
        self.busy = False  # inside a call: a call of a layer now is its own forward

    def release(self) -> None:
        self.outputs = self.last = self.arguments = None

    def _unroll(self) -> None:
        if self.outputs is not None and not self.unrolled:
            metrics.bump("AutoLayerLoopUnrolled")
        self.unrolled = True

    def _arguments(self, args: tuple, kwargs: dict):
        leaves, tree = torch.utils._pytree.tree_flatten((args, kwargs))
        seen = tuple(ir_value(v) if type(v) is LazyTensor else v for v in leaves)
        return leaves, seen, tree

    def _same_arguments(self, args: tuple, kwargs: dict) -> bool:
        leaves, seen, tree = self._arguments(args, kwargs)
        before_leaves, before_seen, before_tree = self.arguments
        if tree != before_tree or len(leaves) != len(before_leaves):
            return False
        for now, then, now_seen, then_seen in zip(leaves, before_leaves, seen, before_seen):
            if isinstance(now, torch.Tensor):
                if now is not then or now_seen is not then_seen:
                    return False
            elif type(now) is not type(then) or now != then:
                return False
        return True

    def _hand_out(self, i: int):
        h = self.outputs[i]
        self.last = (h, ir_value(h))
        self.next = i + 1
        if self.template is None:
            return h
        kind, rest = self.template
        return kind((h, *rest))

    def _start(self, x, args: tuple, kwargs: dict):
        leaves, _, _ = self._arguments(args, kwargs)
        if type(x) is not LazyTensor or not all(
            isinstance(v, torch.Tensor) or type(v) in _SIMPLE for v in leaves
        ):
            return None
        try:
            loop = prepare_loop(self.layers, x, args, kwargs, checkpoint=False, carries=True)
        except ValueError:
            return None
        if loop.output is not None and any(isinstance(v, torch.Tensor) for v in loop.output[1]):
            return None
        metrics.bump("AutoLayerLoop")
        self.template = loop.output
        self.outputs = loop.run(x)
        self.arguments = self._arguments(args, kwargs)
        return self._hand_out(0)

    def call(self, i: int, layer, args: tuple, kwargs: dict):
        if self.outputs is None and i > 0:
            self.unrolled = True  # released, or never formed: the layers as written
        if not self.unrolled and i == self.next and args:
            if i == 0:
                out = self._start(args[0], args[1:], kwargs)
                if out is not None:
                    return out
            else:
                x = args[0]
                h, value = self.last
                if x is h and ir_value(x) is value and self._same_arguments(args[1:], kwargs):
                    return self._hand_out(i)
        self._unroll()
        return type(layer).forward(layer, *args, **kwargs)  # its hooks ran already


def _intercepting(loop: _AutoLoop, i: int, layer):
    def forward(*args, **kwargs):
        if loop.busy:  # the loop traces this layer: that call is the layer's own
            return type(layer).forward(layer, *args, **kwargs)
        loop.busy = True
        try:
            return loop.call(i, layer, args, kwargs)
        finally:
            loop.busy = False

    return forward


def _loops(layers: list):
    loop = _AutoLoop(layers)
    try:
        for i, layer in enumerate(layers):
            layer.forward = _intercepting(loop, i, layer)
            try:
                yield layer
            finally:
                del layer.forward
    finally:
        # Pending tensors held past the iteration would be taken as outputs of the
        # step's graph (a program that differs by what happens to be alive).
        loop.release()


_ORIGINAL_ITER = torch.nn.ModuleList.__iter__


def _iter(self):
    if not EXECUTOR.scan_layers or torch.compiler.is_compiling():
        return _ORIGINAL_ITER(self)
    layers = list(self._modules.values())
    if (
        len(layers) < 2
        or len({type(m) for m in layers}) != 1
        or any("forward" in m.__dict__ for m in layers)
    ):
        return iter(layers)
    return _loops(layers)


def install() -> None:
    if torch.nn.ModuleList.__iter__ is not _iter:
        torch.nn.ModuleList.__iter__ = _iter
