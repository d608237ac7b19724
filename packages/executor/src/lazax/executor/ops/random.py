"""Random ops: the functional forms of the in-place samplers (``normal_``, ``uniform_``,
``bernoulli_``, ``random_``, ``exponential_``, ``geometric_``, ``log_normal_``,
``cauchy_``), ``randn_like``/``rand_like``/``randint_like``, ``randperm``, ``normal`` with tensor
parameters, ``bernoulli``, ``multinomial``, and
dropout (``native_dropout`` and its backward).

Contract: every rule registered with ``random=True`` draws from ``ctx.key`` only, a
fresh key per call derived from lazax's device RNG (so ``torch.manual_seed`` makes
results repeat, and two calls differ). Streams are not torch's: only distributions
match. The sampler's first tensor argument gives the output's shape and dtype (torch's
meta kernel already says so in ``ctx.out``); float16/bfloat16 samples are drawn in
float32 and rounded. ``native_dropout`` returns ``(input * mask / (1 - p), mask)`` with a
bool mask, and all-ones/identity outside training, as torch's kernel does.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch

from ._arguments import argument_check, scalar_type_name, type_meta_name
from ._registry import lowering

aten = torch.ops.aten


def _float(dtype):
    dtype = jnp.dtype(dtype)
    if jnp.issubdtype(dtype, jnp.floating) and dtype.itemsize < 4:
        return jnp.dtype(jnp.float32)
    if not (jnp.issubdtype(dtype, jnp.floating) or jnp.issubdtype(dtype, jnp.complexfloating)):
        return jnp.dtype(jnp.float32)
    return dtype


def _uniform(ctx, low=0.0, high=1.0):
    dtype = _float(ctx.dtype)
    return jax.random.uniform(ctx.key, ctx.shape, dtype, low, high)


@lowering(aten.normal_functional.default, random=True)
def normal(ctx, x, mean=0.0, std=1.0, *, generator=None):
    return jax.random.normal(ctx.key, ctx.shape, _float(ctx.dtype)) * std + mean


@lowering(
    aten.normal.Tensor_float, aten.normal.float_Tensor, aten.normal.Tensor_Tensor, random=True
)
def normal_tensor(ctx, mean, std=1.0, *, generator=None):
    noise = jax.random.normal(ctx.key, ctx.shape, _float(ctx.dtype))
    return jnp.asarray(mean) + jnp.asarray(std) * noise


@lowering(aten.uniform.default, random=True)
def uniform(ctx, x, low=0.0, high=1.0, *, generator=None):
    return _uniform(ctx, low, high)


@lowering(aten.randn_like.default, random=True)
def randn_like(ctx, x, **kwargs):
    return jax.random.normal(ctx.key, ctx.shape, _float(ctx.dtype))


@lowering(aten.rand_like.default, random=True)
def rand_like(ctx, x, **kwargs):
    return _uniform(ctx)


@lowering(aten.bernoulli.p, random=True)
def bernoulli_p(ctx, x, p=0.5, *, generator=None):
    return _uniform(ctx) < p


_BERNOULLI_P = (
    "Expected p_in >= 0 && p_in <= 1 to be true, but got false.  (Could this error "
    "message be improved?  If so, please report an enhancement request to PyTorch.)"
)


def _check_probability(ctx, p):
    ctx.check(~((p >= 0) & (p <= 1)), None, "RuntimeError", _BERNOULLI_P)


@lowering(aten.bernoulli.default, random=True, checked=True)
def bernoulli(ctx, probs, *, generator=None):
    _check_probability(ctx, probs)
    return _uniform(ctx) < probs


@lowering(aten.bernoulli.Tensor, random=True, checked=True)
def bernoulli_tensor(ctx, x, p, *, generator=None):
    _check_probability(ctx, p)
    return _uniform(ctx) < p


# Mantissa digits + 1: random_() on a float tensor draws integers in [0, 2**digits].
_FLOAT_DIGITS = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}


def _randint(ctx, low, high):
    """Integers in [low, high), then converted to the output dtype."""
    return jax.random.randint(ctx.key, ctx.shape, low, high, dtype=jnp.int64)


def _dtype_top(dtype) -> int:
    """One past the largest value random_() may draw for ``dtype`` (inclusive bound + 1)."""
    dtype = jnp.dtype(dtype)
    if dtype == jnp.bool_:
        return 2
    if dtype.name in _FLOAT_DIGITS:
        return 2 ** _FLOAT_DIGITS[dtype.name] + 1
    # int64's max + 1 does not fit in int64: that one value is never drawn.
    return min(int(jnp.iinfo(dtype).max) + 1, 2**63 - 1)


@lowering(aten.random.default, random=True)
def random_default(ctx, x, *, generator=None):
    return _randint(ctx, 0, _dtype_top(ctx.dtype))


@lowering(aten.random.to, random=True)
def random_to(ctx, x, to, *, generator=None):
    return _randint(ctx, 0, to)


@lowering("aten::random.from", random=True)  # `from` is a Python keyword
def random_from(ctx, x, low, high=None, *, generator=None):
    return _randint(ctx, low, _dtype_top(ctx.dtype) if high is None else high)


@lowering(aten.randint_like.default, aten.randint_like.Tensor, random=True)
def randint_like(ctx, x, high, **kwargs):
    return _randint(ctx, 0, high)


@lowering(aten.randint_like.low_dtype, random=True)
def randint_like_low(ctx, x, low, high, **kwargs):
    return _randint(ctx, low, high)


@lowering(aten.randperm.default, random=True)
def randperm(ctx, n, **kwargs):
    return jax.random.permutation(ctx.key, n)


@lowering(aten.exponential.default, random=True)
def exponential(ctx, x, lambd=1.0, *, generator=None):
    return jax.random.exponential(ctx.key, ctx.shape, _float(ctx.dtype)) / lambd


@lowering(aten.geometric.default, random=True)
def geometric(ctx, x, p, *, generator=None):
    # Number of Bernoulli(p) trials up to the first success: support {1, 2, ...}.
    dtype = _float(ctx.dtype)
    u = jax.random.uniform(ctx.key, ctx.shape, dtype, minval=jnp.finfo(dtype).tiny)
    return jnp.maximum(jnp.ceil(jnp.log(u) / jnp.log1p(-p)), 1)


@lowering(aten.log_normal.default, random=True)
def log_normal(ctx, x, mean=1.0, std=2.0, *, generator=None):
    return jnp.exp(jax.random.normal(ctx.key, ctx.shape, _float(ctx.dtype)) * std + mean)


@lowering(aten.cauchy.default, random=True)
def cauchy(ctx, x, median=0.0, sigma=1.0, *, generator=None):
    return median + sigma * jax.random.cauchy(ctx.key, ctx.shape, _float(ctx.dtype))


_ENTRY_MESSAGES = (
    "invalid multinomial distribution (encountering probability entry < 0)",
    "invalid multinomial distribution (encountering probability entry = infinity or NaN)",
)


@lowering(aten.multinomial.default, random=True, checked=True)
def multinomial(ctx, probs, num_samples, replacement=False, *, generator=None):
    if replacement and num_samples > 1:
        # torch's sampling kernel checks element by element: the first bad one says.
        code = jnp.where(~(probs >= 0), 0, jnp.where(~jnp.isfinite(probs), 1, -1))
        ctx.check(code >= 0, code, "RuntimeError", _ENTRY_MESSAGES)
    else:
        ctx.check(
            ~jnp.isfinite(probs) | (probs < 0),
            None,
            "RuntimeError",
            "probability tensor contains either `inf`, `nan` or element < 0",
        )
    empty = jnp.sum(probs.astype(_float(probs.dtype)), axis=-1) <= 0
    ctx.check(
        empty, None, "RuntimeError", "invalid multinomial distribution (sum of probabilities <= 0)"
    )
    logits = jnp.log(probs.astype(_float(probs.dtype)))
    if replacement:
        batch = logits.shape[:-1]
        draws = jax.random.categorical(ctx.key, logits, axis=-1, shape=(num_samples,) + batch)
        return jnp.moveaxis(draws, 0, -1)
    # Without replacement: the top k of logits + Gumbel noise is a draw of k categories
    # in order, each chosen with its probability among those not yet drawn.
    gumbel = jax.random.gumbel(ctx.key, logits.shape, logits.dtype)
    _, order = jax.lax.top_k(logits + gumbel, num_samples)
    return order


# -- dropout ---------------------------------------------------------------------------


@lowering(aten.native_dropout.default, random=True)
def native_dropout(ctx, x, p, train):
    if train is False:
        return x, jnp.ones(x.shape, jnp.bool_)
    keep_p = 1.0 - p
    scale = 0.0 if keep_p == 0 else 1.0 / keep_p
    acc = _float(x.dtype)
    keep = jax.random.uniform(ctx.key, x.shape, jnp.float32) < keep_p
    # torch multiplies by the mask, then by the scale rounded to the compute type.
    out = x.astype(acc) * keep.astype(acc) * jnp.asarray(scale, acc)
    return out, keep


@lowering(aten.native_dropout_backward.default)
def native_dropout_backward(ctx, grad, mask, scale):
    acc = _float(grad.dtype)
    # torch: grad * (mask.type_as(grad) * scale), the factor rounded to grad's dtype.
    factor = mask.astype(acc) * jnp.asarray(scale, acc)
    if grad.dtype != jnp.bool_:  # a bool grad gives float32, the factor unrounded
        factor = factor.astype(grad.dtype).astype(acc)
    return (grad.astype(acc) * factor).astype(ctx.dtype)


# -- argument checks: what the CPU kernels reject and the meta kernels let through -----


@argument_check(aten.uniform.default)
def check_uniform(x, low=0.0, high=1.0, *, generator=None):
    """``uniform_``'s bounds checks (``check_uniform_bounds``)."""
    if not x.dtype.is_floating_point:
        return
    info = torch.finfo(x.dtype)
    for value, name in ((low, "from"), (high, "to")):
        if not info.min <= value <= info.max:
            raise RuntimeError(f"{name} is out of bounds for {type_meta_name(x.dtype)}")
    if low > high:
        raise RuntimeError(
            f"uniform_ expects to return a [from, to) range, but found from={low:g} > to={high:g}"
        )
    if high - low > info.max:
        raise RuntimeError(
            f"uniform_ expects to-from <= std::numeric_limits<{scalar_type_name(x.dtype)}>::max(), "
            f"but found to={high:g} and from={low:g} which result in to-from to exceed the limit"
        )


def _check_samples(probs, num_samples: int, replacement: bool) -> None:
    if num_samples <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    categories = probs.shape[-1]
    if not replacement and num_samples > categories:
        raise RuntimeError(
            "cannot sample n_sample > prob_dist.size(-1) samples without replacement"
        )
    if categories > 1 << 24:  # the CPU kernel draws category indices in float32
        raise RuntimeError("number of categories cannot exceed 2^24")


def _check_floating(probs) -> None:
    if not probs.dtype.is_floating_point:
        raise RuntimeError(
            "multinomial only supports floating-point dtypes for input, got: "
            f"{scalar_type_name(probs.dtype)}"
        )


@argument_check(aten.multinomial.default)
def check_multinomial(probs, num_samples, replacement=False, *, generator=None):
    """``multinomial_out``'s checks after the dimension check (the meta kernel's)."""
    _check_floating(probs)
    _check_samples(probs, num_samples, replacement)


@argument_check(aten.multinomial.out)
def check_multinomial_out(probs, num_samples, replacement=False, *, generator=None, out):
    _check_floating(probs)
    if out.dtype != torch.int64:
        raise RuntimeError(
            f"multinomial expects Long tensor out, got: {scalar_type_name(out.dtype)}"
        )
    _check_samples(probs, num_samples, replacement)
