"""``torch_xla.core.dynamo_bridge``: what torch's own ``"openxla"`` backend calls.

torch registers ``torch.compile(backend="openxla")`` itself
(``torch._dynamo.backends.torchxla``): AOTAutograd hands each forward and backward FX
graph to ``extract_compiled_graph(graph, args)`` in this module, with the first call's
arguments, and calls what it returns. Here that is lazax's dynamo bridge (the public
``lazax.dynamo.bridge``, the ``"lazax"`` backend's compiler): the graph is traced once
through lazax tensors and run by hash afterwards, exactly as under ``backend="lazax"``.
"""

from __future__ import annotations

from lazax.dynamo import bridge

__all__ = ["extract_compiled_graph"]


def extract_compiled_graph(graph, args):
    """The compiled form of ``graph`` (callable with its inputs, unboxed or boxed)."""
    return bridge(graph, list(args))
