"""Matrix products: mm, bmm, mv, dot/vdot, addmm, addbmm, baddbmm, addmv, addr; trace.

Contract: products match torch's CPU results: float32/float64 (and complex) use
``Precision.HIGHEST`` (no TF32/bf16 passes on accelerators); float16/bfloat16 inputs
accumulate in float32 (``preferred_element_type``) and the ``beta``/``alpha`` epilogue
is applied in float32 too, so the result is rounded once, as torch's CPU gemm does.
``beta == 0`` ignores ``self`` entirely (NaN/inf in it do not propagate), as in torch.
``matmul``/``linear``/``einsum`` decompose into these before reaching lazax.
"""

from __future__ import annotations

import jax.numpy as jnp
import torch
from jax import lax

from ._registry import lowering

aten = torch.ops.aten


def _acc(dtype):
    dtype = jnp.dtype(dtype)
    if jnp.issubdtype(dtype, jnp.floating) and dtype.itemsize < 4:
        return jnp.dtype(jnp.float32)
    return dtype


def _matmul(a, b, out_dtype):
    acc = _acc(out_dtype)
    a, b = a.astype(out_dtype), b.astype(out_dtype)
    if jnp.issubdtype(acc, jnp.integer) or acc == jnp.bool_:
        return jnp.matmul(a, b, preferred_element_type=acc)
    return jnp.matmul(a, b, precision=lax.Precision.HIGHEST, preferred_element_type=acc)


def _epilogue(ctx, self, product, beta, alpha):
    """``beta * self + alpha * product`` in the accumulation dtype."""
    acc = _acc(ctx.dtype)
    if alpha is not None and not (type(alpha) in (int, float) and alpha == 1):
        product = product * jnp.asarray(alpha).astype(acc)
    if type(beta) in (int, float) and beta == 0:
        return jnp.broadcast_to(product, ctx.shape)
    self = self.astype(acc)
    if not (type(beta) in (int, float) and beta == 1):
        self = self * jnp.asarray(beta).astype(acc)
    return jnp.broadcast_to(self + product, ctx.shape)


@lowering(aten.mm.default, aten.bmm.default, aten.mv.default, aten.dot.default)
def mm(ctx, a, b):
    return _matmul(a, b, ctx.dtype)


@lowering(aten.vdot.default)
def vdot(ctx, a, b):
    return _matmul(jnp.conj(a), b, ctx.dtype)


@lowering(aten.addmm.default, aten.baddbmm.default, aten.addmv.default)
def addmm(ctx, self, a, b, *, beta=1, alpha=1):
    return _epilogue(ctx, self, _matmul(a, b, ctx.dtype), beta, alpha)


@lowering(aten.addbmm.default)
def addbmm(ctx, self, a, b, *, beta=1, alpha=1):
    return _epilogue(ctx, self, jnp.sum(_matmul(a, b, ctx.dtype), 0), beta, alpha)


@lowering(aten.addr.default)
def addr(ctx, self, a, b, *, beta=1, alpha=1):
    acc = _acc(ctx.dtype)
    outer = a.astype(acc)[:, None] * b.astype(acc)[None, :]
    return _epilogue(ctx, self, outer, beta, alpha)


@lowering(aten.trace.default)
def trace(ctx, x):
    return jnp.trace(x.astype(_acc(ctx.dtype)))
