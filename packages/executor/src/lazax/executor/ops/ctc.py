"""Connectionist temporal classification: ``_ctc_loss`` and ``_ctc_loss_backward``
(``F.ctc_loss``, ``nn.CTCLoss``), with int-list lengths (``.default``; ``F.ctc_loss``
with tensor lengths converts them to lists first) and tensor lengths (``.Tensor``).

Contract: ``_ctc_loss(log_probs (T, N, C), targets, input_lengths, target_lengths,
blank, zero_infinity)`` returns ``(neg_log_likelihood (N,), log_alpha (N, T, 2L + 1))``
as torch's CPU kernel: targets are 2-D padded ``(N, >= L)`` or 1-D concatenated (``L``
the longest target); the extended target ``l'`` puts ``blank`` around every label, and
``log_alpha`` follows the forward recursion over time (a ``lax.scan``) with the CPU
kernel's log-sum-exp (the maximum taken out, 0 when every term is -inf). Entries the CPU
kernel leaves unwritten (past a sample's input length or extended target) are -inf
here. A sample with input length 0 has likelihood 1 for an empty target, else 0.
Reduction and ``zero_infinity``'s masking of the loss are torch's, outside the op.
The backward is torch's formula, not the ``jax.vjp`` of the forward (it assumes
log-softmax inputs): with beta the backward recursion (a reverse ``lax.scan``) and
``r[t, c]`` the log-sum of ``alpha + beta`` over the ``s`` with ``l'[s] == c``,
``grad[t, n, c] = (exp(lp) - exp(r + nll - lp)) * grad_out[n]`` for ``t`` below the input
length, 0 past it and for a sample whose loss is infinite under ``zero_infinity``.
The log-sum over classes is a max, then a sum of exponentials, per class (two scatters).
Dtypes as the CPU kernel: float32 and float64 (the meta kernel refuses the others).
Errors are the meta kernel's; ``.Tensor`` with 1-D targets has a data-dependent
``log_alpha`` width and runs through the CPU fallback.
"""

from __future__ import annotations

import jax.numpy as jnp
import torch
from jax import lax

from ._arguments import RunOnCpu, argument_check, output_specs, scalar_type_name
from ._registry import lowering

aten = torch.ops.aten


def _lse(terms):
    """torch's CPU log-sum-exp of a few terms: the maximum (0 if -inf) taken out."""
    m = terms[0]
    for t in terms[1:]:
        m = jnp.maximum(m, t)
    m = jnp.where(m == -jnp.inf, jnp.zeros((), m.dtype), m)
    total = jnp.exp(terms[0] - m)
    for t in terms[1:]:
        total = total + jnp.exp(t - m)
    return jnp.log(total) + m


def _extended(targets, target_lengths, n, width, blank):
    """``l'`` (N, S) for S = ``width``; its valid mask; where the skip from ``s - 2`` is
    allowed; the label positions are clamped into the targets (masked later)."""
    s = jnp.arange(width)
    k = (s - 1) // 2  # the label index of odd s
    tl = target_lengths.astype(jnp.int64)
    if targets.ndim == 2:
        cols = jnp.clip(k, 0, max(targets.shape[1] - 1, 0))
        labels = targets[:, cols] if targets.shape[1] else jnp.zeros((n, width), targets.dtype)
    else:
        offsets = jnp.cumsum(tl) - tl
        flat = jnp.clip(offsets[:, None] + k[None, :], 0, max(targets.shape[0] - 1, 0))
        labels = targets[flat] if targets.shape[0] else jnp.zeros((n, width), targets.dtype)
    odd = (s % 2 == 1)[None, :]
    valid = s[None, :] < 2 * tl[:, None] + 1
    # Past a target's end l' reads blank (its labels there may be any padding value).
    lprime = jnp.where(odd & valid, labels.astype(jnp.int64), blank)
    prev2 = jnp.pad(lprime, ((0, 0), (2, 0)), constant_values=-1)[:, :width]
    skip = (s[None, :] > 1) & (prev2 != lprime)
    return lprime, valid, skip


def _shift(x, k, fill):
    """``x[..., s - k]`` (``fill`` where ``s - k < 0``), or ``x[..., s + |k|]`` for k < 0."""
    pad = [(0, 0)] * (x.ndim - 1)
    if k > 0:
        return jnp.pad(x, pad + [(k, 0)], constant_values=fill)[..., : x.shape[-1]]
    return jnp.pad(x, pad + [(0, -k)], constant_values=fill)[..., -k:]


def _setup(log_probs, targets, input_lengths, target_lengths, blank, width):
    t_max, n, _ = log_probs.shape
    il = jnp.asarray(input_lengths, jnp.int64).reshape(n)
    tl = jnp.asarray(target_lengths, jnp.int64).reshape(n)
    lprime, valid, skip = _extended(targets, tl, n, width, blank)
    # lp_ext[t, n, s] = log_probs[t, n, l'[n, s]]
    lp_ext = jnp.take_along_axis(log_probs, jnp.broadcast_to(lprime, (t_max, n, width)), axis=2)
    return il, tl, lprime, valid, skip, lp_ext


def _alpha(lp_ext, il, tl, valid, skip):
    t_max, n, width = lp_ext.shape
    neginf = jnp.asarray(-jnp.inf, lp_ext.dtype)
    s = jnp.arange(width)[None, :]
    first = (s == 0) | ((s == 1) & (tl[:, None] > 0))
    alpha0 = jnp.where(first, lp_ext[0], neginf)

    def step(prev, inputs):
        t, lp_t = inputs
        la2 = _shift(prev, 1, neginf)
        la3 = jnp.where(skip, _shift(prev, 2, neginf), neginf)
        new = _lse([prev, la2, la3]) + lp_t
        new = jnp.where(valid & (t < il)[:, None], new, neginf)
        return new, new

    if t_max > 1:
        _, rest = lax.scan(step, alpha0, (jnp.arange(1, t_max), lp_ext[1:]))
        alphas = jnp.concatenate([alpha0[None], rest], axis=0)
    else:
        alphas = alpha0[None]
    return alphas  # (T, N, S)


def _nll(alphas, il, tl):
    n = alphas.shape[1]
    last = alphas[jnp.clip(il - 1, 0, None), jnp.arange(n)]  # (N, S)
    l1 = jnp.take_along_axis(last, (2 * tl)[:, None], axis=1)[:, 0]
    l2 = jnp.take_along_axis(last, jnp.maximum(2 * tl - 1, 0)[:, None], axis=1)[:, 0]
    ll = jnp.where(tl == 0, l1, _lse([l1, l2]))
    zero = jnp.zeros((), alphas.dtype)
    empty = jnp.where(tl == 0, zero, jnp.asarray(-jnp.inf, alphas.dtype))
    return -jnp.where(il == 0, empty, ll)


def _forward(ctx, log_probs, targets, input_lengths, target_lengths, blank):
    width = ctx.out[1][0][2]
    il, tl, _, valid, skip, lp_ext = _setup(
        log_probs, targets, input_lengths, target_lengths, blank, width
    )
    if log_probs.shape[0] == 0:
        return -jnp.zeros(il.shape, log_probs.dtype), jnp.zeros(ctx.out[1][0], log_probs.dtype)
    alphas = _alpha(lp_ext, il, tl, valid, skip)
    return _nll(alphas, il, tl), jnp.transpose(alphas, (1, 0, 2))


@lowering(aten._ctc_loss.default, aten._ctc_loss.Tensor)
def ctc_loss(ctx, log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    return _forward(ctx, log_probs, targets, input_lengths, target_lengths, blank)


@output_specs(aten._ctc_loss.Tensor)
def ctc_loss_tensor_specs(
    log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False
):
    """No meta kernel. With 2-D targets the shapes are known (``ctc_loss_tensor_check``
    sends 1-D targets to the CPU: a placeholder width here)."""
    t_max, n = log_probs.shape[0], log_probs.shape[1]
    if targets.dim() == 2:
        # The meta kernel of .default checks shapes, dtypes and blank.
        aten._ctc_loss.default(log_probs, targets, [t_max] * n, [0] * n, blank, zero_infinity)
    width = 2 * targets.shape[1] + 1 if targets.dim() == 2 else 1
    nll = torch.empty((n,), dtype=log_probs.dtype, device="meta")
    log_alpha = torch.empty((n, t_max, width), dtype=log_probs.dtype, device="meta")
    return nll, log_alpha


@argument_check(aten._ctc_loss.Tensor)
def ctc_loss_tensor_check(
    log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False
):
    if targets.dim() != 2:
        raise RunOnCpu(
            "_ctc_loss.Tensor with 1-D targets: log_alpha's width is the longest target "
            "length, a value of target_lengths"
        )


def _beta(lp_ext, il, tl, valid, lprime):
    t_max, n, width = lp_ext.shape
    neginf = jnp.asarray(-jnp.inf, lp_ext.dtype)
    s = jnp.arange(width)[None, :]
    next2 = _shift(lprime, -2, -1)
    skip_next = (s < 2 * tl[:, None] - 1) & (next2 != lprime)
    has_next = s < 2 * tl[:, None]
    last = (s == 2 * tl[:, None]) | ((s == 2 * tl[:, None] - 1) & (tl[:, None] > 0))

    def step(nxt, inputs):
        t, lp_t = inputs
        lb2 = jnp.where(has_next, _shift(nxt, -1, neginf), neginf)
        lb3 = jnp.where(skip_next, _shift(nxt, -2, neginf), neginf)
        new = _lse([nxt, lb2, lb3]) + lp_t
        at_end = (t == il - 1)[:, None]
        new = jnp.where(at_end, jnp.where(last, lp_t, neginf), new)
        new = jnp.where(valid & (t < il)[:, None], new, neginf)
        return new, new

    init = jnp.full((n, width), neginf)
    _, betas = lax.scan(step, init, (jnp.arange(t_max), lp_ext), reverse=True)
    return betas  # (T, N, S)


def _backward(
    ctx,
    grad,
    log_probs,
    targets,
    input_lengths,
    target_lengths,
    nll,
    log_alpha,
    blank,
    zero_infinity,
):
    t_max, n, c = log_probs.shape
    width = log_alpha.shape[2]
    if t_max == 0 or n == 0:
        return jnp.zeros(log_probs.shape, log_probs.dtype)
    il, tl, lprime, valid, _, lp_ext = _setup(
        log_probs, targets, input_lengths, target_lengths, blank, width
    )
    betas = _beta(lp_ext, il, tl, valid, lprime)
    alphas = jnp.transpose(log_alpha, (1, 0, 2))
    live = valid[None] & (jnp.arange(t_max)[:, None, None] < il[None, :, None])
    neginf = jnp.asarray(-jnp.inf, log_probs.dtype)
    ab = jnp.where(live, alphas + betas, neginf)  # (T, N, S)
    where = (slice(None), jnp.arange(n)[:, None], lprime)
    m = jnp.full((t_max, n, c), neginf).at[where].max(ab)
    m = jnp.where(m == -jnp.inf, jnp.zeros((), m.dtype), m)
    terms = jnp.exp(ab - m[where])
    r = jnp.log(jnp.zeros((t_max, n, c), log_probs.dtype).at[where].add(terms)) + m
    nll = nll.astype(log_probs.dtype)
    out = (jnp.exp(log_probs) - jnp.exp(r + nll[None, :, None] - log_probs)) * grad.astype(
        log_probs.dtype
    )[None, :, None]
    keep = jnp.arange(t_max)[:, None] < il[None, :]  # (T, N)
    if zero_infinity:
        keep = keep & (nll != jnp.inf)[None, :]
    return jnp.where(keep[:, :, None], out, jnp.zeros((), out.dtype))


@output_specs(aten._ctc_loss_backward.default, aten._ctc_loss_backward.Tensor)
def ctc_loss_backward_specs(
    grad, log_probs, targets, input_lengths, target_lengths, nll, log_alpha, blank,
    zero_infinity=False,
):  # fmt: skip
    """No meta kernel: the CPU kernel's gradient is ``log_probs``' shape and dtype."""
    if log_probs.dtype not in (torch.float32, torch.float64):
        name = scalar_type_name(log_probs.dtype)
        raise NotImplementedError(f"\"ctc_loss_backward_cpu\" not implemented for '{name}'")
    return torch.empty(log_probs.shape, dtype=log_probs.dtype, device="meta")


@lowering(aten._ctc_loss_backward.default, aten._ctc_loss_backward.Tensor)
def ctc_loss_backward(
    ctx, grad, log_probs, targets, input_lengths, target_lengths, nll, log_alpha, blank,
    zero_infinity=False,
):  # fmt: skip
    return _backward(
        ctx, grad, log_probs, targets, input_lengths, target_lengths, nll, log_alpha, blank,
        zero_infinity,
    )  # fmt: skip
