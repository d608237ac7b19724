"""Which torch device type ``torch_xla.amp`` hands to torch: lazax's.

Contract: ``device_type(device)`` is ``torch.device(device).type`` (a ``torch.device``,
``"xla"``, ``"xla:0"``, ``"cpu"``...), except that ``"xla"`` means lazax's device when
lazax's device is named otherwise (``torch_xla`` imported after lazax keeps the name
``lazax``): torch's own ``XLA`` device type has no lazax tensors and no autocast here.
``None`` is lazax's device type.
"""

import torch

import lazax.modes as lx

__all__ = ["device_type"]


def device_type(device=None) -> str:
    """The device type torch's autocast or GradScaler should get for ``device``."""
    lazax_type = lx.device_type()
    if device is None:
        return lazax_type
    kind = torch.device(device).type
    return lazax_type if kind == "xla" else kind
