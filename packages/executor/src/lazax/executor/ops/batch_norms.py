"""The functional batch-norm form of torch's traced graphs (dynamo, AOT, export).

Contract:
- ``_batch_norm_with_update_functional(input, weight, bias, running_mean, running_var,
  momentum, eps)``: what functionalization makes of ``_batch_norm_with_update``. The
  training-mode batch norm of ``_native_batch_norm_legit_functional`` (``nn.py``: batch
  statistics, biased variance to normalize, unbiased to update the running variance),
  with the CPU kernel's empty ``uint8`` "reserve" as the fourth output and the new
  running statistics as the fifth and sixth.
- The in-place forms (``_native_batch_norm_legit``, ``_batch_norm_with_update``,
  ``_batch_norm_no_update``) and ``batch_norm_backward`` are handled by the tensor layer
  (``dispatch.special``), which writes the running statistics back.
"""

from __future__ import annotations

import jax.numpy as jnp
import torch

from ._registry import lowering
from .nn import batch_norm_functional

aten = torch.ops.aten


@lowering(aten._batch_norm_with_update_functional.default)
def batch_norm_with_update_functional(
    ctx, x, weight, bias, running_mean, running_var, momentum, eps
):
    out, mean, invstd, new_mean, new_var = batch_norm_functional(
        ctx, x, weight, bias, running_mean, running_var, True, momentum, eps
    )
    reserve = jnp.zeros(ctx.out[3][0], ctx.out[3][1])
    return out, mean, invstd, reserve, new_mean, new_var
