"""Host <-> device transfers of tensors: upload a CPU tensor, read a lazax one.

Contract: ``from_cpu(t, device_index, sharding=None)`` uploads a CPU tensor
(asynchronously; over ``sharding``'s devices, split, when given) and returns its
device-data value; ``to_cpu(t)`` syncs ``t`` if it is pending, waits for
its value and returns it as a new CPU tensor, then raises the first failed device-side
check of every program that has finished (``barrier.checks``). ``jax_value(t)`` syncs
``t`` if it is pending and returns its buffer, a ``jax.Array`` (not waited for): the
storage's own for a tensor that is not a view, a new one for a view (or for a value
held padded, split unevenly over a mesh: the padding cut off). A view of materialised data is
sliced on the host from its base where the base is small (no compile per view).
Transfers are timed (``TransferToDeviceTime``, ``TransferFromDeviceTime``); a read of a
value held over several devices counts ``ReplicateShardedData``; running out
of device memory raises ``torch.OutOfMemoryError``.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from lazax import ir, pjrt

from .. import metrics
from ..barrier.executor import EXECUTOR
from ..barrier.oom import out_of_memory
from ..profiling import span
from ..state.dtypes import dtype_name, torch_dtype
from ..state.values import ir_value

__all__ = ["from_cpu", "host_tensor", "jax_value", "to_cpu", "to_numpy"]

_VIEW_AS = {
    torch.bfloat16: torch.int16,
    torch.float8_e4m3fn: torch.uint8,
    torch.float8_e5m2: torch.uint8,
}


def to_numpy(t: torch.Tensor) -> np.ndarray:
    if t.dim() > 64:  # numpy's limit, and torch's kernels' (its CPU error, word for word)
        raise RuntimeError(
            f"only tensors with up to 64 dims are supported (lazax cannot hold this "
            f"{t.dim()}-dimensional tensor)"
        )
    t = t.detach()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    t = t.contiguous()
    carrier = _VIEW_AS.get(t.dtype)
    # A copy: on the CPU, PJRT may adopt the host buffer without copying, and the
    # user's CPU tensor must not alias the device value.
    if carrier is None:
        return t.numpy().copy()
    return t.view(carrier).numpy().view(pjrt.numpy_dtype(dtype_name(t.dtype))).copy()


def from_cpu(t: torch.Tensor, device_index: int = 0, sharding=None) -> ir.Value:
    """Upload a CPU tensor; returns its device-data value. ``sharding``: laid out over
    its mesh at once (padded where a split does not divide), not on one device."""
    runtime = EXECUTOR.runtime
    with metrics.timed("TransferToDeviceTime"):
        try:
            host = to_numpy(t)
            if sharding is not None:
                buf = runtime.place(host, sharding, host.shape)
            else:
                buf = runtime.to_device(host, runtime.devices[device_index])
        except pjrt.DeviceOutOfMemory as err:
            shape = f"{dtype_name(t.dtype)}{list(t.shape)}"
            what = f"a transfer of {shape} to the device"
            raise out_of_memory(err, what, None, runtime) from err
    metrics.record("OutboundData", host.nbytes, unit="bytes")  # (host -> device)
    metrics.bump("CreateDataHandles")
    return ir.device_data(ir.TensorSpec(tuple(t.shape), dtype_name(t.dtype)), buf)


# A view of materialised data is read by copying its base to the host and slicing it
# there (no compile per distinct view: printing x[i] in a loop compiles nothing) when
# the base is small, or not much larger than the view.
HOST_SLICE_MAX_ELEMENTS = 1 << 20


def to_cpu(t: torch.Tensor) -> torch.Tensor:
    """``t``'s value as a new CPU tensor (syncs and waits; raises the first failed
    device-side check of every program that has finished, its own among them)."""
    if EXECUTOR.capture_guard is not None:
        EXECUTOR.capture_guard("a read of device data to the host")
    view = t._lz_view
    if view is not None:
        storage = t._lz_storage
        base = storage.spec
        base_dtype = torch_dtype(base.dtype)
        base_numel = math.prod(base.shape)
        base_bytes = base_numel * base_dtype.itemsize
        if base_numel <= HOST_SLICE_MAX_ELEMENTS or base_bytes <= 4 * t.numel() * t.itemsize:
            if storage.pending and base_dtype != t.dtype:
                # A view that reinterprets the bytes (torch.save reads every storage as
                # bytes): run the base, then reinterpret on the host, not in a program
                # compiled per shape.
                EXECUTOR.sync_storages([storage])
            if not storage.pending:
                whole = host_tensor(storage.value.node.data, base_dtype, base.shape).reshape(-1)
                if base_dtype != t.dtype:
                    whole = whole.view(t.dtype)
                size, stride, offset = view
                out = whole.as_strided(size, stride, offset).clone()
                EXECUTOR.read_checks(wait=False)
                return out
    EXECUTOR.sync_tensors_graph([t], wait=False)
    out = host_tensor(ir_value(t).node.data, t.dtype, t.shape)
    # A value computed with an index out of range must not reach the user unflagged.
    EXECUTOR.read_checks(wait=False)
    return out


def jax_value(t: torch.Tensor):
    """``t``'s value as a ``jax.Array`` (see the module docstring)."""
    if EXECUTOR.capture_guard is not None:
        EXECUTOR.capture_guard("a read of a tensor's buffer (to JAX or DLPack)")
    if t.is_conj() or t.is_neg():
        t = t.resolve_conj().resolve_neg()
    EXECUTOR.sync_tensors_graph([t], wait=False)
    value = ir_value(t)
    return pjrt.trim(value.node.data, value.spec.shape)  # (an uneven split is padded)


def _shape_text(shape, dtype: torch.dtype) -> str:
    return f"{tuple(shape)} {str(dtype).replace('torch.', '')}"


def host_tensor(buffer, dtype: torch.dtype, shape, read=None) -> torch.Tensor:
    """``buffer`` as a CPU tensor of ``dtype`` and ``shape``; ``read``: buffer -> numpy
    array (default: the whole value, ``runtime.to_host``)."""
    reading = span("to_host", lambda: _shape_text(shape, dtype))
    with reading, metrics.timed("TransferFromDeviceTime"):
        try:
            array = (read or EXECUTOR.runtime.to_host)(buffer)
        except pjrt.SplitAcrossProcessesError as err:
            raise RuntimeError(
                f"lazax: cannot read this {tuple(shape)} tensor whole in process "
                f"{EXECUTOR.runtime.process_index}: {err}. Read this process's part "
                f"with lazax.modes.distributed.local_part(t), or replicate it first "
                f"(lx.mark_sharding(t, mesh, (None,) * t.dim()), then read it)."
            ) from None
    metrics.record("InboundData", array.nbytes, unit="bytes")  # (device -> host)
    sharding = getattr(buffer, "sharding", None)
    if sharding is not None and len(sharding.device_set) > 1:
        # A value over several devices (split, or replicated over a mesh), made whole
        # for the host: torch_xla's name for it.
        metrics.bump("ReplicateShardedData")
    carrier = _VIEW_AS.get(dtype)
    if carrier is not None:
        array = array.view(np.dtype(str(carrier).replace("torch.", "")))
    if not array.flags.writeable:
        array = array.copy()
    out = torch.from_numpy(array)
    if carrier is not None:
        out = out.view(dtype)
    if out.dtype != dtype:
        out = out.to(torch_dtype(dtype_name(dtype)))
    if out.numel() != math.prod(shape):  # a padded buffer (an uneven split)
        return pjrt.trim(out, tuple(shape)).clone()
    return out.reshape(shape)
