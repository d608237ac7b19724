"""Grouped matrix products for mixtures of experts: ``_grouped_mm`` (what
``torch.nn.functional.grouped_mm`` calls, transformers' default expert path and
torchtitan's), and transformers' own ``grouped_mm_fallback`` ops.

Contract:
- ``_grouped_mm(a, b, offs=None, bias=None, out_dtype=None)`` in torch's four layouts.
  ``offs`` holds the groups' cumulative ends (int32): group ``g`` is the slice
  ``offs[g-1]:offs[g]`` (from 0 for the first) of the ragged dimension.
  - 2-d ``a`` (M, K), 3-d ``b`` (G, K, N): rows of ``a`` in group ``g`` times ``b[g]``,
    (M, N). Rows past ``offs[-1]`` are 0 (torch leaves them uninitialized).
  - 2-d ``a`` (M, K), 2-d ``b`` (K, N): the contraction is ragged, ``out[g]`` is
    ``a[:, group g] @ b[group g, :]``, (G, M, N) (an expert's weight gradient); an empty
    group gives zeros, and ``K`` past ``offs[-1]`` is ignored.
  - 3-d ``a`` (G, M, K), 2-d ``b`` (K, N): the columns are ragged, ``out[:, group g]``
    is ``a[g] @ b[:, group g]``, (M, N); columns past ``offs[-1]`` are 0.
  - 3-d ``a`` and ``b``: a batched product (no ``offs``).
  Products follow ``linalg``: float32 at full precision, float16/bfloat16 accumulated in
  float32; the result is in ``out_dtype`` or ``a``'s dtype.
- Output specs: torch's meta kernel takes bfloat16 only (CUDA's rule) and checks the
  strides CUDA's kernel needs; lazax takes what the CPU kernel takes (float32, float16,
  bfloat16, as transformers uses on the CPU), in any layout, with torch's shape rules
  and errors for the rest (``output_specs``).
- ``transformers::grouped_mm_fallback(input, weight, offs)`` (transformers' op for the
  2-d x 3-d product under ``torch.compile`` with weights that are not bfloat16) and its
  ``grouped_mm_fallback_backward`` (the input's and the weight's gradients) are the
  same products, registered by name: lazax does not import transformers.
- The products are ``lax.ragged_dot_general``: native where XLA has a ragged dot (TPU);
  elsewhere XLA computes every group's product over the whole ragged dimension and
  masks (G times the flops of the ragged product), a correct but not a fast path.
"""

from __future__ import annotations

import jax.numpy as jnp
import torch
from jax import lax

from ._arguments import output_specs
from ._registry import lowering

aten = torch.ops.aten

_TAKES = (torch.float32, torch.bfloat16, torch.float16)
_NAMES = {torch.float64: "Double", torch.int32: "Int", torch.int64: "Long"}


def _precision(dtype):
    return lax.Precision.HIGHEST if jnp.dtype(dtype) == jnp.float32 else None


def _accumulate(dtype):
    return jnp.float32 if jnp.dtype(dtype).itemsize < 4 else jnp.dtype(dtype)


def _group_sizes(offs):
    offs = offs.astype(jnp.int32)
    return jnp.diff(offs, prepend=jnp.zeros((1,), jnp.int32))


def _ragged_rows(a, b, offs):
    """``a`` (M, K) ragged along M, ``b`` (G, K, N): (M, N)."""
    return lax.ragged_dot(
        a,
        b,
        _group_sizes(offs),
        precision=_precision(a.dtype),
        preferred_element_type=_accumulate(a.dtype),
    )


def _ragged_contraction(a, b, offs):
    """``a`` (M, K), ``b`` (K, N), K ragged: (G, M, N)."""
    numbers = lax.RaggedDotDimensionNumbers(
        dot_dimension_numbers=(([1], [0]), ([], [])),
        lhs_ragged_dimensions=[1],
        rhs_group_dimensions=[],
    )
    return lax.ragged_dot_general(
        a,
        b,
        _group_sizes(offs),
        numbers,
        precision=_precision(a.dtype),
        preferred_element_type=_accumulate(a.dtype),
    )


def _grouped(a, b, offs):
    if a.ndim == 2 and b.ndim == 3:
        return _ragged_rows(a, b, offs)
    if a.ndim == 2 and b.ndim == 2:
        return _ragged_contraction(a, b, offs)
    if a.ndim == 3 and b.ndim == 2:
        # Ragged columns are ragged rows of the transposed product.
        return _ragged_rows(b.T, jnp.swapaxes(a, 1, 2), offs).T
    return jnp.matmul(
        a, b, precision=_precision(a.dtype), preferred_element_type=_accumulate(a.dtype)
    )


@output_specs(aten._grouped_mm.default)
def grouped_mm_specs(a, b, offs=None, bias=None, out_dtype=None):
    for name, t in (("mat_a", a), ("mat_b", b)):
        if t.dtype not in _TAKES:
            got = _NAMES.get(t.dtype, str(t.dtype))
            raise RuntimeError(
                f"Expected {name} to be Float32, BFloat16 or Float16 matrix, got {got}"
            )
    torch._check(
        a.dim() in (2, 3) and b.dim() in (2, 3),
        lambda: (
            f"Multiplicands must be 2D or 3D but got mat_a.dim()={a.dim()} and "
            f"mat_b.dim()={b.dim()}"
        ),
    )
    if a.dim() == 3 or b.dim() == 3:
        torch._check(
            a.size(-1) == b.size(-2), lambda: "contraction dimension of mat_a and mat_b must match"
        )
    ragged = a.dim() == 2 or b.dim() == 2
    if ragged:
        torch._check(offs is not None, lambda: "Offsets tensor not provided")
        torch._check(
            offs.dim() == 1 and offs.dtype == torch.int32,
            lambda: "Offsets tensor must be integer (int32) tensor",
        )
    else:
        torch._check(offs is None, lambda: "Offsets tensor provided, but is not needed")
    torch._check(bias is None, lambda: "Bias tensor provided, but it is not supported yet.")
    if a.dim() == 2 and b.dim() == 2:
        size = (offs.size(0), a.size(0), b.size(1))
    elif a.dim() == 2:
        torch._check(offs.size(0) == b.size(0), lambda: "matrix batch sizes have to match")
        size = (a.size(0), b.size(-1))
    elif b.dim() == 2:
        torch._check(offs.size(0) == a.size(0), lambda: "matrix batch sizes have to match")
        size = (a.size(1), b.size(1))
    else:
        torch._check(a.size(0) == b.size(0), lambda: "batched dimension has to match")
        size = (a.size(0), a.size(1), b.size(-1))
    return torch.empty(size, dtype=out_dtype or a.dtype, device="meta")


@lowering(aten._grouped_mm.default)
def grouped_mm(ctx, a, b, offs=None, bias=None, out_dtype=None):
    return _grouped(a, b, offs).astype(ctx.dtype)


@lowering("transformers::grouped_mm_fallback")
def transformers_grouped_mm(ctx, x, weight, offs):
    return _ragged_rows(x.astype(weight.dtype), weight, offs).astype(ctx.dtype)


@lowering("transformers::grouped_mm_fallback_backward")
def transformers_grouped_mm_backward(ctx, x, weight, offs, grad):
    grad_input = _ragged_rows(grad, jnp.swapaxes(weight, 1, 2), offs)
    grad_weight = _ragged_contraction(x.T, grad, offs)
    return grad_input.astype(ctx.out[0][1]), grad_weight.astype(ctx.out[1][1])
