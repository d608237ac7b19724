"""Discrete Fourier transforms: ``_fft_r2c``, ``_fft_c2r``, ``_fft_c2c``.

Every ``torch.fft`` function (``fft``, ``ifft``, ``rfft``, ``irfft``, ``fft2``, ``fftn``,
``hfft``, ``ihfft``, their n-dimensional and inverse forms) reaches the device as these
three ops, after torch's Python layer has padded or trimmed the signal, cast it and
picked the normalization; torch's autograd writes their gradients with them again.

Contract:
- ``dim`` lists the transformed dimensions, in any order and any number (XLA's FFT
  takes at most the three trailing axes: the transform is separable, so more
  dimensions are done three at a time).
- ``normalization`` is torch's ``fft_norm_mode``: 0 none, 1 ``1/sqrt(n)``, 2 ``1/n``,
  with ``n`` the product of the signal sizes over ``dim`` (for ``c2r``, the sizes of
  the real output, whose last one is ``last_dim_size``). ``forward`` picks the sign of
  the exponent for ``c2c``; ``r2c`` is always forward and ``c2r`` always inverse.
- ``r2c`` transforms ``dim[-1]`` real-to-complex; with ``onesided`` it keeps the
  ``n//2 + 1`` non-redundant terms there, else all ``n`` (the Hermitian completion).
  ``c2r`` is the inverse: the complex-to-complex inverse over ``dim[:-1]``, then
  complex-to-real over ``dim[-1]``, whose input is the first ``last_dim_size//2 + 1``
  terms (the imaginary parts of the terms a real signal has real, DC and Nyquist, are
  ignored, as torch's CPU and CUDA back ends do).
- Results are in the complex (or real) dtype torch's meta kernel gives:
  ``complex64``/``float32`` for single precision, ``complex128``/``float64`` for double.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import torch
from jax import lax

from ._registry import lowering

aten = torch.ops.aten

_NONE, _BY_ROOT_N, _BY_N = 0, 1, 2
_MAX_AXES = 3  # XLA's FFT transforms at most the three trailing axes


def _axes(x, dim) -> list[int]:
    return [d % x.ndim for d in dim]


def _in_threes(axes):
    for start in range(0, len(axes), _MAX_AXES):
        yield axes[start : start + _MAX_AXES]


def _transform_trailing(x, axes, fft_type, lengths=None):
    """``lax.fft`` over ``axes`` (at most three), moved last and back."""
    last = list(range(x.ndim - len(axes), x.ndim))
    moved = jnp.moveaxis(x, axes, last)
    if lengths is None:
        lengths = moved.shape[-len(axes) :]
    out = lax.fft(moved, fft_type, tuple(lengths))
    return jnp.moveaxis(out, last, axes)


def _c2c(x, axes, forward: bool):
    """The complex transform over ``axes``: unnormalized when forward; XLA's inverse
    divides by the signal size (the caller undoes that where torch does not)."""
    fft_type = lax.FftType.FFT if forward else lax.FftType.IFFT
    for group in _in_threes(axes):
        x = _transform_trailing(x, group, fft_type)
    return x


def _scale(x, n: int, normalization: int, xla_divided: bool):
    """torch's normalization of a transform of ``n`` points, given whether XLA already
    divided the result by ``n`` (its inverse transforms do)."""
    factor = {_NONE: 1.0, _BY_ROOT_N: 1.0 / math.sqrt(n), _BY_N: 1.0 / n}[normalization]
    if xla_divided:
        factor *= n
    if factor == 1.0:
        return x
    real = jnp.finfo(x.dtype).dtype
    return x * jnp.asarray(factor, real)


def _signal_size(shape, axes) -> int:
    return math.prod(shape[a] for a in axes)


@lowering(aten._fft_c2c.default)
def fft_c2c(ctx, x, dim, normalization, forward):
    x = x.astype(ctx.dtype)
    axes = _axes(x, dim)
    if not axes:
        return x
    out = _c2c(x, axes, forward)
    return _scale(out, _signal_size(x.shape, axes), normalization, xla_divided=not forward)


@lowering(aten._fft_r2c.default)
def fft_r2c(ctx, x, dim, normalization, onesided):
    real = jnp.finfo(ctx.dtype).dtype
    x = x.astype(real)
    axes = _axes(x, dim)
    n = _signal_size(x.shape, axes)
    if not onesided:
        # The full spectrum: the Hermitian completion is the complex transform itself.
        out = _c2c(x.astype(ctx.dtype), axes, forward=True)
    else:
        out = _transform_trailing(x, axes[-1:], lax.FftType.RFFT).astype(ctx.dtype)
        if len(axes) > 1:
            out = _c2c(out, axes[:-1], forward=True)
    return _scale(out, n, normalization, xla_divided=False)


@lowering(aten._fft_c2r.default)
def fft_c2r(ctx, x, dim, normalization, last_dim_size):
    complex_dtype = jnp.result_type(ctx.dtype, jnp.complex64)
    x = x.astype(complex_dtype)
    axes = _axes(x, dim)
    last = axes[-1]
    if len(axes) > 1:
        x = _c2c(x, axes[:-1], forward=False)
    # The complex-to-real transform reads exactly last_dim_size//2 + 1 terms.
    terms = last_dim_size // 2 + 1
    have = x.shape[last]
    if have > terms:
        x = lax.slice_in_dim(x, 0, terms, axis=last)
    elif have < terms:
        pad = [(0, 0)] * x.ndim
        pad[last] = (0, terms - have)
        x = jnp.pad(x, pad)
    out = _transform_trailing(x, [last], lax.FftType.IRFFT, [last_dim_size])
    n = _signal_size(ctx.shape, axes)
    return _scale(out.astype(ctx.dtype), n, normalization, xla_divided=True)
