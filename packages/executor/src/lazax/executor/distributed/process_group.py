"""torch.distributed's "lazax" backend: collectives on lazax tensors across processes.

``dist.init_process_group("lazax")`` (under torchrun; ``"cpu:gloo,lazax:lazax"`` to keep
gloo for CPU tensors) gives a process group whose ``all_reduce``, ``all_gather``,
``all_gather_into_tensor``, ``broadcast``, ``scatter`` (the source's inputs broadcast),
``reduce_scatter``, ``reduce_scatter_tensor`` and ``barrier`` take the lazax tensors
each process holds on its own device, as torch's CUDA backends take cuda tensors. The
group keeps the name torch gives it (``group_name``: DeviceMesh and the functional
collectives find it by name).

Contract:
- The job must have joined (``lazax.modes.distributed.initialize()``, which the
  backend's creator calls itself, before anything used a device, when it has not);
  ranks are jax's process indices, and the group is the whole job (``new_group`` of a
  subset raises ``NotImplementedError``).
- Each call runs the tensors' pending work first, then one XLA program over one device
  per process (``lazax.pjrt``'s collectives), not fused into the caller's graph; the
  result lands in the output tensors as a pending copy (in place, as torch's: views,
  such as DDP's bucket views, see it). The returned ``Work`` is complete:
  ``wait()`` waits for the results on the device.
- Reduce ops: SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR; others raise
  ``ValueError`` naming them. A tensor laid out over a mesh that spans processes is one
  global value already, and is refused (``ValueError``).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from lazax import ir, pjrt

from ..barrier.executor import EXECUTOR
from ..state.layout import Layout
from ..state.values import ir_value
from ..tensor.lazy import LazyTensor, new_tensor
from .fsdp import install as _install_fsdp

__all__ = ["LazaxProcessGroup", "collective_into"]

_OPS = {
    dist.ReduceOp.SUM: "sum",
    dist.ReduceOp.AVG: "avg",
    dist.ReduceOp.PRODUCT: "product",
    dist.ReduceOp.MIN: "min",
    dist.ReduceOp.MAX: "max",
    dist.ReduceOp.BAND: "band",
    dist.ReduceOp.BOR: "bor",
    dist.ReduceOp.BXOR: "bxor",
}


class _Done(dist.Work):
    """A collective that was dispatched: its results are pending on the device."""

    def __init__(self, outputs: list) -> None:
        super().__init__()
        self._outputs = outputs

    def wait(self, timeout=None) -> bool:
        if self._outputs:
            EXECUTOR.sync_tensors_graph(self._outputs, wait=True)
        return True

    def is_completed(self) -> bool:
        return True

    def get_future(self) -> torch.futures.Future:
        future = torch.futures.Future()
        future.set_result(self._outputs)
        return future


def _buffer(t: torch.Tensor, what: str):
    """``t``'s value on the device, its pending work run first."""
    if type(t) is not LazyTensor:
        raise ValueError(
            f"the lazax backend's {what} takes lazax tensors, but got a {t.device} tensor; "
            f"use init_process_group('cpu:gloo,lazax:lazax') for CPU tensors too"
        )
    EXECUTOR.sync_tensors_graph([t], wait=False)
    buffer = ir_value(t).node.data
    if pjrt.spans_processes(getattr(buffer, "sharding", None)):
        raise ValueError(
            f"{what}: this tensor is laid out over a mesh that spans processes, so it is "
            f"one value of the whole job already; collectives take each process's own "
            f"tensor (one on lx.device())"
        )
    return buffer


def _write(out: torch.Tensor, buffer) -> None:
    """``out`` (any lazax tensor, a view too) takes ``buffer``'s value, in place."""
    runtime = EXECUTOR.runtime
    index = out.device.index or 0
    if index != 0:
        buffer = runtime.place(buffer, runtime.single_device(runtime.devices[index]))
    spec = ir.TensorSpec(tuple(buffer.shape), str(buffer.dtype))
    value = new_tensor(ir.device_data(spec, buffer), Layout(tuple(buffer.shape), out.dtype), index)
    with torch.no_grad():
        out.copy_(value.reshape(out.shape))


def collective_into(out: torch.Tensor, kind: str, t: torch.Tensor, op: str = "sum") -> None:
    """``out`` takes this process's result of the collective ``kind`` (all_reduce,
    all_gather, reduce_scatter) of ``t`` over the job, in place; ``op`` names the
    reduction, as ``ReduceOp``'s lower-case names."""
    if op not in _OPS.values():
        raise ValueError(f"the lazax backend's {kind} does not support the reduction {op!r}")
    if kind == "reduce_scatter":
        t = t.reshape(-1, *out.shape)
    buffer = EXECUTOR.runtime.collective(kind, _buffer(t.contiguous(), kind), op)
    _write(out, buffer.reshape(out.shape))


def _op(opts, what: str) -> str:
    op = _OPS.get(opts.reduceOp.op)
    if op is None:
        raise ValueError(
            f"the lazax backend's {what} does not support {opts.reduceOp.op}; it supports "
            f"{', '.join(str(k).split('.')[-1] for k in _OPS)}"
        )
    return op


class LazaxProcessGroup(dist.ProcessGroup):
    """The job's processes as a torch process group over lazax tensors."""

    def __init__(self, rank: int, size: int) -> None:
        super().__init__(rank, size)
        runtime = EXECUTOR.runtime
        if (rank, size) != (runtime.process_index, runtime.process_count):
            raise NotImplementedError(
                f"the lazax backend's groups are the whole job (process "
                f"{runtime.process_index} of {runtime.process_count}); a group of rank "
                f"{rank} of {size} is not supported"
            )
        self._barriers = 0
        self._name = ""
        _install_fsdp()

    # torch names a group (DeviceMesh and the functional collectives find it by its name)
    # through backends registered on it; this group is its own backend.
    @property
    def group_name(self) -> str:
        if not self._name:
            raise RuntimeError("ProcessGroup name not set")
        return self._name

    def _set_group_name(self, name: str) -> None:
        self._name = name

    def getBackendName(self) -> str:  # noqa: N802  (torch's name)
        return "lazax"

    def allreduce(self, tensors, opts=None):
        opts = opts or dist.AllreduceOptions()
        op = _op(opts, "all_reduce")
        runtime = EXECUTOR.runtime
        for t in tensors:
            _write(t, runtime.collective("all_reduce", _buffer(t, "all_reduce"), op))
        return _Done(list(tensors))

    def allgather(self, output_tensors, input_tensors, opts=None):
        runtime = EXECUTOR.runtime
        for outputs, t in zip(output_tensors, input_tensors):
            stacked = runtime.collective("all_gather", _buffer(t, "all_gather"))
            for k, out in enumerate(outputs):
                _write(out, stacked[k])
        return _Done([o for outputs in output_tensors for o in outputs])

    def all_gather_single(self, output, input, opts=None):
        stacked = EXECUTOR.runtime.collective("all_gather", _buffer(input, "all_gather"))
        _write(output, stacked.reshape(output.shape))
        return _Done([output])

    def broadcast(self, tensors, opts=None):
        source = (opts or dist.BroadcastOptions()).rootRank
        runtime = EXECUTOR.runtime
        for t in tensors:
            _write(t, runtime.collective("broadcast", _buffer(t, "broadcast"), source=source))
        return _Done(list(tensors))

    def scatter(self, output_tensors, input_tensors, opts=None):
        # The source's stacked inputs, broadcast; each process keeps its own row.
        source = (opts or dist.ScatterOptions()).rootRank
        (out,) = output_tensors
        if self.rank() == source:
            rows = torch.stack(list(input_tensors[0]))
        else:
            rows = torch.zeros((self.size(), *out.shape), dtype=out.dtype, device=out.device)
        stacked = EXECUTOR.runtime.collective("broadcast", _buffer(rows, "scatter"), source=source)
        _write(out, stacked[self.rank()])
        return _Done([out])

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        op = _op(opts, "reduce_scatter")
        for out, inputs in zip(output_tensors, input_tensors):
            rows = _buffer(torch.stack(list(inputs)), "reduce_scatter")
            _write(out, EXECUTOR.runtime.collective("reduce_scatter", rows, op))
        return _Done(list(output_tensors))

    def reduce_scatter_single(self, output, input, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        op = _op(opts, "reduce_scatter")
        rows = input.reshape(self.size(), *output.shape)
        buffer = _buffer(rows.contiguous(), "reduce_scatter")
        _write(output, EXECUTOR.runtime.collective("reduce_scatter", buffer, op))
        return _Done([output])

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    # The names torch before 2.13 calls for the single-tensor forms.
    _allgather_base = all_gather_single
    _reduce_scatter_base = reduce_scatter_single

    def barrier(self, opts=None):
        self._barriers += 1
        pjrt.barrier(f"process_group/{self._barriers}", _timeout(opts))
        return _Done([])


def _timeout(opts) -> float:
    timeout = getattr(opts, "timeout", None)
    seconds = timeout.total_seconds() if timeout is not None else 0
    return seconds if seconds > 0 else 1800.0
