"""``torch_xla._dynamo.dynamo_backend2``: torch_xla's second dynamo backend.

Contract: ``dynamo_backend(gm, example_inputs)`` is a ``torch.compile`` backend, the
``"lazax"`` one (``lazax.dynamo.lazax_backend``). In torch_xla it is an experimental
backend that lowers the FX graph through JAX; lazax's backend already does, so both of
torch_xla's backends are lazax's here. As in torch_xla, it is not registered under a
name: pass the function, ``torch.compile(f, backend=dynamo_backend)``.
"""

from __future__ import annotations

from lazax.dynamo import lazax_backend

__all__ = ["dynamo_backend"]


def dynamo_backend(gm, example_inputs, **kwargs):
    """``torch.compile`` backend: the FX graph compiled by lazax's backend."""
    return lazax_backend(gm, example_inputs, **kwargs)
