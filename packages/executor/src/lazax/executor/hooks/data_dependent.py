"""Ops whose output shape depends on their input's values, run on the device after one
host read of what fixes the shape (torch on cuda reads it too).

Contract: ``install()`` (at import of ``lazax.executor``) makes lazax handle these ops
itself instead of the CPU fallback:
- ``bincount(input, weights=None, minlength=0)``: torch's checks (an integral, 1-d,
  non-negative input; weights 1-d of the input's length; ``minlength >= 0``) and
  torch's result: ``max(minlength, max(input) + 1)`` bins, int64 counts or the sums of
  the weights (float32 for float32 weights, float64 for any other). An empty input
  gives ``minlength`` int64 zeros, whatever the weights, as on the CPU. The input's
  minimum and maximum are read in one sync; the counting is an ``index_add`` on the
  device, in a program compiled once per distinct length.
- ``nonzero`` (and what torch builds on it: ``torch.where(cond)``, ``argwhere``): one
  program, compiled once per input shape, computes the count and every position
  (``nonzero_static`` padded to the input's size); the count is read (one sync, as on
  cuda) and the result is the first ``count`` positions, a slice of device data (so
  reading something computed from it later does not compute the input again). What
  follows has the count in its shape: a program per distinct count, as for any
  data-dependent shape.
Where a host read is refused (``compile(full_graph=True)``) these raise, naming it.
"""

from __future__ import annotations

import torch

from ..barrier.executor import EXECUTOR
from ..dispatch.special import register_special
from ..ops._arguments import scalar_type_name

__all__ = ["install"]

aten = torch.ops.aten

_NON_NEGATIVE = "bincount only supports 1-d non-negative integral inputs."


def _bincount(args, kwargs):
    x, weights, minlength = (list(args) + [None, 0][len(args) - 1 :])[:3]
    weights = kwargs.get("weights", weights)
    minlength = kwargs.get("minlength", minlength)
    if x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
        raise RuntimeError(f"\"bincount_cpu\" not implemented for '{scalar_type_name(x.dtype)}'")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    if x.dim() == 1 and x.numel() == 0:
        return torch.zeros(minlength, dtype=torch.int64, device=x.device)
    if x.dim() != 1:
        raise RuntimeError(_NON_NEGATIVE)
    # Handlers run below autograd, where composite ops are not decomposed: aten ops only.
    low, high = aten.stack.default(list(aten.aminmax.default(x))).tolist()  # the host read
    if low < 0:
        raise RuntimeError(_NON_NEGATIVE)
    if weights is not None and (weights.dim() != 1 or weights.shape[0] != x.shape[0]):
        raise RuntimeError("weights should be 1-d and have the same length as input")
    length = max(minlength, high + 1)
    if weights is None:
        dtype = torch.int64
        added = torch.ones(x.shape, dtype=dtype, device=x.device)
    else:
        dtype = torch.float32 if weights.dtype == torch.float32 else torch.float64
        added = aten._to_copy.default(weights, dtype=dtype)
    counts = torch.zeros(length, dtype=dtype, device=x.device)
    return aten.index_add_.default(counts, 0, x, added)


def _nonzero(args, kwargs):
    x = args[0]
    positions = aten.nonzero_static.default(x, size=x.numel())
    count = aten.count_nonzero.default(x)
    EXECUTOR.sync_tensors_graph([positions, count])  # one program for both
    length = aten._local_scalar_dense.default(count)  # the host read
    return aten.slice.Tensor(positions, 0, 0, length)


def install() -> None:
    register_special({aten.bincount.default: _bincount, aten.nonzero.default: _nonzero})
