"""``torch_xla.amp.syncfree``: optimizers whose GradScaler step never reads the host.

torch_xla's sync-free ``SGD``, ``Adam`` and ``AdamW`` take the found-inf flag as a device
tensor and skip the update inside the graph, where torch's GradScaler with a plain
optimizer reads the flag on the host (``.item()``) every step. torch's fused optimizers
keep the same contract (``_step_supports_amp_scaling``: torch's GradScaler gives them
``grad_scale`` and ``found_inf`` as device tensors, they unscale and skip in the kernel),
and lazax runs them on the device (docs/mixed_precision.md).

Contract: ``SGD``, ``Adam``, ``AdamW`` are subclasses of ``torch.optim.SGD``, ``Adam``,
``AdamW`` taking torch's arguments (torch_xla's take the same) with ``fused=True``
always: ``fused=False``, or ``foreach=True`` (torch refuses it beside ``fused``), raises
``ValueError``. Values, state, ``state_dict`` and hooks are torch's fused optimizer's;
without a GradScaler a step is a plain step. ``step(closure=None, found_inf=None)``
takes torch_xla's flag too: a device tensor, non-zero to skip the update (on the
device, as torch's GradScaler hands the fused optimizer its own flag); a GradScaler's
flag, when one is stepping, wins.
"""

import torch

__all__ = ["SGD", "Adam", "AdamW"]


def _fused(cls_name: str, kwargs: dict) -> dict:
    """``kwargs`` with ``fused=True``; a choice that would leave the fused path raises."""
    fused = kwargs.get("fused")
    if fused is not None and not fused:
        raise ValueError(
            f"torch_xla.amp.syncfree.{cls_name} is fused: fused=False is not sync-free"
        )
    if kwargs.get("foreach"):
        raise ValueError(f"torch_xla.amp.syncfree.{cls_name} is fused: foreach=True cannot be used")
    return {**kwargs, "fused": True, "foreach": None}


class _TakesFoundInf:
    """``step(closure=None, found_inf=None)``: torch_xla's argument, given to torch's
    fused step as the ``found_inf`` attribute that torch's GradScaler sets."""

    def step(self, closure=None, found_inf=None):
        if found_inf is None or getattr(self, "found_inf", None) is not None:
            return super().step(closure)
        self.found_inf = found_inf.reshape(()).to(torch.float32)  # (GradScaler's shape)
        try:
            return super().step(closure)
        finally:
            del self.found_inf


class SGD(_TakesFoundInf, torch.optim.SGD):
    """``torch.optim.SGD(..., fused=True)``: an inf step is skipped on the device."""

    def __init__(self, params, *args, **kwargs):
        super().__init__(params, *args, **_fused("SGD", kwargs))


class Adam(_TakesFoundInf, torch.optim.Adam):
    """``torch.optim.Adam(..., fused=True)``: an inf step is skipped on the device."""

    def __init__(self, params, *args, **kwargs):
        super().__init__(params, *args, **_fused("Adam", kwargs))


class AdamW(_TakesFoundInf, torch.optim.AdamW):
    """``torch.optim.AdamW(..., fused=True)``: an inf step is skipped on the device."""

    def __init__(self, params, *args, **kwargs):
        super().__init__(params, *args, **_fused("AdamW", kwargs))
