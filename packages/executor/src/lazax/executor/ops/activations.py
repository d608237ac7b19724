"""Activation lowerings (relu, gelu, silu, mish, hardtanh, leaky_relu, elu/celu,
softplus, hardsigmoid, hardswish, threshold, hardshrink/softshrink, glu,
log_sigmoid_forward) and the backward ops autograd calls for
them (``threshold_backward`` is relu's; ``sigmoid_backward``/``tanh_backward`` and
``logit_backward`` are here too).

Contract (see ``_registry``): a forward rule computes in its input's opmath dtype
(float16/bfloat16 in float32, rounded once by the output cast); a Scalar argument
(slope, threshold, alpha, ...) is read in that dtype. A backward rule promotes the
gradient and the saved tensor together (``_promotion.compute_dtype``) and computes in
opmath. Formulas follow torch's CPU kernels, each activation and backward, so that
results agree with the CPU to the ulp in most cases; ``relu`` and ``hardtanh`` round
nothing and select in the input's own dtype, as torch's kernels do.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import torch
from jax import lax

from ._promotion import compute_dtype, fit, opmath, to_dtype
from ._registry import lowering
from .unary import logistic

aten = torch.ops.aten


def _act(x):
    """The input of an activation, in its opmath dtype."""
    return to_dtype(x, opmath(x.dtype))


def _scalar(value, like):
    """A Scalar argument (Python number or lifted array) in ``like``'s dtype."""
    return to_dtype(value, like.dtype)


_SQRT1_2 = math.sqrt(0.5)
_GELU_TANH_BETA = math.sqrt(2.0) * (2.0 / math.sqrt(math.pi)) * 0.5  # sqrt(2 / pi)
_GELU_PDF_BETA = (2.0 / math.sqrt(math.pi)) * _SQRT1_2 * 0.5  # 1 / sqrt(2 pi)
_GELU_KAPPA = 0.044715


@lowering(aten.relu.default)
def relu(ctx, self):
    """``max(x, 0)``; NaN stays NaN."""
    return jnp.maximum(self, jnp.zeros((), self.dtype))


@lowering(aten.gelu.default)
def gelu(ctx, self, approximate="none"):
    """Exact (erf) or tanh-approximated GELU, torch's formulas."""
    x = _act(self)
    if approximate == "tanh":
        inner = _GELU_TANH_BETA * (x + _GELU_KAPPA * (x * x * x))
        return 0.5 * x * (1 + jnp.tanh(inner))
    return x * 0.5 * (1 + lax.erf(x * _SQRT1_2))


@lowering(aten.silu.default)
def silu(ctx, self):
    """``x / (1 + exp(-x))``."""
    x = _act(self)
    return x / (1 + jnp.exp(-x))


@lowering(aten.mish.default)
def mish(ctx, self):
    """``x * tanh(log1p(exp(x)))``."""
    x = _act(self)
    return x * jnp.tanh(jnp.log1p(jnp.exp(x)))


@lowering(aten.hardtanh.default)
def hardtanh(ctx, self, min_val=-1, max_val=1):
    """``clamp(x, min_val, max_val)`` in ``x``'s dtype (what torch's kernel calls)."""
    return jnp.minimum(jnp.maximum(self, _scalar(min_val, self)), _scalar(max_val, self))


@lowering(aten.leaky_relu.default)
def leaky_relu(ctx, self, negative_slope=0.01):
    """``x > 0 ? x : x * negative_slope``."""
    x = _act(self)
    return jnp.where(x > 0, x, x * _scalar(negative_slope, x))


@lowering(aten.elu.default)
def elu(ctx, self, alpha=1, scale=1, input_scale=1):
    """``x <= 0 ? expm1(x * input_scale) * alpha * scale : x * scale`` (selu and celu
    reach here too)."""
    x = _act(self)
    negcoef = _scalar(alpha, x) * _scalar(scale, x)
    neg = jnp.expm1(x * _scalar(input_scale, x)) * negcoef
    return jnp.where(x <= 0, neg, x * _scalar(scale, x))


@lowering(aten.celu.default)
def celu(ctx, self, alpha=1.0):
    """``elu(x, alpha, 1, 1 / alpha)``."""
    x = _act(self)
    a = _scalar(alpha, x)
    return elu(ctx, x, a, 1, 1 / a)


@lowering(aten.softplus.default)
def softplus(ctx, self, beta=1, threshold=20):
    """``x * beta > threshold ? x : log1p(exp(x * beta)) / beta``."""
    x = _act(self)
    b = _scalar(beta, x)
    xb = x * b
    return jnp.where(xb > _scalar(threshold, x), x, jnp.log1p(jnp.exp(xb)) / b)


def _relu6_of_x_plus_3(x):
    """``min(max(x + 3, 0), 6)``, the hard activations' core."""
    return jnp.minimum(jnp.maximum(x + 3, 0), 6)


@lowering(aten.hardsigmoid.default)
def hardsigmoid(ctx, self):
    """``min(max(x + 3, 0), 6) / 6``."""
    return _relu6_of_x_plus_3(_act(self)) / 6


@lowering(aten.hardswish.default)
def hardswish(ctx, self):
    """``x * min(max(x + 3, 0), 6) / 6``."""
    x = _act(self)
    return x * _relu6_of_x_plus_3(x) / 6


@lowering(aten.threshold.default)
def threshold(ctx, self, threshold, value):
    """``x <= threshold ? value : x``, compared in opmath (an unrounded threshold)."""
    x = _act(self)
    return jnp.where(x <= _scalar(threshold, x), _scalar(value, x), x)


# -- activation backward ----------------------------------------------------------------


def _grad_inputs(grad, x):
    """A backward op's gradient and saved tensor, promoted together, in opmath."""
    dtype = compute_dtype(grad, x)
    return to_dtype(grad, dtype), to_dtype(x, dtype)


@lowering(aten.hardshrink.default)
def hardshrink(ctx, self, lambd=0.5):
    """0 where ``-lambd <= x <= lambd``, else ``x`` (NaN kept)."""
    x = _act(self)
    lambd = _scalar(lambd, x)
    return jnp.where((x >= -lambd) & (x <= lambd), jnp.zeros((), x.dtype), x)


@lowering(aten.softshrink.default)
def softshrink(ctx, self, lambd=0.5):
    """``x - lambd`` above ``lambd``, ``x + lambd`` below ``-lambd``, else zero (NaN
    kept): +0 for float32/64 (torch's vectorized kernel), ``x * 0``, a signed zero, for
    float16/bfloat16 (its float-converting kernel)."""
    x = _act(self)
    lambd = _scalar(lambd, x)
    middle = x * 0 if x.dtype != self.dtype else jnp.where(jnp.isnan(x), x, 0)
    return jnp.where(x > lambd, x - lambd, jnp.where(x < -lambd, x + lambd, middle))


@lowering(aten.glu.default)
def glu(ctx, self, dim=-1):
    """``a * sigmoid(b)`` for the two halves ``a``, ``b`` of ``dim``."""
    a, b = jnp.split(_act(self), 2, axis=dim)
    return a * logistic(b)


@lowering(aten.log_sigmoid_forward.default)
def log_sigmoid_forward(ctx, self):
    """(``min(x, 0) - log1p(exp(-|x|))``, the buffer ``exp(-|x|)``): the CPU kernel's
    pair, whose buffer ``log_sigmoid_backward`` reads."""
    x = _act(self)
    z = jnp.exp(-jnp.abs(x))
    return jnp.minimum(x, jnp.zeros((), x.dtype)) - jnp.log1p(z), z


@lowering(aten.threshold_backward.default)
def threshold_backward(ctx, grad_output, self, threshold):
    """``self <= threshold ? 0 : grad`` (relu's backward too), compared in opmath."""
    g, x = _grad_inputs(grad_output, self)
    return fit(ctx, jnp.where(x <= _scalar(threshold, x), jnp.zeros((), g.dtype), g))


@lowering(aten.gelu_backward.default)
def gelu_backward(ctx, grad_output, self, approximate="none"):
    """d gelu / dx * grad, torch's formulas for both variants."""
    dy, x = _grad_inputs(grad_output, self)
    if approximate == "tanh":
        x_sq = x * x
        tanh_inner = jnp.tanh(_GELU_TANH_BETA * (x + _GELU_KAPPA * (x_sq * x)))
        left_derivative = 0.5 * (1 + tanh_inner)
        inner_derivative = _GELU_TANH_BETA * (1 + 3 * _GELU_KAPPA * x_sq)
        right_derivative = (0.5 * x) * (1 - tanh_inner * tanh_inner) * inner_derivative
        return fit(ctx, dy * (left_derivative + right_derivative))
    cdf = 0.5 * (1 + lax.erf(x * _SQRT1_2))
    pdf = _GELU_PDF_BETA * jnp.exp(x * x * -0.5)
    return fit(ctx, dy * (cdf + x * pdf))


@lowering(aten.silu_backward.default)
def silu_backward(ctx, grad_output, self):
    """``grad * s * (1 + x * (1 - s))`` with s = sigmoid(x)."""
    dy, x = _grad_inputs(grad_output, self)
    s = logistic(x)
    return fit(ctx, dy * s * (1 + x * (1 - s)))


@lowering(aten.mish_backward.default)
def mish_backward(ctx, grad_output, self):
    """``grad * (t + x * sigmoid(x) * (1 - t^2))`` with t = tanh(softplus(x))."""
    dy, x = _grad_inputs(grad_output, self)
    t = jnp.tanh(jnp.log1p(jnp.exp(x)))
    return fit(ctx, dy * (t + x * logistic(x) * (1 - t * t)))


@lowering(aten.sigmoid_backward.default)
def sigmoid_backward(ctx, grad_output, output):
    """``grad * (1 - y) * y`` from sigmoid's output y."""
    dy, y = _grad_inputs(grad_output, output)
    return fit(ctx, dy * (1 - y) * y)


@lowering(aten.tanh_backward.default)
def tanh_backward(ctx, grad_output, output):
    """``grad * (1 - y * y)`` from tanh's output y."""
    dy, y = _grad_inputs(grad_output, output)
    return fit(ctx, dy * (1 - y * y))


@lowering(aten.leaky_relu_backward.default)
def leaky_relu_backward(ctx, grad_output, self, negative_slope, self_is_result):
    """``x > 0 ? grad : grad * negative_slope`` (same test on input or output)."""
    dy, x = _grad_inputs(grad_output, self)
    return fit(ctx, jnp.where(x > 0, dy, dy * _scalar(negative_slope, dy)))


@lowering(aten.hardtanh_backward.default)
def hardtanh_backward(ctx, grad_output, self, min_val, max_val):
    """``grad`` strictly inside (min_val, max_val), else 0."""
    dy, x = _grad_inputs(grad_output, self)
    outside = (x <= _scalar(min_val, x)) | (x >= _scalar(max_val, x))
    return fit(ctx, jnp.where(outside, jnp.zeros((), dy.dtype), dy))


@lowering(aten.elu_backward.default)
def elu_backward(ctx, grad_output, alpha, scale, input_scale, is_result, self_or_result):
    """elu's derivative from its input, or from its output when ``is_result``."""
    dy, b = _grad_inputs(grad_output, self_or_result)
    negcoef = _scalar(alpha, dy) * _scalar(scale, dy)
    negiptcoef = _scalar(input_scale, dy)
    if is_result:
        neg = dy * negiptcoef * (b + negcoef)
    else:
        neg = dy * negiptcoef * negcoef * jnp.exp(b * negiptcoef)
    return fit(ctx, jnp.where(b <= 0, neg, dy * _scalar(scale, dy)))


@lowering(aten.softplus_backward.default)
def softplus_backward(ctx, grad_output, self, beta, threshold):
    """``x * beta > threshold ? grad : grad * z / (z + 1)`` with z = exp(x * beta)."""
    dy, x = _grad_inputs(grad_output, self)
    xb = x * _scalar(beta, x)
    z = jnp.exp(xb)
    return fit(ctx, jnp.where(xb > _scalar(threshold, x), dy, dy * z / (z + 1)))


@lowering(aten.hardsigmoid_backward.default)
def hardsigmoid_backward(ctx, grad_output, self):
    """``grad / 6`` for -3 < x < 3 (torch multiplies by 1/6), else 0."""
    dy, x = _grad_inputs(grad_output, self)
    inside = (x > -3) & (x < 3)
    return fit(ctx, jnp.where(inside, dy * to_dtype(1.0 / 6.0, dy.dtype), 0))


@lowering(aten.hardswish_backward.default)
def hardswish_backward(ctx, grad_output, self):
    """0 up to -3, ``grad * (x / 3 + 0.5)`` below 3, ``grad`` from 3 (torch's kinks)."""
    dy, x = _grad_inputs(grad_output, self)
    out = jnp.where(x < 3, dy * (x / 3 + 0.5), dy)
    return fit(ctx, jnp.where(x <= -3, jnp.zeros((), dy.dtype), out))


@lowering(aten.logit_backward.default)
def logit_backward(ctx, grad_output, self, eps=None):
    """``grad / (x * (1 - x))``; outside [0, 1] NaN (no eps) or 0 outside
    [eps, 1 - eps]."""
    dy, x = _grad_inputs(grad_output, self)
    grad = dy / (x * (1 - x))
    if eps is None or eps < 0:
        return fit(ctx, jnp.where((x < 0) | (x > 1), jnp.nan, grad))
    return fit(ctx, jnp.where((x < eps) | (x > 1 - eps), jnp.zeros((), dy.dtype), grad))
