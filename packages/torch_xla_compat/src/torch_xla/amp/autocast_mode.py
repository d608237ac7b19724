"""``torch_xla.amp.autocast``: torch's ``torch.autocast`` on lazax's device.

Contract: ``autocast(device, enabled=True, dtype=None, cache_enabled=None)`` is
``torch.autocast(device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)``
(a subclass: a context manager and a decorator, ``isinstance(a, torch.autocast)``), where
``device_type`` is ``torch.device(device).type`` with ``"xla"`` meaning lazax's device
(``_device``). ``dtype=None`` is the device's autocast dtype: bfloat16 on lazax (what
torch_xla uses on TPU; torch_xla picks float16 on CUDA, lazax keeps bfloat16 on every
platform, pass ``dtype=torch.float16`` for it). Which ops run in the low precision is
lazax's autocast policy: docs/mixed_precision.md.
"""

import torch

from ._device import device_type

__all__ = ["autocast"]


class autocast(torch.autocast):  # noqa: N801 (torch_xla's name)
    """``with torch_xla.amp.autocast(torch_xla.device()):`` torch's autocast on the device."""

    def __init__(self, device, enabled: bool = True, dtype=None, cache_enabled=None):
        super().__init__(
            device_type(device), dtype=dtype, enabled=enabled, cache_enabled=cache_enabled
        )
