"""torch's fused optimizers (``torch.optim.Adam/AdamW/SGD(..., fused=True)``) on the device.

Contract (``FUSED_OPTIMIZER_HANDLERS``, merged into the tensor layer's special ops):
``_fused_adam_`` and ``_fused_adamw_`` (float and tensor ``lr``) update params,
exp_avgs, exp_avg_sqs (and max_exp_avg_sqs with amsgrad) in place with torch's formula
(``state_steps`` already counted up by torch.optim); ``_fused_sgd_`` params and
momentum buffers (weight decay, dampening, nesterov, maximize). Composed of lazax
``_foreach`` ops. With ``grad_scale`` the gradients are divided by it first and stored back
unscaled; with ``found_inf`` (``torch.amp.GradScaler``) a step that found an inf or a
nan leaves every tensor as it was, decided on the device (torch's kernels return early
after reading the flag on the host). So a GradScaler step with a fused optimizer reads
nothing on the host and stays one graph. In eager mode each call is one sync.
"""

from __future__ import annotations

import torch

from .amp_ops import composed

__all__ = ["FUSED_OPTIMIZER_HANDLERS"]

aten = torch.ops.aten


def _times(tensors, lr):
    if isinstance(lr, torch.Tensor):
        return aten._foreach_mul.Tensor(tensors, lr)
    return aten._foreach_mul.Scalar(tensors, lr)


def _gradients(grads, grad_scale, maximize):
    """(the gradients the step uses, the unscaled ones to store back)."""
    unscaled = grads if grad_scale is None else aten._foreach_div.Tensor(grads, grad_scale)
    return (aten._foreach_neg(unscaled) if maximize else unscaled), unscaled


def _adam(
    params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr, beta1,
    beta2, weight_decay, eps, amsgrad, maximize, grad_scale=None, found_inf=None,
    decoupled,
):  # fmt: skip
    if not params:
        return [], None
    g, unscaled = _gradients(grads, grad_scale, maximize)
    p = params
    if weight_decay != 0:
        if decoupled:  # AdamW: param *= 1 - lr * weight_decay
            p = aten._foreach_sub.List(p, _times(aten._foreach_mul.Scalar(p, weight_decay), lr))
        else:
            g = aten._foreach_add.List(g, p, alpha=weight_decay)
    m = aten._foreach_lerp.Scalar(exp_avgs, g, 1 - beta1)
    v = aten._foreach_addcmul.Scalar(aten._foreach_mul.Scalar(exp_avg_sqs, beta2), g, g, 1 - beta2)
    bias1 = aten._foreach_sub.Scalar(aten._foreach_pow.ScalarAndTensor(beta1, state_steps), 1)
    bias2 = aten._foreach_neg(
        aten._foreach_sub.Scalar(aten._foreach_pow.ScalarAndTensor(beta2, state_steps), 1)
    )
    # step_size = lr / (1 - beta1^t), written as -lr / (beta1^t - 1) to stay in foreach ops
    step_size = _times(aten._foreach_reciprocal(bias1), lr)
    second = v
    vmax = None
    if amsgrad:
        vmax = aten._foreach_maximum.List(max_exp_avg_sqs, v)
        second = vmax
    denom = aten._foreach_add.Scalar(
        aten._foreach_div.List(aten._foreach_sqrt(second), aten._foreach_sqrt(bias2)), eps
    )
    p = aten._foreach_add.List(
        p, aten._foreach_mul.List(step_size, aten._foreach_div.List(m, denom))
    )
    updates = [(params, p), (exp_avgs, m), (exp_avg_sqs, v)]
    if grad_scale is not None:
        updates.append((grads, unscaled))
    if amsgrad:
        updates.append((max_exp_avg_sqs, vmax))
    return _gated(updates, found_inf), None


def _gated(updates, found_inf):
    """Write each new value over its old one, or keep the old one after an inf."""
    skip = aten.gt.Scalar(found_inf, 0) if found_inf is not None else None
    written = []
    for olds, news in updates:
        for old, new in zip(olds, news):
            aten.copy_(old, new if skip is None else aten.where.self(skip, old, new))
            written.append(old)
    return written


def _sgd(
    params, grads, momentum_buffer_list, *, weight_decay, momentum, lr, dampening,
    nesterov, maximize, is_first_step, grad_scale=None, found_inf=None,
):  # fmt: skip
    if not params:
        return [], None
    g, unscaled = _gradients(grads, grad_scale, maximize)
    if weight_decay != 0:
        g = aten._foreach_add.List(g, params, alpha=weight_decay)
    updates = []
    if momentum != 0:
        if is_first_step:
            buf = g
        else:
            buf = aten._foreach_add.List(
                aten._foreach_mul.Scalar(momentum_buffer_list, momentum), g, alpha=1 - dampening
            )
        updates.append((momentum_buffer_list, buf))
        g = aten._foreach_add.List(g, buf, alpha=momentum) if nesterov else buf
    updates.insert(0, (params, aten._foreach_sub.List(params, _times(g, lr))))
    if grad_scale is not None:
        updates.append((grads, unscaled))
    return _gated(updates, found_inf), None


def _adam_plain(*args, **kwargs):
    return _adam(*args, **kwargs, decoupled=False)


def _adamw(*args, **kwargs):
    return _adam(*args, **kwargs, decoupled=True)


FUSED_OPTIMIZER_HANDLERS = {
    aten._fused_adam_.default: composed(_adam_plain),
    aten._fused_adam_.tensor_lr: composed(_adam_plain),
    aten._fused_adamw_.default: composed(_adamw),
    aten._fused_adamw_.tensor_lr: composed(_adamw),
    aten._fused_sgd_.default: composed(_sgd),
    aten._fused_sgd_.tensor_lr: composed(_sgd),
}
