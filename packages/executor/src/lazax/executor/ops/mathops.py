"""Integer and elementwise math, and copies that torch gives kernels of their own:
bit shifts (``bitwise_left_shift``/``bitwise_right_shift``, ``__lshift__``/
``__rshift__``), ``gcd``/``lcm``, ``isin``, ``block_diag``,
``unsafe_split``/``unsafe_split_with_sizes``, ``narrow_copy`` and
``repeat_interleave.Tensor`` with a static ``output_size`` (``frexp``, ``complex``,
``polar`` and ``mvlgamma`` are in ``floats``).

Contract (see ``_registry``): dtypes follow ``_promotion`` (``torch.result_type`` of
the operands); each formula follows torch's CPU kernel, corner cases included:

- Shifts: a shift by a negative amount or by the bit width or more gives 0 to the left
  and the sign fill (``x >> (bits - 1)``, 0 for unsigned) to the right, as torch's
  ``lshift``/``rshift``; only integer dtypes (torch's kernels refuse bool and floats).
- ``gcd``: Euclid on ``|a|``, ``|b|`` with C's remainder (``gcd(INT_MIN, 6) == -2`` as
  the CPU's wrapping ``abs`` gives); ``lcm`` is ``|a / g * b|`` (0 when ``g`` is 0),
  computed in ``int`` for the 8/16-bit types, as C promotes them.
- ``repeat_interleave.Tensor`` runs on the device only with ``output_size`` given:
  without it the output's length is the sum of the repeats' *values*, so there is no
  static output spec and the call goes to the CPU fallback (``NeedsFallback``).
  Negative repeats and a sum other than ``output_size`` raise torch's errors from the
  device (``ctx.check``).

CPU-kernel argument checks the meta kernels skip (dtypes) are registered here too
(``_arguments``).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ._arguments import argument_check, output_specs, scalar_type_name
from ._promotion import fit, result_type, to_dtype
from ._registry import lowering

aten = torch.ops.aten


def _meta_like(value):
    """A stand-in for dtype rules: a meta tensor of ``value``'s dtype and rank class
    (0-dim or not), or the Python number itself."""
    if isinstance(value, torch.Tensor):
        return torch.empty((1,) * min(value.dim(), 1), dtype=value.dtype, device="meta")
    return value


def _promoted(*values) -> torch.dtype:
    """``torch.result_type`` of tensors (lazax or meta) and Python numbers."""
    metas = [_meta_like(v) for v in values]
    if len(metas) == 1:
        return metas[0].dtype
    return torch.result_type(*metas)


def _require_integer(kernel: str, *values) -> None:
    """torch's ``AT_DISPATCH_INTEGRAL_TYPES`` error for a non-integer promoted dtype."""
    dtype = _promoted(*values)
    if dtype == torch.bool or dtype.is_floating_point or dtype.is_complex:
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{scalar_type_name(dtype)}'")


# -- bit shifts -------------------------------------------------------------------------


def _shift(ctx, self, other, left: bool):
    dtype = result_type(self, other)
    a, b = jnp.broadcast_arrays(to_dtype(self, dtype), to_dtype(other, dtype))
    bits = np.iinfo(dtype).bits
    signed = np.issubdtype(dtype, np.signedinteger)
    if left:
        outside = b >= bits
        if signed:
            outside = outside | (b < 0)
        out = jnp.where(outside, jnp.zeros((), dtype), a << jnp.where(outside, 0, b))
    else:
        limit = bits - int(signed)  # the sign bit stays for signed types
        outside = b >= limit
        if signed:
            outside = outside | (b < 0)
        fill = a >> (bits - 1) if signed else jnp.zeros_like(a)
        out = jnp.where(outside, fill, a >> jnp.where(outside, 0, b))
    return fit(ctx, out)


@lowering(
    aten.bitwise_left_shift.Tensor,
    aten.bitwise_left_shift.Tensor_Scalar,
    aten.bitwise_left_shift.Scalar_Tensor,
    aten.__lshift__.Tensor,
    aten.__lshift__.Scalar,
)
def bitwise_left_shift(ctx, self, other):
    """``self << other`` (0 for shifts out of range)."""
    return _shift(ctx, self, other, left=True)


@lowering(
    aten.bitwise_right_shift.Tensor,
    aten.bitwise_right_shift.Tensor_Scalar,
    aten.bitwise_right_shift.Scalar_Tensor,
    aten.__rshift__.Tensor,
    aten.__rshift__.Scalar,
)
def bitwise_right_shift(ctx, self, other):
    """``self >> other``, arithmetic for signed types (sign fill out of range)."""
    return _shift(ctx, self, other, left=False)


@argument_check(
    aten.bitwise_left_shift.Tensor,
    aten.bitwise_left_shift.Tensor_Scalar,
    aten.bitwise_left_shift.Scalar_Tensor,
    aten.__lshift__.Tensor,
)
def check_left_shift(self, other):
    _require_integer("lshift_cpu", self, other)


@argument_check(
    aten.bitwise_right_shift.Tensor,
    aten.bitwise_right_shift.Tensor_Scalar,
    aten.bitwise_right_shift.Scalar_Tensor,
    aten.__rshift__.Tensor,
)
def check_right_shift(self, other):
    _require_integer("rshift_cpu", self, other)


def _scalar_shift_specs(kernel):
    def specs(self, other):
        _require_integer(kernel, self, other)
        return torch.empty(self.shape, dtype=_promoted(self, other), device="meta")

    return specs


# Their meta kernels refuse a bool tensor, which the CPU shifts as int64 (``b << 2``).
output_specs(aten.__lshift__.Scalar)(_scalar_shift_specs("lshift_cpu"))
output_specs(aten.__rshift__.Scalar)(_scalar_shift_specs("rshift_cpu"))


# -- gcd, lcm ---------------------------------------------------------------------------


def _gcd(a, b):
    """Euclid's algorithm elementwise on ``|a|``, ``|b|`` (C's remainder)."""

    def running(state):
        return jnp.any(state[0] != 0)

    def step(state):
        a, b = state
        live = a != 0
        divisor = jnp.where(live, a, jnp.ones_like(a))
        return jnp.where(live, lax.rem(b, divisor), a), jnp.where(live, a, b)

    return lax.while_loop(running, step, (jnp.abs(a), jnp.abs(b)))[1]


def _int_operands(self, other):
    dtype = result_type(self, other)
    return dtype, jnp.broadcast_arrays(to_dtype(self, dtype), to_dtype(other, dtype))


@lowering(aten.gcd.default)
def gcd(ctx, self, other):
    """Greatest common divisor (non-negative except where ``abs`` wraps)."""
    _, (a, b) = _int_operands(self, other)
    return fit(ctx, _gcd(a, b))


@lowering(aten.lcm.default)
def lcm(ctx, self, other):
    """Least common multiple ``|a / gcd * b|``, 0 when both are 0."""
    dtype, (a, b) = _int_operands(self, other)
    g = _gcd(a, b)
    wide = np.dtype(np.int32) if np.dtype(dtype).itemsize < 4 else dtype
    a, b, g = a.astype(wide), b.astype(wide), g.astype(wide)
    zero = g == 0
    out = jnp.abs(lax.div(a, jnp.where(zero, jnp.ones_like(g), g)) * b)
    return fit(ctx, jnp.where(zero, jnp.zeros_like(out), out).astype(dtype))


@argument_check(aten.gcd.default)
def check_gcd(self, other):
    _require_integer("gcd_cpu", self, other)


@argument_check(aten.lcm.default)
def check_lcm(self, other):
    _require_integer("lcm_cpu", self, other)


# -- isin -------------------------------------------------------------------------------

# Above this many element pairs, isin sorts the test elements instead of comparing all.
_PAIRWISE_LIMIT = 1 << 20


@lowering(aten.isin.Tensor_Tensor, aten.isin.Tensor_Scalar, aten.isin.Scalar_Tensor)
def isin(ctx, elements, test_elements, *, assume_unique=False, invert=False):
    """Whether each element equals some test element, compared in the promoted dtype
    (NaN matches nothing; -0 matches 0). ``assume_unique`` only picks torch's
    algorithm: the answer is the same."""
    dtype = result_type(elements, test_elements)
    e = to_dtype(elements, dtype)
    t = jnp.ravel(to_dtype(test_elements, dtype))
    if t.size == 0:
        found = jnp.zeros(e.shape, bool)
    elif e.size * t.size <= _PAIRWISE_LIMIT:
        found = jnp.any(e[..., None] == t, axis=-1)
    else:
        t = jnp.sort(jnp.where(t == 0, jnp.zeros((), dtype), t))  # -0 next to 0
        at = jnp.clip(jnp.searchsorted(t, e), 0, t.size - 1)
        found = t[at] == e
    return fit(ctx, found != invert)


# -- copies: block_diag, unsafe_split, narrow_copy, repeat_interleave -------------------


@lowering(aten.block_diag.default)
def block_diag(ctx, tensors):
    """The tensors (0-dim as 1x1, 1-dim as one row) on the diagonal of zeros, cast to
    the promoted dtype."""
    out = jnp.zeros(ctx.shape, ctx.dtype)
    row = col = 0
    for t in tensors:
        block = t.reshape((1, -1) if t.ndim < 2 else t.shape).astype(ctx.dtype)
        h, w = block.shape
        if block.size:
            out = lax.dynamic_update_slice(out, block, (row, col))
        row, col = row + h, col + w
    return out


@lowering(aten.unsafe_split.Tensor, aten.unsafe_split_with_sizes.default)
def unsafe_split(ctx, x, split_size, dim=0):
    """``split``'s pieces (as the tensor layer makes them: new tensors here)."""
    dim %= max(x.ndim, 1)
    pieces, start = [], 0
    for shape, _ in ctx.out:
        pieces.append(lax.slice_in_dim(x, start, start + shape[dim], axis=dim))
        start += shape[dim]
    return tuple(pieces)


@lowering(aten.narrow_copy.default)
def narrow_copy(ctx, x, dim, start, length):
    """``x.narrow(dim, start, length)`` as a new tensor (``start`` may be negative)."""
    dim %= max(x.ndim, 1)
    start = start + x.shape[dim] if start < 0 else start
    return lax.slice_in_dim(x, start, start + length, axis=dim)


_ALLOCATED = "allocated size does not match required size"


@lowering(aten.repeat_interleave.Tensor, checked=True)
def repeat_interleave(ctx, repeats, *, output_size=None):
    """``i`` repeated ``repeats[i]`` times, into the static ``output_size``: output
    position ``j`` holds the number of cumulative repeats at or below ``j``."""
    n = ctx.shape[0]
    if repeats.shape[0] == 0:
        return jnp.zeros(ctx.shape, repeats.dtype)
    ends = jnp.cumsum(repeats.astype(jnp.int64))
    ctx.check(ends[-1] != n, None, "RuntimeError", _ALLOCATED)
    ctx.check(repeats < 0, None, "RuntimeError", "repeats can not be negative")
    index = jnp.searchsorted(ends, jnp.arange(n, dtype=jnp.int64), side="right")
    return index.astype(repeats.dtype)


@output_specs(aten.repeat_interleave.Tensor)
def repeat_interleave_specs(repeats, *, output_size=None):
    """With ``output_size`` the output is ``(output_size,)`` (``(0,)`` for no repeats,
    as the CPU kernel returns); without it the length depends on the values: no static
    spec, so the call runs through the CPU fallback."""
    if output_size is None:
        raise NotImplementedError(
            "repeat_interleave without output_size: the output's length is the sum of "
            "the repeats' values"
        )
    if repeats.dim() != 1:
        raise RuntimeError("repeat_interleave only accept 1D vector as repeat")
    if repeats.dtype not in (torch.int32, torch.int64):
        raise NotImplementedError(
            f"\"repeat_interleave_cpu\" not implemented for '{scalar_type_name(repeats.dtype)}'"
        )
    length = 0 if repeats.shape[0] == 0 else output_size
    return torch.empty((length,), dtype=repeats.dtype, device="meta")
