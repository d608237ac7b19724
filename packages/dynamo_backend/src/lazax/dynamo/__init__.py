"""lazax.dynamo: ``torch.compile(model, backend="lazax")``.

The backend is ``aot_autograd(fw_compiler=bridge)``: dynamo captures the Python program,
AOTAutograd splits it into a forward and a backward FX graph (inference: one graph), and
each graph reaches ``bridge``, which traces it once through lazax tensors and afterwards
executes it by hash (see ``_bridge``; the capture is ``lazax.executor.Replay``). The name
``"lazax"`` is registered on import and through the ``torch_dynamo_backends`` entry point, so
``torch.compile(m, backend="lazax")`` works without importing anything.

Counters: ``DynamoExtractCompiledGraph`` (FX graphs traced), ``DynamoSpecializeGraph``
(further specialisations: a new shape or layout of a traced graph),
``DynamoRecompileAfterEviction``, ``DynamoSplitGraph`` (graphs split around an op that
cannot be replayed, once per signature), ``DynamoInterpretedGraph`` (calls of graphs
that could not be captured); timings ``DynamoSyncInputExecuteTime``, ``CompileTime``,
``ExecuteTime``.
"""

from __future__ import annotations

from torch._dynamo import list_backends, register_backend
from torch._dynamo.backends.common import aot_autograd

from ._bridge import GraphBridge, bridge
from ._integration import install, refuse_traced_backward_past_hooks
from ._version import __version__

install()

# Inference graphs (an optimizer step under torch.compile) keep their input mutations:
# the bridge writes the new values back itself, and donates the old buffers.
_aot_backend = aot_autograd(fw_compiler=bridge, keep_inference_input_mutations=True)


def lazax_backend(gm, example_inputs, **kwargs):
    """The ``"lazax"`` backend: AOTAutograd over ``bridge``, after refusing a traced
    ``backward()`` that would skip gradient hooks."""
    refuse_traced_backward_past_hooks(gm, example_inputs)
    return _aot_backend(gm, example_inputs, **kwargs)


# Installed as a distribution, torch finds "lazax" through the entry point and registers
# it itself when first asked (registering here too would be a duplicate).
if "lazax" not in list_backends(exclude_tags=()):
    register_backend(lazax_backend, name="lazax")

__all__ = ["GraphBridge", "__version__", "bridge", "lazax_backend"]
