"""The two ops ``torch.amp.GradScaler`` runs on the device, composed of lazax ops.

Contract (``AMP_HANDLERS``, merged into the tensor layer's special ops):
- ``_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)``: every
  gradient multiplied by ``inv_scale`` (in float32, cast back), and ``found_inf`` set
  to 1.0 if any gradient holds an inf or a nan (left as it was otherwise), as torch's
  kernels do.
- ``_amp_update_scale_(scale, growth_tracker, found_inf, growth_factor,
  backoff_factor, growth_interval)``: torch's update: after an inf, the scale times
  ``backoff_factor`` and the tracker reset; after ``growth_interval`` clean steps in a
  row, the scale times ``growth_factor`` (if that stays finite) and the tracker reset;
  otherwise the tracker counts up.
Both stay on the device: no value is read on the host, and in eager mode each is one
sync of the tensors it writes.
"""

from __future__ import annotations

import torch

from ..barrier.executor import EXECUTOR

__all__ = ["AMP_HANDLERS", "composed"]

aten = torch.ops.aten


def composed(write):
    """A special-op handler from ``write(*args, **kwargs) -> (written tensors,
    result)``, an op composed of lazax ops: traced lazily, and in eager mode run as one
    graph of everything it wrote (the batch-norm handler and these use it)."""

    def handler(args, kwargs):
        eager = EXECUTOR.eager
        EXECUTOR.eager = False
        try:
            written, result = write(*args, **kwargs)
        finally:
            EXECUTOR.eager = eager
        if eager and written:
            EXECUTOR.sync_tensors_graph(written, wait=False, sync_ltc_data=False, hold_manual=True)
        return result

    return handler


def _unscale(grads, found_inf, inv_scale):
    if not grads:
        return [], None
    clean = aten.stack([aten.all(aten.isfinite(g)) for g in grads])
    aten.copy_(found_inf, aten.where.ScalarSelf(aten.logical_not(aten.all(clean)), 1.0, found_inf))
    aten._foreach_mul_.Tensor(grads, inv_scale)
    return [*grads, found_inf], None


def _update_scale(scale, growth_tracker, found_inf, growth_factor, backoff_factor, interval):
    found = aten.gt.Scalar(found_inf, 0)
    successful = aten.add.Scalar(growth_tracker, 1)
    grow = aten.logical_and(aten.logical_not(found), aten.eq.Scalar(successful, interval))
    grown = aten.mul.Scalar(scale, growth_factor)
    grow_scale = aten.logical_and(grow, aten.isfinite(grown))
    kept = aten.where.self(grow_scale, grown, scale)
    new_scale = aten.where.self(found, aten.mul.Scalar(scale, backoff_factor), kept)
    reset = aten.logical_or(found, grow)
    new_tracker = aten.where.self(reset, aten.zeros_like(successful), successful)
    aten.copy_(scale, new_scale)
    aten.copy_(growth_tracker, new_tracker)
    return [scale, growth_tracker], scale


AMP_HANDLERS = {
    aten._amp_foreach_non_finite_check_and_unscale_.default: composed(_unscale),
    aten._amp_update_scale_.default: composed(_update_scale),
}
