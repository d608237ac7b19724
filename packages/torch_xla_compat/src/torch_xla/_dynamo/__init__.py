"""``torch_xla._dynamo``: the ``torch_dynamo_backends`` entry point ``openxla`` (the
``"lazax"`` backend) and ``dynamo_backend2``.

torch ships its own ``"openxla"`` registration, which wins over an entry point of the
same name and reaches lazax through ``torch_xla.core.dynamo_bridge``; this entry point
serves a torch without it. Either way the compiler is lazax's.
"""

from __future__ import annotations

import torch._dynamo

from . import dynamo_backend2

__all__ = ["dynamo_backend2", "openxla_backend"]


def openxla_backend(gm, example_inputs, **kwargs):
    """``torch.compile(backend="openxla")``: the ``"lazax"`` backend."""
    return torch._dynamo.lookup_backend("lazax")(gm, example_inputs, **kwargs)
