"""Float decompositions and constructions: ``frexp``, ``complex``/``polar`` and
``mvlgamma``.

Contract (see ``_registry``), each formula torch's CPU kernel's:
- ``frexp``: mantissa in [0.5, 1) with the input's sign and an int32 exponent, also for
  subnormals (read from the bits: XLA's CPU backend flushes subnormals in arithmetic);
  0, infinities and NaN give themselves and exponent 0 (glibc's frexp).
- ``complex``/``polar``: two floats of one dtype make its complex type; the ``out=``
  forms require exactly that complex type (torch's CPU error, which the meta kernel
  does not raise), as the functional ones refuse mixed or non-float inputs.
- ``mvlgamma``: ``sum_j lgamma(x - j/2)`` plus ``p (p - 1) / 4 * log(pi)``, torch's
  checks on ``p`` and the dtype.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ._arguments import argument_check, scalar_type_name
from ._promotion import floating_dtype, opmath, round_to, to_dtype
from ._registry import lowering
from .special import lgamma

aten = torch.ops.aten


# -- frexp, complex, polar, mvlgamma ----------------------------------------------------

# float dtype -> (same-width int dtype, mantissa bits, exponent mask)
_FLOAT_LAYOUT = {
    np.dtype(np.float32): (np.int32, 23, 0xFF),
    np.dtype(np.float64): (np.int64, 52, 0x7FF),
}


@lowering(aten.frexp.Tensor)
def frexp(ctx, self):
    """``self == mantissa * 2 ** exponent`` with ``0.5 <= |mantissa| < 1``, read from
    the bits (XLA's CPU backend flushes subnormal operands of float arithmetic to zero;
    integer ops see them whole); halves go through float32, where frexp is exact."""
    x = self.astype(opmath(self.dtype))
    int_type, mantissa_bits, mask = _FLOAT_LAYOUT[np.dtype(x.dtype)]
    width = np.dtype(int_type).itemsize * 8
    half_bias = mask // 2 - 1  # the exponent field of a value in [0.5, 1)
    fraction_mask = (1 << mantissa_bits) - 1
    bits = lax.bitcast_convert_type(x, int_type)
    field = (bits >> mantissa_bits) & mask
    fraction = bits & fraction_mask
    sign = bits & np.array(-(1 << (width - 1)), int_type)
    # A subnormal's leading one moves up to the implicit bit; its exponent counts down.
    lead = width - 1 - lax.clz(fraction)  # the leading one's position
    shift = jnp.where(field == 0, mantissa_bits - lead, 0)
    fraction = (fraction << shift) & fraction_mask
    exponent = jnp.where(field == 0, lead - mantissa_bits + 1, field) - half_bias
    mantissa = lax.bitcast_convert_type(sign | (half_bias << mantissa_bits) | fraction, x.dtype)
    special = (field == mask) | ((field == 0) & (bits & fraction_mask == 0))
    mantissa = jnp.where(special, x, mantissa)
    exponent = jnp.where(special, 0, exponent).astype(jnp.int32)
    return mantissa.astype(self.dtype), exponent


@lowering(aten.complex.default)
def complex_(ctx, real, imag):
    """``real + i * imag`` (same float dtypes, broadcast)."""
    real, imag = jnp.broadcast_arrays(real, imag)
    return lax.complex(real, imag)


@lowering(aten.polar.default)
def polar(ctx, abs, angle):
    """``abs * cos(angle) + i * abs * sin(angle)``, as ``c10::polar``."""
    abs, angle = jnp.broadcast_arrays(abs, angle)
    return lax.complex(abs * jnp.cos(angle), abs * jnp.sin(angle))


def _same_float_inputs(real, imag, what):
    """``complex``/``polar``'s CPU checks: matching Half, Float or Double inputs."""
    allowed = (torch.float16, torch.float32, torch.float64)
    if real.dtype not in allowed or imag.dtype not in allowed:
        raise RuntimeError(
            "Expected both inputs to be Half, Float or Double tensors but got "
            f"{scalar_type_name(real.dtype)} and {scalar_type_name(imag.dtype)}"
        )
    if real.dtype != imag.dtype:
        raise RuntimeError(
            f"Expected object of scalar type {scalar_type_name(real.dtype)} but got scalar "
            f"type {scalar_type_name(imag.dtype)} for second argument"
        )
    if what == "polar" and real.dtype == torch.float16:
        raise NotImplementedError("\"polar_cpu\" not implemented for 'Half'")


@argument_check(aten.complex.default)
def check_complex(real, imag):
    _same_float_inputs(real, imag, "complex")


@argument_check(aten.polar.default)
def check_polar(abs, angle):
    _same_float_inputs(abs, angle, "polar")


_COMPLEX_OF = {torch.float16: torch.complex32, torch.float32: torch.complex64}
_COMPLEX_NAME = {
    torch.complex32: "ComplexHalf",
    torch.complex64: "ComplexFloat",
    torch.complex128: "ComplexDouble",
}


def _check_complex_out(a, b, out, name) -> None:
    """The CPU kernel's exact ``out`` dtype: the complex type of the inputs' float type
    (the meta kernel lets any complex ``out`` through)."""
    _same_float_inputs(a, b, name)
    wanted = _COMPLEX_OF.get(a.dtype, torch.complex128)
    if out.dtype != wanted:
        got = _COMPLEX_NAME.get(out.dtype, scalar_type_name(out.dtype))
        raise RuntimeError(
            f"Expected object of scalar type {_COMPLEX_NAME[wanted]} but got scalar type "
            f"{got} for argument 'out'"
        )


@argument_check(aten.complex.out)
def check_complex_out(real, imag, *, out):
    _check_complex_out(real, imag, out, "complex")


@argument_check(aten.polar.out)
def check_polar_out(abs, angle, *, out):
    _check_complex_out(abs, angle, out, "polar")


@lowering(aten.mvlgamma.default)
def mvlgamma(ctx, self, p):
    """Multivariate log-gamma, torch's formula: ``sum_j lgamma(x - j/2)`` over
    ``j < p`` plus ``p (p - 1) / 4 * log(pi)``, each step rounded to the output dtype
    (bfloat16 works step by step) and the sum accumulated in float32."""
    dtype = np.dtype(floating_dtype(self.dtype))
    compute = opmath(dtype)
    offsets = np.arange(-p * 0.5 + 0.5, 0.5, 0.5).astype(dtype).astype(compute)
    args = round_to(self.astype(dtype).astype(compute)[..., None] + offsets, dtype)
    terms = round_to(lgamma(ctx, args), dtype)
    total = round_to(jnp.sum(terms, -1), dtype)
    constant = to_dtype(to_dtype(p * (p - 1) * math.log(math.pi) * 0.25, dtype), compute)
    return total + constant


@argument_check(aten.mvlgamma.default)
def check_mvlgamma(self, p):
    if self.dtype == torch.bool:
        raise RuntimeError("The input tensor may not be a boolean tensor.")
    if p < 1:
        raise RuntimeError("p has to be greater than or equal to 1")
