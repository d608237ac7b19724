"""``torch_xla.amp``: automatic mixed precision on lazax's device, with torch's own tools.

Contract: ``autocast(device, enabled=True, dtype=None, cache_enabled=None)`` is
``torch.autocast`` on lazax's device (bfloat16 unless ``dtype`` says otherwise;
``autocast_mode``); ``GradScaler(init_scale=2.**16, ..., use_zero_grad=False)`` is
``torch.amp.GradScaler`` on lazax's device (``grad_scaler``); ``syncfree.SGD``, ``Adam``,
``AdamW`` are torch's optimizers with ``fused=True``, whose step with a GradScaler skips
an inf step on the device and reads nothing on the host (``syncfree``).

    import torch_xla
    from torch_xla.amp import GradScaler, autocast, syncfree

    scaler = GradScaler()
    optimizer = syncfree.AdamW(model.parameters(), lr=1e-3)
    with autocast(torch_xla.device(), dtype=torch.float16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
"""

from . import syncfree
from .autocast_mode import autocast
from .grad_scaler import GradScaler

__all__ = ["GradScaler", "autocast", "syncfree"]
