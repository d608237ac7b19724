"""What makes layers one loop: the same structure, and stand-ins to trace them on.

Contract:
- ``first_difference(layers)`` raises ``ValueError`` naming the first layer whose
  module types, parameter or buffer names, shapes or dtypes differ from layer 0's, and
  how; it returns None for identical layers.
- ``placeholders(layer, x, leaves, device)`` -> ``(stand_ins, x_in, leaves_in)``: lazax
  tensors of the right specs over device-data leaves without data, for each parameter
  and buffer of ``layer`` (by name), for ``x`` and for each tensor in ``leaves``
  (anything else in ``leaves`` is passed through). A graph traced on them names its
  inputs by these leaves; nothing may run them.
"""

from __future__ import annotations

import torch

from ..state.dtypes import dtype_name
from .functions import stand_in

__all__ = ["first_difference", "placeholders"]


def _describe(layer: torch.nn.Module) -> dict:
    out = {f"module {name or '(the layer)'}": type(m).__name__ for name, m in layer.named_modules()}
    for kind, items in (("parameter", layer.named_parameters()), ("buffer", layer.named_buffers())):
        for name, t in items:
            out[f"{kind} {name}"] = f"{dtype_name(t.dtype)}{list(t.shape)}"
    return out


def first_difference(layers) -> None:
    reference = _describe(layers[0])
    for i, layer in enumerate(layers[1:], start=1):
        got = _describe(layer)
        if got == reference:
            continue
        for key in list(reference) + [k for k in got if k not in reference]:
            mine, theirs = got.get(key, "absent"), reference.get(key, "absent")
            if mine != theirs:
                raise ValueError(
                    f"lazax.scan_layers: layer {i} differs from layer 0: its {key} is "
                    f"{mine}, layer 0's is {theirs}; only structurally identical layers "
                    f"run as one loop"
                )


def placeholders(layer: torch.nn.Module, x: torch.Tensor, leaves: list, device: int):
    state = dict(layer.named_parameters())
    state.update(layer.named_buffers())
    stand_ins = {name: stand_in(t, device) for name, t in state.items()}
    leaves_in = [stand_in(e, device) if isinstance(e, torch.Tensor) else e for e in leaves]
    return stand_ins, stand_in(x, device), leaves_in
