"""Distances and vector products: ``dist``, ``renorm``, ``_cdist_forward``/
``_cdist_backward``/``_euclidean_dist`` (``torch.cdist`` and its gradient) and
``linalg_cross``.

Contract (see ``_registry``): formulas follow torch's CPU kernels, so results agree to
the conformance tolerances:

- ``dist`` is ``norm(self - other, p)``: the difference rounded to the promoted dtype,
  the norm accumulated in float32 for half types (``reductions._vector_norm``, which
  picks 2/inf/-inf/general at run time for a lifted ``p``).
- ``renorm`` scales each slice along ``dim`` whose p-norm exceeds ``maxnorm`` by
  ``maxnorm / (norm + 1e-7)``, the factor computed in the accumulation dtype and
  rounded to the input's dtype before the product (torch's kernel).
- ``_cdist_forward`` takes torch's matrix-product path (``_euclidean_dist``: ``|x|^2 -
  2 x.y + |y|^2`` through one matmul, clamped at 0) for ``p == 2`` with
  ``compute_mode`` 1, or 0/None with more than 25 rows; otherwise the direct
  ``sum |x - y|^p`` (``p`` 0, 1, 2, inf or general). ``_cdist_backward`` is torch's
  per-``p`` subgradient (0 where the distance is 0), summed over ``x2``'s rows, for
  ``x1`` broadcast to the batch.
- ``linalg_cross`` rounds each product and difference to the dtype (torch's scalar
  kernel on bfloat16).

CPU-kernel checks the meta kernels skip (dtypes) are registered with the rules.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ._arguments import argument_check, scalar_type_name, type_meta_name
from ._promotion import opmath, result_type, round_to, to_dtype
from ._registry import lowering
from .reductions import _vector_norm

aten = torch.ops.aten


@lowering(aten.dist.default)
def dist(ctx, self, other, p=2):
    """``norm(self - other, p)`` over every element of the broadcast difference."""
    dtype = result_type(self, other)
    compute = opmath(dtype)
    a, b = to_dtype(to_dtype(self, dtype), compute), to_dtype(to_dtype(other, dtype), compute)
    diff = round_to(a - b, dtype)
    return _vector_norm(ctx, diff, p, None).reshape(ctx.shape)


@lowering(aten.renorm.default)
def renorm(ctx, self, p, dim, maxnorm):
    """Each slice along ``dim`` rescaled to p-norm at most ``maxnorm``."""
    dim %= self.ndim
    n = self.shape[dim]
    rest = math.prod(self.shape) // n if n else 0
    rows = jnp.moveaxis(self, dim, 0).reshape(n, rest)
    shape = [1] * self.ndim
    shape[dim] = n
    norm = _vector_norm(ctx, rows, p, [1]).reshape(shape)
    acc = norm.dtype
    top = to_dtype(maxnorm, acc)
    factor = jnp.where(norm > top, top / (norm + np.asarray(1e-7, acc)), jnp.ones((), acc))
    factor = round_to(factor, self.dtype)
    return self.astype(opmath(self.dtype)) * factor


# -- cdist ------------------------------------------------------------------------------


def _uses_mm(p, compute_mode, r1, r2) -> bool:
    """torch's choice of the matrix-product path for Euclidean distances."""
    mode = 0 if compute_mode is None else compute_mode
    return p == 2 and (mode == 1 or (mode == 0 and (r1 > 25 or r2 > 25)))


def _euclidean(x1, x2, dtype):
    """torch's ``_euclidean_dist``: ``[-2x, |x|^2, 1] . [y, 1, |y|^2]``, clamped at 0,
    then sqrt; half types round each step as torch's kernels do."""
    acc = opmath(dtype)
    x1, x2 = x1.astype(acc), x2.astype(acc)

    def sq_norm(x):
        return round_to(jnp.sum(round_to(x * x, dtype), -1, keepdims=True), dtype)

    n1, n2 = sq_norm(x1), sq_norm(x2)
    left = jnp.concatenate([-2 * x1, n1, jnp.ones_like(n1)], -1)
    right = jnp.concatenate([x2, jnp.ones_like(n2), n2], -1)
    product = jnp.matmul(left, jnp.swapaxes(right, -1, -2), precision=lax.Precision.HIGHEST)
    return jnp.sqrt(jnp.maximum(round_to(product, dtype), 0))


def _direct(x1, x2, p):
    """torch's direct cdist kernel: the p-norm of each row pair's difference."""
    diff = jnp.abs(x1[..., :, None, :] - x2[..., None, :, :])
    if p == 0:
        return jnp.sum(jnp.minimum(jnp.ceil(diff), 1), -1)
    if p == 1:
        return jnp.sum(diff, -1)
    if p == 2:
        return jnp.sqrt(jnp.sum(diff * diff, -1))
    if math.isinf(p):
        return jnp.max(diff, -1)
    return jnp.sum(diff**p, -1) ** (1.0 / p)


@lowering(aten._cdist_forward.default)
def cdist_forward(ctx, x1, x2, p, compute_mode):
    """Pairwise p-norm distances between the rows of ``x1`` and ``x2`` (batched,
    broadcasting the batch dimensions)."""
    shape = ctx.shape
    if math.prod(shape) == 0 or x1.shape[-1] == 0:
        return jnp.zeros(shape, ctx.dtype)
    batch = tuple(shape[:-2])
    x1 = jnp.broadcast_to(x1, batch + x1.shape[-2:])
    x2 = jnp.broadcast_to(x2, batch + x2.shape[-2:])
    if _uses_mm(p, compute_mode, x1.shape[-2], x2.shape[-2]):
        return _euclidean(x1, x2, ctx.dtype)
    return _direct(x1, x2, p)


@lowering(aten._euclidean_dist.default)
def euclidean_dist(ctx, x1, x2):
    """Euclidean distances through one matrix product (``cdist``'s fast path)."""
    return _euclidean(x1, x2, ctx.dtype)


@lowering(aten._cdist_backward.default)
def cdist_backward(ctx, grad, x1, x2, p, cdist):
    """The gradient of ``_cdist_forward`` for ``x1`` (broadcast to the batch): torch's
    per-``p`` terms, summed over the rows of ``x2``."""
    shape = ctx.shape
    r2 = x2.shape[-2]
    if math.prod(shape) == 0 or r2 == 0 or p == 0 or _batch_size(x1, x2) == 0:
        return jnp.zeros(shape, ctx.dtype)  # x1's own shape when nothing broadcasts
    batch = tuple(shape[:-2])
    r1 = shape[-2]
    x1 = jnp.broadcast_to(x1, shape)
    x2 = jnp.broadcast_to(x2, batch + x2.shape[-2:])
    g = grad.reshape(batch + (r1, r2))[..., None]
    d = cdist.reshape(batch + (r1, r2))[..., None]
    diff = x1[..., :, None, :] - x2[..., None, :, :]
    zero = jnp.zeros((), diff.dtype)
    if p == 1:
        terms = g * jnp.sign(diff)
    elif p < 2:
        value = jnp.sign(diff) * jnp.abs(diff) ** (p - 1) * g / d ** (p - 1)
        terms = jnp.where((d == 0) | ((diff == 0) & (p < 1)), zero, value)
    elif p == 2:
        terms = jnp.where(d == 0, zero, g * diff / d)
    elif math.isinf(p):
        tie = 1 - jnp.minimum(1, jnp.ceil(jnp.abs(jnp.abs(diff) - d)))
        terms = g * jnp.sign(diff) * tie
    else:
        value = diff * jnp.abs(diff) ** (p - 2) * g / d ** (p - 1)
        terms = jnp.where(d == 0, zero, value)
    return jnp.sum(terms, -2)


def _batch_size(x1, x2) -> int:
    return math.prod(torch.broadcast_shapes(tuple(x1.shape[:-2]), tuple(x2.shape[:-2])))


def _not_implemented(kernel: str, dtype) -> NotImplementedError:
    return NotImplementedError(f"\"{kernel}\" not implemented for '{scalar_type_name(dtype)}'")


_CDIST_DTYPES = (torch.float32, torch.float64)


def _same_dtype_for_mm(x1, x2) -> None:
    if x1.dtype != x2.dtype:
        raise RuntimeError(
            "expected m1 and m2 to have the same dtype, but got: "
            f"{type_meta_name(x1.dtype)} != {type_meta_name(x2.dtype)}"
        )


@argument_check(aten._cdist_forward.default)
def check_cdist_forward(x1, x2, p, compute_mode):
    """The CPU kernels' dtype checks: the direct kernel takes float32/float64 of one
    dtype, the matrix-product path any float dtype matmul takes."""
    r1, r2 = x1.shape[-2], x2.shape[-2]
    if r1 == 0 or r2 == 0 or x1.shape[-1] == 0 or _batch_size(x1, x2) == 0:
        return
    if _uses_mm(p, compute_mode, r1, r2):
        _same_dtype_for_mm(x1, x2)
        return
    if x1.dtype not in _CDIST_DTYPES:
        raise _not_implemented("cdist", x1.dtype)
    if x2.dtype != x1.dtype:
        raise RuntimeError(
            f"expected scalar type {scalar_type_name(x1.dtype)} but found "
            f"{scalar_type_name(x2.dtype)}"
        )


@argument_check(aten._euclidean_dist.default)
def check_euclidean_dist(x1, x2):
    _same_dtype_for_mm(x1, x2)


@argument_check(aten._cdist_backward.default)
def check_cdist_backward(grad, x1, x2, p, cdist):
    r1, r2 = x1.shape[-2], x2.shape[-2]
    if r1 == 0 or r2 == 0 or x1.shape[-1] == 0 or _batch_size(x1, x2) == 0:
        return
    if x1.dtype not in _CDIST_DTYPES:
        raise _not_implemented("cdist_backward", x1.dtype)


# -- cross product ----------------------------------------------------------------------


@lowering(aten.linalg_cross.default)
def linalg_cross(ctx, self, other, *, dim=-1):
    """The cross product of length-3 vectors along ``dim`` (broadcast)."""
    shape = ctx.shape
    dim %= len(shape)
    dtype = np.dtype(ctx.dtype)
    compute = opmath(dtype)
    a = jnp.broadcast_to(self, shape).astype(compute)
    b = jnp.broadcast_to(other, shape).astype(compute)
    a0, a1, a2 = (lax.index_in_dim(a, i, axis=dim) for i in range(3))
    b0, b1, b2 = (lax.index_in_dim(b, i, axis=dim) for i in range(3))

    def r(v):
        return round_to(v, dtype)

    parts = (
        r(r(a1 * b2) - r(a2 * b1)),
        r(r(a2 * b0) - r(a0 * b2)),
        r(r(a0 * b1) - r(a1 * b0)),
    )
    return jnp.concatenate(parts, axis=dim)


@argument_check(aten.linalg_cross.default)
def check_linalg_cross(self, other, *, dim=-1):
    if self.dtype != other.dtype:
        raise RuntimeError(
            f"expected scalar type {scalar_type_name(self.dtype)} but found "
            f"{scalar_type_name(other.dtype)}"
        )
