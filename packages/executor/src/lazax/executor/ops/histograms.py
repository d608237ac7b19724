"""Histograms: ``histc`` (floating and, as on CUDA, integer inputs).

Contract:
- The range is ``[min, max]``; ``min == max`` takes the data's own extremes (and if those
  are equal too, ``[v - 1, v + 1]``), computed on the device: torch reads them on the
  host, lazax keeps the op in the program. A range that is not finite is torch's
  ``RuntimeError``, raised when the program's checks are read (``ctx.check``).
  Elements outside the range (and NaN) are not counted; the last bin includes ``max``.
- Floating inputs follow torch's CPU kernel: the range's ends are rounded to the input's
  dtype, and ``x`` goes to bin ``trunc((x - min) * bins / (max - min))`` (``bins - 1``
  for ``x == max``), each step rounded to the input's dtype as the CPU kernel's
  arithmetic in that type rounds it (bfloat16 and float16 too). Counts are exact up to
  the dtype's last exact integer; past it (256 in bfloat16) the CPU kernel, which adds
  one at a time in the input's dtype on each thread, loses counts that lazax keeps.
- Integer inputs have no CPU kernel; they follow CUDA's: ``min``/``max`` truncated to
  integers, bin ``(x - min) * bins // (max - min)`` in exact int64 arithmetic (what a
  float computation of the same data gives, without its rounding). Counts are in the
  input's dtype, as torch's meta kernel says.
- Bool inputs are refused with the CPU kernel's error (neither back end has one).

``bincount``, whose length is the data's, is not a rule: ``hooks.data_dependent`` reads
that length from the device and counts with ``index_add``.
"""

from __future__ import annotations

import jax.numpy as jnp
import torch

from ._arguments import argument_check
from ._registry import lowering

aten = torch.ops.aten


@argument_check(aten.histc.default)
def check_histc(x, bins=100, min=0, max=0):
    if x.dtype == torch.bool:
        raise RuntimeError("\"linspace_cpu\" not implemented for 'Bool'")


def _range(x, lo, hi, dtype):
    """torch's outer edges as ``dtype`` arrays: the given ones, else the data's."""
    lo, hi = jnp.asarray(lo).astype(dtype), jnp.asarray(hi).astype(dtype)
    if x.size:
        use_data = lo == hi
        lo = jnp.where(use_data, jnp.min(x).astype(dtype), lo)
        hi = jnp.where(use_data, jnp.max(x).astype(dtype), hi)
    same = lo == hi
    return jnp.where(same, lo - 1, lo), jnp.where(same, hi + 1, hi)


def _check_finite(ctx, lo, hi):
    bad = ~(jnp.isfinite(lo) & jnp.isfinite(hi))
    ctx.check(
        bad.reshape(1), None, "RuntimeError", "torch.histc: range of [min, max] is not finite"
    )


def _count(bin_index, valid, bins: int, dtype):
    # Out-of-range elements go to an index past the end, which the scatter drops.
    target = jnp.where(valid, bin_index, bins)
    counts = jnp.zeros((bins,), jnp.int64).at[target.reshape(-1)].add(1, mode="drop")
    return counts.astype(dtype)


@lowering(aten.histc.default, checked=True)
def histc(ctx, x, bins=100, min=0, max=0):
    if jnp.issubdtype(x.dtype, jnp.integer):
        return _histc_integer(ctx, x, bins, min, max)
    dtype = x.dtype
    # torch picks the range in double, then rounds its ends to the input's dtype.
    lo, hi = _range(x.astype(jnp.float64), min, max, jnp.float64)
    _check_finite(ctx, lo, hi)
    math = jnp.promote_types(dtype, jnp.float32)

    def rounded(v):  # one arithmetic step of the CPU kernel, in the input's dtype
        return v.astype(dtype).astype(math)

    lo, hi = rounded(lo), rounded(hi)
    values = x.reshape(-1).astype(math)
    valid = (values >= lo) & (values <= hi)
    position = rounded(rounded(rounded(values - lo) * bins) / rounded(hi - lo))
    index = jnp.clip(jnp.trunc(jnp.where(valid, position, 0)), 0, bins - 1).astype(jnp.int64)
    return _count(index, valid, bins, ctx.dtype)


def _histc_integer(ctx, x, bins, min, max):
    # CUDA's bounds: the Scalars truncated to the input's accumulate type (int64).
    lo = jnp.trunc(jnp.asarray(min)).astype(jnp.int64)
    hi = jnp.trunc(jnp.asarray(max)).astype(jnp.int64)
    values = x.reshape(-1).astype(jnp.int64)
    lo, hi = _range(values, lo, hi, jnp.int64)
    valid = (values >= lo) & (values <= hi)
    span = jnp.maximum(hi - lo, 1)
    index = jnp.minimum((jnp.where(valid, values - lo, 0) * bins) // span, bins - 1)
    return _count(index, valid, bins, ctx.dtype)
