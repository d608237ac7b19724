"""``torch.autocast("lazax")``: mixed precision with the op policy torch applies on CUDA.

Contract: ``install()`` (at import of ``lazax.executor``) registers kernels at torch's
``AutocastPrivateUse1`` key, the one ``torch.autocast(device_type="lazax")`` turns on:
- a fallthrough for every op (an op with no policy runs as it would without autocast);
- for every op overload torch gives an autocast kernel on CUDA (read from torch's own
  registrations at install), a kernel of that op's policy:
  ``LOWER`` casts floating lazax inputs (not float64) to the autocast dtype; ``FP32``
  casts them to float32; ``FP32_DTYPE`` runs reductions (``sum``, ``softmax``,
  ``cumsum``, ...) with ``dtype=float32`` unless the caller chose one; ``PROMOTE`` casts
  them to the widest of them; ``BANNED`` raises torch's error (``binary_cross_entropy``).
  Casts happen below the autocast key and above autograd, so they are differentiable
  and appear in every traced graph (lazy, eager, ``compile()``, dynamo).
- the default autocast dtype on lazax is bfloat16 (as on TPU);
  ``torch.set_autocast_dtype("lazax", ...)`` changes it.
Which policy an op gets is ``POLICY`` (torch exposes which ops have a CUDA kernel, not
which policy each has); ``missing_policies()`` names torch's ops that ``POLICY`` lacks.
"""

from __future__ import annotations

import torch

from ..config import DEVICE_NAME

__all__ = ["POLICY", "install", "missing_policies"]

LOWER, FP32, FP32_DTYPE, PROMOTE, BANNED = "lower", "fp32", "fp32_dtype", "promote", "banned"

_NAMES = {
    LOWER: """_convolution _convolution.deprecated _scaled_dot_product_flash_attention
        _thnn_fused_gru_cell _thnn_fused_lstm_cell addbmm addmm addmv addr baddbmm bmm
        chain_matmul conv1d conv2d conv3d conv_tbc conv_transpose1d conv_transpose2d.input
        conv_transpose3d.input convolution cudnn_convolution cudnn_convolution_transpose
        einsum gru_cell linalg_multi_dot linalg_vecdot linear lstm_cell matmul mm mv prelu
        rnn_relu_cell rnn_tanh_cell scaled_dot_product_attention""",
    FP32: """_upsample_bicubic2d_aa _upsample_bilinear2d_aa _upsample_nearest_exact1d
        _upsample_nearest_exact2d _upsample_nearest_exact3d acos asin
        binary_cross_entropy_with_logits cdist cosh cosine_embedding_loss
        cosine_similarity dist erfinv exp expm1 frobenius_norm.dim group_norm
        hinge_embedding_loss huber_loss kl_div l1_loss layer_norm log log10 log1p log2
        logsumexp margin_ranking_loss mse_loss multi_margin_loss multilabel_margin_loss
        native_layer_norm nll_loss nll_loss2d norm.Scalar norm.ScalarOpt_dim nuclear_norm
        nuclear_norm.dim pdist poisson_nll_loss pow.Scalar pow.Tensor_Scalar
        pow.Tensor_Tensor reciprocal renorm rms_norm rsqrt sinh smooth_l1_loss
        soft_margin_loss softplus tan triplet_margin_loss upsample_bicubic2d
        upsample_bilinear2d upsample_linear1d upsample_nearest1d upsample_nearest2d
        upsample_nearest3d upsample_trilinear3d""",
    FP32_DTYPE: """cumprod cumsum linalg_matrix_norm linalg_matrix_norm.str_ord
        linalg_vector_norm log_softmax.int prod prod.dim_int softmax.int sum
        sum.dim_IntList""",
    PROMOTE: """addcdiv addcmul atan2 bilinear cross dot grid_sampler index_put
        scatter_add tensordot vdot""",
    BANNED: "binary_cross_entropy",
}
# "name.overload" (no namespace; "name" alone is the default overload) -> policy
POLICY: dict[str, str] = {n: policy for policy, names in _NAMES.items() for n in names.split()}

_KEY = "AutocastPrivateUse1"
_BELOW = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)


def _eligible(a) -> bool:
    return (
        isinstance(a, torch.Tensor)
        and a.device.type == DEVICE_NAME
        and a.is_floating_point()
        and a.dtype != torch.float64
    )


def _cast(value, dtype):
    if _eligible(value):
        return value if value.dtype == dtype else value.to(dtype)
    if isinstance(value, (list, tuple)) and any(_eligible(v) for v in value):
        return type(value)(_cast(v, dtype) for v in value)
    return value


def _widest(args, kwargs, start):
    widest = start
    for a in (*args, *kwargs.values()):
        for t in a if isinstance(a, (list, tuple)) else (a,):
            if _eligible(t):
                widest = torch.promote_types(widest, t.dtype)
    return widest


def _first_tensor(args):
    for a in args:
        if isinstance(a, torch.Tensor):
            return a
    return None


def _casting_kernel(op, policy):
    dtype_at = next((i for i, a in enumerate(op._schema.arguments) if a.name == "dtype"), None)

    def kernel(*args, **kwargs):
        lower = torch.get_autocast_dtype(DEVICE_NAME)
        with torch._C._ExcludeDispatchKeyGuard(_BELOW):
            if policy == FP32_DTYPE:
                chosen = kwargs.get("dtype", args[dtype_at] if len(args) > dtype_at else None)
                if chosen is None and _eligible(_first_tensor(args)):
                    if len(args) > dtype_at:
                        args = (*args[:dtype_at], torch.float32, *args[dtype_at + 1 :])
                    else:
                        kwargs = {**kwargs, "dtype": torch.float32}
                return op(*args, **kwargs)
            if policy == LOWER:
                target = lower
            elif policy == FP32:
                target = torch.float32
            else:
                target = _widest(args, kwargs, lower)
            args = tuple(_cast(a, target) for a in args)
            kwargs = {k: _cast(v, target) for k, v in kwargs.items()}
            return op(*args, **kwargs)

    return kernel


def _banned_kernel(*args, **kwargs):
    raise RuntimeError(
        "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to "
        "autocast.\nMany models use a sigmoid layer right before the binary cross "
        "entropy layer.\nIn this case, combine the two layers using "
        "torch.nn.functional.binary_cross_entropy_with_logits\nor "
        "torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and "
        "BCEWithLogits are\nsafe to autocast."
    )


def _overload(name: str):
    packet, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, packet), overload or "default")


def _torch_cuda_policies() -> set[str]:
    """The aten overloads torch gives an autocast kernel on CUDA ("name.overload")."""
    names = torch._C._dispatch_get_all_op_names()
    return {
        n.split("::", 1)[1]
        for n in names
        if n.startswith("aten::")
        and torch._C._dispatch_has_kernel_for_dispatch_key(n, "AutocastCUDA")
    }


def missing_policies() -> list[str]:
    """Ops torch autocasts on CUDA that lazax has no policy for (empty unless torch
    added one since ``POLICY`` was written: such an op then runs uncast)."""
    return sorted(_torch_cuda_policies() - set(POLICY))


_LIBRARIES: list = []


def install() -> None:
    if _LIBRARIES:
        return
    everything = torch.library.Library("_", "IMPL")
    everything.fallback(torch.library.fallthrough_kernel, _KEY)
    aten = torch.library.Library("aten", "IMPL")
    present = _torch_cuda_policies()
    for name, policy in POLICY.items():
        if name not in present:
            continue  # an op this torch does not autocast (or does not have)
        op = _overload(name)
        kernel = _banned_kernel if policy == BANNED else _casting_kernel(op, policy)
        aten.impl(name, kernel, _KEY)
    _LIBRARIES.extend((everything, aten))
    torch.set_autocast_dtype(DEVICE_NAME, torch.bfloat16)
