"""``torch_xla.amp.GradScaler``: torch's ``torch.amp.GradScaler`` on lazax's device.

Contract: ``GradScaler(init_scale=2.**16, growth_factor=2.0, backoff_factor=0.5,
growth_interval=2000, enabled=True, use_zero_grad=False)`` (torch_xla's signature, device
last and keyword-only: ``device=None`` is lazax's device, ``"xla"`` means it too) is a
``torch.amp.GradScaler`` subclass with nothing else changed: the inf check, unscaling
and the scale update run on the device. With an optimizer whose step takes the found-inf
flag on the device (``torch_xla.amp.syncfree``'s, torch's ``fused=True`` ones), a step
that found an inf is skipped inside the graph and ``scaler.step`` reads nothing on the
host; with any other optimizer torch's GradScaler reads one flag per step.
``use_zero_grad=True`` (torch_xla's alternative skip, zeroing the gradients) has no
lazax path: it warns and is ignored.
"""

import warnings

import torch

from ._device import device_type

__all__ = ["GradScaler"]


class GradScaler(torch.amp.GradScaler):
    """torch's GradScaler whose device is lazax's unless ``device=`` says otherwise."""

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
        use_zero_grad: bool = False,
        *,
        device=None,
    ) -> None:
        if use_zero_grad:
            warnings.warn(
                "torch_xla.amp.GradScaler(use_zero_grad=True) is ignored on lazax: a step "
                "that found an inf is skipped (on the device with torch_xla.amp.syncfree "
                "or fused optimizers), gradients are not zeroed",
                UserWarning,
                stacklevel=2,
            )
        super().__init__(
            device_type(device),
            init_scale=init_scale,
            growth_factor=growth_factor,
            backoff_factor=backoff_factor,
            growth_interval=growth_interval,
            enabled=enabled,
        )
