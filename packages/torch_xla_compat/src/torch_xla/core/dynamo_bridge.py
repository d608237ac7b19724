"""``torch_xla.core.dynamo_bridge``: what torch's own ``"openxla"`` backend calls.

torch registers ``torch.compile(backend="openxla")`` itself
(``torch._dynamo.backends.torchxla``): AOTAutograd hands each forward and backward FX
graph to ``extract_compiled_graph(graph, args)`` in this module, with the first call's
arguments, and calls what it returns. Here that is lazax's dynamo bridge (the public
``lazax.dynamo.bridge``, the ``"lazax"`` backend's compiler): the graph is traced once
through lazax tensors and run by hash afterwards, exactly as under ``backend="lazax"``.

As torch_xla's bridge does, each tensor argument that is not on the XLA device is
reported with a ``UserWarning`` ("Found tensor with shape ... on cpu. Please move all
tensors to xla device ..."); a graph none of whose tensors is on the device runs as the
plain FX graph (on the CPU, lazax not involved), and a graph whose tensors (with
dimensions) lie on the device and on the CPU raises ``RuntimeError`` ("found two
different devices"), before anything runs.
"""

from __future__ import annotations

import warnings

import torch

from lazax.dynamo import bridge

from .._api import DEVICE_TYPE

__all__ = ["extract_compiled_graph"]


def extract_compiled_graph(graph, args):
    """The compiled form of ``graph`` (callable with its inputs, unboxed or boxed)."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    elsewhere = [t for t in tensors if t.device.type != DEVICE_TYPE]
    for t in elsewhere:
        warnings.warn(
            f"Found tensor with shape {t.size()} on {t.device}. "
            "Please move all tensors to xla device to execute on XLA device.",
            stacklevel=2,
        )
    if tensors and len(elsewhere) == len(tensors):
        return graph
    # torch lets a 0-dim CPU tensor join device tensors (a scalar), nothing larger.
    mixed = [t for t in elsewhere if t.dim() > 0]
    if mixed:
        here = next(t for t in tensors if t.device.type == DEVICE_TYPE)
        raise RuntimeError(
            "Expected all tensors of the compiled graph on one device, but found two "
            f"different devices: {here.device} and {mixed[0].device}. Move the inputs "
            "and the module's parameters to the device."
        )
    return bridge(graph, list(args))
