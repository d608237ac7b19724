"""The fused recurrent cells ``nn.LSTM``, ``nn.GRU``, ``nn.LSTMCell`` and ``nn.GRUCell``
run on a device other than the CPU: ``_thnn_fused_lstm_cell``, ``_thnn_fused_gru_cell``
and their backwards.

Contract (see ``_registry``): torch's RNN layers compute the gate products themselves
(``linear``) and hand the fused op ``input_gates`` and ``hidden_gates`` (``(B, 4H)`` for
an LSTM in the order input, forget, cell, output; ``(B, 3H)`` for a GRU: reset, update,
new) and the optional biases. LSTM: ``c' = f * c + i * g``, ``h' = o * tanh(c')``.
GRU: ``n = tanh(in + r * hn)``, ``h' = n + z * (h - n)`` (the reset gate scales the
hidden half of the new gate, biases included, as torch's kernels do). The workspace is
what the backward reads: the LSTM's four activated gates (``(B, 4H)``); the GRU's
reset, update and new gates, ``h`` and ``hn`` (``(B, 5H)``). Half types compute in
float32. The output specs are given here (``output_specs``): torch's meta kernel of the
LSTM cell fails without biases, and the GRU's has none (``dispatch.kernels`` registers
these specs as the GRU's meta kernels, so that dynamo's fake tensors run them too).
"""

from __future__ import annotations

import jax.numpy as jnp
import torch

from ._arguments import output_specs
from ._nn_common import acc_dtype
from ._registry import lowering

aten = torch.ops.aten

__all__ = ["gru_cell_specs", "gru_cell_backward_specs"]


def _gates(input_gates, hidden_gates, input_bias, hidden_bias, acc):
    gates = input_gates.astype(acc) + hidden_gates.astype(acc)
    if input_bias is not None:
        gates = gates + input_bias.astype(acc)
    if hidden_bias is not None:
        gates = gates + hidden_bias.astype(acc)
    return gates


def _sigmoid(x):
    return 1 / (1 + jnp.exp(-x))


def _meta(shape, like):
    return torch.empty(shape, dtype=like.dtype, device="meta")


@output_specs(aten._thnn_fused_lstm_cell.default)
def lstm_cell_specs(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    return _meta(cx.shape, cx), _meta(cx.shape, cx), _meta(input_gates.shape, input_gates)


@lowering(aten._thnn_fused_lstm_cell.default)
def lstm_cell(ctx, input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    acc = acc_dtype(input_gates.dtype)
    gates = _gates(input_gates, hidden_gates, input_bias, hidden_bias, acc)
    i, f, g, o = jnp.split(gates, 4, axis=1)
    i, f, g, o = _sigmoid(i), _sigmoid(f), jnp.tanh(g), _sigmoid(o)
    cy = f * cx.astype(acc) + i * g
    hy = o * jnp.tanh(cy)
    return hy, cy, jnp.concatenate([i, f, g, o], axis=1)


@lowering(aten._thnn_fused_lstm_cell_backward_impl.default)
def lstm_cell_backward(ctx, grad_hy, grad_cy, cx, cy, workspace, has_bias):
    """(gradient of the gates, of ``c``, of the bias: the gates' summed over the batch)."""
    acc = acc_dtype(workspace.dtype)
    i, f, g, o = jnp.split(workspace.astype(acc), 4, axis=1)
    cx, cy = cx.astype(acc), cy.astype(acc)
    tanh_cy = jnp.tanh(cy)
    g_cy = jnp.zeros_like(cy) if grad_cy is None else grad_cy.astype(acc)
    g_hy = jnp.zeros_like(cy) if grad_hy is None else grad_hy.astype(acc)
    g_c = g_cy + g_hy * o * (1 - tanh_cy * tanh_cy)
    grads = jnp.concatenate(
        [
            g_c * g * i * (1 - i),
            g_c * cx * f * (1 - f),
            g_c * i * (1 - g * g),
            g_hy * tanh_cy * o * (1 - o),
        ],
        axis=1,
    )
    if not has_bias:  # the bias gradient is undefined (None), as torch's
        return grads, g_c * f
    return grads, g_c * f, jnp.sum(grads, axis=0)


@output_specs(aten._thnn_fused_gru_cell.default)
def gru_cell_specs(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    """``(h', workspace)``: the GRU cell's meta kernel."""
    if input_gates.shape != hidden_gates.shape or input_gates.shape[1] != 3 * hx.shape[1]:
        raise RuntimeError(
            f"_thnn_fused_gru_cell: expected gates of shape {(hx.shape[0], 3 * hx.shape[1])}, "
            f"got {tuple(input_gates.shape)} and {tuple(hidden_gates.shape)}"
        )
    return _meta(hx.shape, hx), _meta((hx.shape[0], 5 * hx.shape[1]), hx)


@lowering(aten._thnn_fused_gru_cell.default)
def gru_cell(ctx, input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    acc = acc_dtype(input_gates.dtype)
    zeros = jnp.zeros(input_gates.shape[1], acc)
    ib = zeros if input_bias is None else input_bias.astype(acc)
    hb = zeros if hidden_bias is None else hidden_bias.astype(acc)
    ir, iz, in_ = jnp.split(input_gates.astype(acc) + ib, 3, axis=1)
    hr, hz, hn = jnp.split(hidden_gates.astype(acc) + hb, 3, axis=1)
    r = _sigmoid(ir + hr)
    z = _sigmoid(iz + hz)
    n = jnp.tanh(in_ + r * hn)
    h = hx.astype(acc)
    hy = n + z * (h - n)
    return hy, jnp.concatenate([r, z, n, h, hn], axis=1)


@output_specs(aten._thnn_fused_gru_cell_backward.default)
def gru_cell_backward_specs(grad_hy, workspace, has_bias):
    """The GRU cell backward's meta kernel: gradients of both gate inputs, ``h`` and
    both biases (None without biases)."""
    batch, hidden = grad_hy.shape
    gates = _meta((batch, 3 * hidden), grad_hy)
    bias = _meta((3 * hidden,), grad_hy) if has_bias else None
    return gates, _meta((batch, 3 * hidden), grad_hy), _meta(grad_hy.shape, grad_hy), bias, bias


@lowering(aten._thnn_fused_gru_cell_backward.default)
def gru_cell_backward(ctx, grad_hy, workspace, has_bias):
    acc = acc_dtype(workspace.dtype)
    r, z, n, h, hn = jnp.split(workspace.astype(acc), 5, axis=1)
    g = grad_hy.astype(acc)
    d_n = g * (1 - z) * (1 - n * n)
    d_z = g * (h - n) * z * (1 - z)
    d_r = d_n * hn * r * (1 - r)
    input_gates = jnp.concatenate([d_r, d_z, d_n], axis=1)
    hidden_gates = jnp.concatenate([d_r, d_z, d_n * r], axis=1)
    if not has_bias:
        return input_gates, hidden_gates, g * z
    return (
        input_gates,
        hidden_gates,
        g * z,
        jnp.sum(input_gates, axis=0),
        jnp.sum(hidden_gates, axis=0),
    )
