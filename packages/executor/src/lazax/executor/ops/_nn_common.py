"""Helpers shared by the nn op families (``nn``, ``losses``, ``conv``, ``pooling``).

Contract: registers no lowering.
- ``acc_dtype``: the dtype an nn rule computes in: float32 for floating dtypes narrower
  than 32 bits (float16, bfloat16), the dtype itself otherwise, as torch's CPU kernels
  accumulate.
- ``expand``: an ``int[n]`` argument (one int, a 1-list or an n-list) as a list of n.
- ``vjp_of``: a backward rule as the ``jax.vjp`` of its forward rule, so that the two
  agree by construction.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["acc_dtype", "expand", "vjp_of"]


def acc_dtype(dtype):
    """The dtype nn rules compute ``dtype`` inputs in (float32 for half types)."""
    dtype = jnp.dtype(dtype)
    if jnp.issubdtype(dtype, jnp.floating) and dtype.itemsize < 4:
        return jnp.float32
    return dtype


def expand(v, n):
    """An ``int[n]`` argument as a list of n: torch also accepts one int, or a 1-list."""
    if isinstance(v, int):
        return [v] * n
    return list(v) * n if len(v) == 1 else list(v)


def vjp_of(fn, primal, grad):
    """The gradient of linear-in-``primal`` (or any) ``fn`` at ``primal``, for ``grad``."""
    _, pullback = jax.vjp(fn, primal)
    return pullback(grad.astype(primal.dtype))[0]
