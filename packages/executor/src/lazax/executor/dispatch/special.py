"""Ops the tensor layer handles itself: copies, transfers and reads.

Contract: ``SPECIAL`` maps aten overloads to handlers ``(args, kwargs) -> result``;
``register_special`` adds more (the hooks: ``set_`` on storages).
- ``copy_``: into a lazax tensor from a lazax or CPU tensor (broadcast, dtype cast), in
  place and through views; into a CPU tensor from a lazax one (a read).
- ``_to_copy``: to CPU reads the value (syncs); on lazax it is a dtype conversion.
- ``_local_scalar_dense`` (``.item()``): syncs and reads one element.
- ``equal`` (``torch.equal``): a Python bool, as torch's: False for different sizes,
  else every element equal (after promotion; NaN is unequal), computed on the device and
  read (one sync), not on the CPU fallback.
- ``allclose`` (``torch.allclose``): a Python bool, ``isclose(...).all()`` computed on
  the device and read (one sync), torch's checks and messages (``isclose``'s dtype rule).
- ``_linalg_check_errors`` (``torch.linalg.inv``, ``solve``, ``cholesky``,
  ``lu_factor``): no host read; ``lazax::linalg_check`` checks ``info`` on the device,
  held (``CHECKS.hold``) until the next sync or read runs it: torch's
  ``LinAlgError`` raises there (in eager mode, at the call).
- ``new_empty_strided``: ``torch.empty_strided`` on ``self``'s device, strides kept.
- ``narrow`` reached whole (from torch kernels below autograd): the slice, a view.
- ``native_batch_norm``: the functional form, with the running statistics written back;
  ``_native_batch_norm_legit`` alike, ``_batch_norm_with_update`` (training) and
  ``_batch_norm_no_update`` (evaluation) with the CPU kernel's empty uint8 reserve, and
  ``batch_norm_backward`` as ``native_batch_norm_backward``.
- ``polygamma_(self, n)``: ``polygamma(n, self)`` written into ``self`` (the in-place
  form takes its arguments in the other order, so no functional overload matches it),
  with torch's error for a result its dtype cannot hold.
- AMP's and the fused optimizers' ops (``amp_ops``, ``fused_optim``), packing padded
  sequences (``packed_sequences``).
``write_outs`` puts results into ``out=`` tensors, resized as torch resizes them.
"""

from __future__ import annotations

import warnings

import torch

from lazax import ir

from .. import metrics
from ..barrier.checks import CHECKS
from ..barrier.executor import EXECUTOR
from ..ops._arguments import scalar_type_name
from ..ops.manual import MANUAL
from ..ops.pseudo import copy_to
from ..state.dtypes import dtype_name
from ..state.values import ir_value, write
from ..tensor.lazy import LazyTensor, resize_to
from ..tensor.moves import to_device_index
from ..tensor.streams import current_index
from ..tensor.transfer import from_cpu, to_cpu
from .amp_ops import AMP_HANDLERS, composed
from .fused_optim import FUSED_OPTIMIZER_HANDLERS
from .packed_sequences import PACKED_HANDLERS
from .plans import FUNCTIONAL, OpPlan
from .run import run_plan

__all__ = ["SPECIAL", "copy_into", "copy_from", "register_special", "resize_out", "write_outs"]


def write_outs(outs: list, results) -> torch.Tensor | tuple:
    """Each result into its ``out=`` tensor (resized as torch resizes it); the outs."""
    for out, value in zip(outs, results):
        if tuple(out.shape) != tuple(value.shape):
            resize_out(out, value)
        else:
            copy_into(out, value)
    return outs[0] if len(outs) == 1 else tuple(outs)


aten = torch.ops.aten


def copy_into(dst: LazyTensor, src: torch.Tensor) -> None:
    """``dst.copy_(src)`` for a lazax ``dst``: broadcast, cast, write (through views)."""
    _copy_((dst, src), {})


def _copy_(args, kwargs):
    dst, src = args[0], args[1]
    if type(dst) is not LazyTensor:
        dst.copy_(to_cpu(src))
        return dst
    _write_copy(dst, src)
    if EXECUTOR.eager:  # after _write_copy's frame, which held the new IR, is gone
        EXECUTOR.sync_storages([dst._lz_storage], hold_manual=True)
    return dst


def _write_copy(dst: LazyTensor, src) -> None:
    if type(src) is LazyTensor:
        if src._lz_storage.device_index != dst._lz_storage.device_index:
            src = to_device_index(src, dst._lz_storage.device_index)  # copy_ across devices
        value = ir_value(src)
    else:  # a CPU tensor, or a Python number (``x.copy_(2)``, as torch accepts)
        src = src if isinstance(src, torch.Tensor) else torch.tensor(src)
        value = from_cpu(src, dst._lz_storage.device_index)
    shape = tuple(dst.shape)
    dtype = dtype_name(dst.dtype)
    if value.spec.shape != shape:
        broadcast = torch.broadcast_shapes(value.spec.shape, shape)  # torch's error
        if broadcast != shape:
            raise RuntimeError(
                f"output with shape {list(shape)} doesn't match the broadcast shape "
                f"{list(broadcast)}"
            )
    if MANUAL.active:  # a copy between two meshes' per-device values is refused here
        MANUAL.one_mesh([dst._lz_storage.value.node, value.node], "copy_")
    if value.spec != ir.TensorSpec(shape, dtype):
        value = copy_to(value, shape, dtype)
    write(dst, value)


def resize_out(out: LazyTensor, value: LazyTensor) -> None:
    """An ``out=`` tensor of another shape than the result: torch resizes it (and warns
    when it had elements); then it holds the result, cast to its dtype."""
    if out.numel() != 0:
        warnings.warn(
            f"An output with one or more elements was resized since it had shape "
            f"{list(out.shape)}, which does not match the required output shape "
            f"{list(value.shape)}. This behavior is deprecated, and in a future PyTorch "
            f"release outputs will not be resized unless they have zero elements. You can "
            f"explicitly reuse an out tensor t by resizing it, inplace, to zero elements "
            f"with t.resize_(0).",
            UserWarning,
            stacklevel=4,
        )
    shape = tuple(value.shape)
    src = ir_value(value)
    dtype = dtype_name(out.dtype)
    if src.spec.dtype != dtype:
        src = copy_to(src, shape, dtype)
    resize_to(out, shape, src)
    if EXECUTOR.eager:
        EXECUTOR.sync_storages([out._lz_storage], hold_manual=True)


_TO_COPY_PLAN = OpPlan(aten._to_copy.default, "aten::_to_copy", FUNCTIONAL)


def _to_copy(args, kwargs):
    src = args[0]
    device = kwargs.get("device")
    if device is not None and torch.device(device).type == "cpu":
        out = to_cpu(src)
        dtype = kwargs.get("dtype")
        if dtype is not None and dtype != out.dtype:
            out = out.to(dtype)
        return out
    kwargs = {k: v for k, v in kwargs.items() if k in ("dtype",) and v is not None}
    index = src._lz_storage.device_index
    if device is not None:
        wanted = torch.device(device).index
        wanted = current_index() if wanted is None else wanted  # "lazax": the current one
        if wanted != index:
            src = to_device_index(src, wanted)  # lazax:M <- lazax:N
    return run_plan(_TO_COPY_PLAN, (src, *args[1:]), kwargs)


def _local_scalar_dense(args, kwargs):
    metrics.bump("ScalarReads")
    return to_cpu(args[0]).item()


def _equal(args, kwargs):
    a, b = args
    if a.shape != b.shape:
        return False
    return bool(aten._local_scalar_dense.default(aten.all.default(aten.eq.Tensor(a, b))))


def _allclose(args, kwargs):
    # torch's allclose is ``isclose(...).all().item()`` (CompositeExplicitAutograd, so a
    # tensor subclass sees it whole): the same on the device, one read of one element.
    close = aten.isclose.default(*args, **kwargs)
    return bool(aten._local_scalar_dense.default(aten.all.default(close)))


def _linalg_check_errors(args, kwargs):
    # torch reads ``info`` on the host here (a sync per call, and no full_graph region
    # or replayed graph could hold the call); checked on the device instead.
    if EXECUTOR.capture_guard is not None:
        # A loop or branch body being traced: nothing could hold the check (its values
        # are stand-ins), and device-side checks inside bodies are not made (``loops``).
        return None
    info, api_name = args[:2]
    is_matrix = kwargs["is_matrix"] if "is_matrix" in kwargs else args[2]
    ok = torch.ops.lazax.linalg_check(info, api_name, is_matrix)
    if ok._lz_storage.pending:  # lazy: nothing reads it, so it must be held
        CHECKS.hold(ok)


def _narrow(args, kwargs):
    # Composite in torch (a slice), but reached whole from torch's kernels that run
    # below autograd (the periodic windows: hann_window, ...): the slice, a view.
    x, dim, start, length = args
    if isinstance(start, torch.Tensor):  # narrow.Tensor: a 0-dim start, read (as torch)
        start = int(start.item())
    size = x.shape[dim]
    if not -size <= start <= size:
        raise IndexError(
            f"start out of range (expected to be in range of [{-size}, {size}], but got {start})"
        )
    start = start % size if start < 0 else start
    if start + length > size:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({size}).")
    return aten.slice.Tensor(x, dim, start, start + length)


def _new_empty_strided(args, kwargs):
    # Through the factory, which keeps the strides (dispatch.kernels).
    x, size, stride = args
    dtype = kwargs.get("dtype") or x.dtype
    return torch.empty_strided(size, stride, dtype=dtype, device=x.device)


def _batch_norm_written(*args):
    # native_batch_norm updates running_mean/running_var in place although its schema
    # does not say so; run the functional form and write the new statistics back.
    # In eager mode the whole op (output, statistics, running stats) is one sync.
    outs, written = _batch_norm_lazily(*args)
    return [*outs, *written], outs


_native_batch_norm = composed(_batch_norm_written)


def _batch_norm_lazily(x, weight, bias, running_mean, running_var, training, momentum, eps):
    if not training:
        outs = aten._native_batch_norm_legit_no_training(
            x, weight, bias, running_mean, running_var, momentum, eps
        )
        return outs, []
    if running_mean is None or running_var is None:
        return aten._native_batch_norm_legit.no_stats(x, weight, bias, True, momentum, eps), []
    out, mean, rstd, new_mean, new_var = aten._native_batch_norm_legit_functional(
        x, weight, bias, running_mean, running_var, True, momentum, eps
    )
    copy_into(running_mean, new_mean)
    copy_into(running_var, new_var)
    return (out, mean, rstd), [running_mean, running_var]


def _batch_norm_with_update_written(x, weight, bias, running_mean, running_var, momentum, eps):
    # The training form torch.export and AOT traces call: running stats updated in place,
    # and an empty uint8 "reserve" as the CPU kernel's fourth output.
    args = (x, weight, bias, running_mean, running_var, True, momentum, eps)
    outs, written = _batch_norm_lazily(*args)
    reserve = torch.empty((0,), dtype=torch.uint8, device=x.device)
    return [*outs, *written], (*outs, reserve)


def _batch_norm_no_update_written(x, weight, bias, running_mean, running_var, momentum, eps):
    # The evaluation form: the running statistics normalize, nothing is written, and the
    # saved statistics are empty, as on the CPU.
    outs = aten._native_batch_norm_legit_no_training(
        x, weight, bias, running_mean, running_var, momentum, eps
    )
    reserve = torch.empty((0,), dtype=torch.uint8, device=x.device)
    return list(outs), (*outs, reserve)


def _batch_norm_backward(args, kwargs):
    # batch_norm_backward (the backward of _batch_norm_with_update/_no_update) is the
    # CPU kernel's native_batch_norm_backward with ``train = update``; the reserve is unused.
    grad, x, weight, rmean, rvar, smean, svar, update, eps, mask = args[:10]
    return aten.native_batch_norm_backward(
        grad, x, weight, rmean, rvar, smean, svar, update, eps, mask
    )


def _polygamma_(args, kwargs):
    self, n = args
    result = aten.polygamma.default(n, self)
    if not torch.can_cast(result.dtype, self.dtype):
        raise RuntimeError(
            f"result type {scalar_type_name(result.dtype)} can't be cast to the desired "
            f"output type {scalar_type_name(self.dtype)}"
        )
    return self.copy_(result)


SPECIAL = {
    aten.native_batch_norm.default: _native_batch_norm,
    aten.polygamma_.default: _polygamma_,
    # Same arguments as native_batch_norm, the same in-place update of the running stats.
    aten._native_batch_norm_legit.default: _native_batch_norm,
    aten._batch_norm_with_update.default: composed(_batch_norm_with_update_written),
    aten._batch_norm_no_update.default: composed(_batch_norm_no_update_written),
    aten.batch_norm_backward.default: _batch_norm_backward,
    aten.copy_.default: _copy_,
    aten._to_copy.default: _to_copy,
    aten._local_scalar_dense.default: _local_scalar_dense,
    aten.equal.default: _equal,
    aten.allclose.default: _allclose,
    aten.new_empty_strided.default: _new_empty_strided,
    aten.narrow.default: _narrow,
    aten._linalg_check_errors.default: _linalg_check_errors,
    aten.narrow.Tensor: _narrow,
    **AMP_HANDLERS,
    **FUSED_OPTIMIZER_HANDLERS,
    **PACKED_HANDLERS,
}


def register_special(handlers: dict) -> None:
    """Let a hook handle these aten overloads itself (before the first op runs)."""
    SPECIAL.update(handlers)


def copy_from(src, dst, non_blocking=False):
    """torch's ``_copy_from`` (PrivateUse1): ``dst.copy_(src)``."""
    return _copy_((dst, src), {})
