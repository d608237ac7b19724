"""Weight normalization's fused op: ``_weight_norm_interface`` (+ backward), what
``torch.nn.utils.weight_norm`` and ``parametrizations.weight_norm`` call for ``dim`` 0
or the last dimension.

Contract: ``_weight_norm_interface(v, g, dim)`` returns ``(w, norms)`` with
``norms = ||v||`` over every dimension but ``dim`` (kept as size 1, ``g``'s shape) and
``w = v * (g / norms)``, as torch's CPU kernel computes it: float16/bfloat16 inputs are
upcast to float32 (``_nn_common.acc_dtype``) for the sums and the products, and
``norms`` is float32 for them (the CPU kernel's dtype: the meta kernel says float16 for
float16, so the specs are registered here). The backward follows the CPU kernel's
formula from the saved norms: with ``s = sum(grad_w * v)`` over the same dimensions,
``grad_g = s / norms`` and ``grad_v = (g / norms) * grad_w - (g * s / norms**3) * v``.
Only ``dim == 0`` and ``dim == v.dim() - 1`` are fused kernels; any other ``dim`` raises
the CPU kernel's internal assert (torch's ``_weight_norm`` never sends one).
"""

from __future__ import annotations

import jax.numpy as jnp
import torch

from ._arguments import argument_check, output_specs
from ._nn_common import acc_dtype
from ._registry import lowering

aten = torch.ops.aten

_NOT_FUSED = (
    "dim == 0 || dim == v.dim() - 1 INTERNAL ASSERT FAILED at "
    '"/__w/pytorch/pytorch/aten/src/ATen/native/cpu/WeightNormKernel.cpp":408, please '
    "report a bug to PyTorch. fused kernels can only be applied for first or last dim"
)


def _check_dim(v, dim):
    if dim != 0 and dim != v.dim() - 1:
        raise RuntimeError(_NOT_FUSED)


@output_specs(aten._weight_norm_interface.default)
def weight_norm_interface_specs(v, g, dim=0):
    w, norms = aten._weight_norm_interface.default(v, g, dim)
    _check_dim(v, dim)
    dtype = torch.float32 if v.dtype in (torch.float16, torch.bfloat16) else norms.dtype
    return w, torch.empty_strided(g.shape, g.stride(), dtype=dtype, device="meta")


@argument_check(aten._weight_norm_interface_backward.default)
def weight_norm_interface_backward_check(grad_w, saved_v, saved_g, saved_norms, dim):
    _check_dim(saved_v, dim)


def _other_axes(x, dim):
    return tuple(a for a in range(x.ndim) if a != dim)


@lowering(aten._weight_norm_interface.default)
def weight_norm_interface(ctx, v, g, dim=0):
    acc = acc_dtype(v.dtype)
    vv = v.astype(acc)
    norms = jnp.sqrt(jnp.sum(vv * vv, axis=_other_axes(vv, dim), keepdims=True))
    w = vv * (g.astype(acc).reshape(norms.shape) / norms)
    return w, norms.reshape(ctx.out[1][0])


@lowering(aten._weight_norm_interface_backward.default)
def weight_norm_interface_backward(ctx, grad_w, saved_v, saved_g, saved_norms, dim):
    acc = acc_dtype(saved_v.dtype)
    v, gw = saved_v.astype(acc), grad_w.astype(acc)
    s = jnp.sum(gw * v, axis=_other_axes(v, dim), keepdims=True)
    norm = saved_norms.astype(acc).reshape(s.shape)
    a = saved_g.astype(acc).reshape(s.shape) / norm
    b = a * s / (norm * norm)
    return a * gw - b * v, (s / norm).reshape(ctx.out[1][0])
