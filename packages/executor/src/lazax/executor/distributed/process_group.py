"""torch.distributed's "lazax" backend: collectives on lazax tensors across processes.

``dist.init_process_group("lazax")`` (under torchrun) gives a process group whose
``all_reduce``, ``all_gather``, ``all_gather_into_tensor``, ``broadcast``, ``scatter``,
``reduce_scatter``, ``reduce_scatter_tensor`` and ``barrier`` take the lazax tensors
each process holds on its own device, as torch's CUDA backends take cuda tensors. The
group keeps the name torch gives it (``group_name``: DeviceMesh and the functional
collectives find it by name).

Contract:
- The job must have joined (``lazax.modes.distributed.initialize()``, which the
  backend's creator calls itself, before anything used a device, when it has not);
  ranks are jax's process indices. A group of part of the job (``new_group``, the
  groups of each dimension of ``init_device_mesh("lazax", (2, 2))``) runs its
  collectives inside the job's program too (``subgroups``): every process must issue
  them at the same point, each on its own group, as the groups of a DeviceMesh
  dimension do; its ``barrier`` waits for the group's processes only.
- Each call is traced, as any op: the result is torch's functional collective
  (``torch.ops._c10d_functional``) of the inputs, written into the output tensors in
  place (views, such as DDP's bucket views, see it), and it runs inside the program of
  the graph that reads it (``ops.collectives``), so a DDP or FSDP2 step with all its
  buckets is one program. In eager mode it runs at once, as every op does. The
  returned ``Work`` is complete: ``wait()`` returns at once (the results are the
  graph's values, which anything that reads them waits for), as a CUDA stream orders
  work after the collective without the host waiting.
- Every process must sync the graphs holding collectives in step (the same graph at
  the same point): a value read in one process only (``loss.item()`` under
  ``if rank == 0`` before the step's sync) makes that process's graph differ, and every
  process raises ``GraphsDifferError`` naming the first difference before anything runs.
- Reduce ops: SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR; others raise
  ``ValueError`` naming them. A tensor laid out over a mesh that spans processes is one
  global value already, and is refused (``ValueError``). A CPU tensor (torch's object
  collectives, ``broadcast_object_list``, ``all_gather_object``, ``gather_object``, and
  so DCP's planning, send CPU tensors to the default group) is copied to the device and
  its result read back at once.
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist

from lazax import pjrt

from ..barrier.executor import EXECUTOR
from ..config import DEVICE_NAME
from ..state.values import ir_value
from ..tensor.lazy import LazyTensor
from .fsdp import install as _install_fsdp
from .subgroups import ranks_of

__all__ = ["LazaxProcessGroup", "process_group_made", "traced_backward_setting"]

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

_c10d = torch.ops._c10d_functional


class _Done(dist.Work):
    """A traced collective: its results are the values of the graph that computes them."""

    def __init__(self, outputs: list) -> None:
        super().__init__()
        self._outputs = outputs

    def wait(self, timeout=None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def get_future(self) -> torch.futures.Future:
        future = torch.futures.Future()
        future.set_result(self._outputs)
        return future


def _own(t: torch.Tensor, what: str) -> torch.Tensor:
    """``t``, checked to be this process's own lazax tensor; a CPU tensor (torch's
    object collectives send those) is copied to the device, and its result read back
    by ``_write``."""
    if t.device.type == "cpu":
        return t.to(torch.device(DEVICE_NAME, 0))
    if type(t) is not LazyTensor:
        raise ValueError(
            f"the lazax backend's {what} takes lazax or CPU tensors, but got a {t.device} tensor"
        )
    if t.device.index:
        raise NotImplementedError(
            f"the lazax backend's {what} takes tensors on each process's lx.device() "
            f"(lazax:0); got one on {t.device}"
        )
    # A pending value's layout is checked where its graph compiles (``barrier.compile``).
    if pjrt.spans_processes(getattr(ir_value(t).node.data, "sharding", None)):
        raise ValueError(
            f"{what}: this tensor is laid out over a mesh that spans processes, so it is "
            f"one value of the whole job already; collectives take each process's own "
            f"tensor (one on lx.device())"
        )
    return t


def _write(out: torch.Tensor, value: torch.Tensor) -> None:
    """``out`` (any lazax tensor, a view too) takes ``value``, in place; a CPU ``out``
    reads it (which runs the collective's graph in every process: each one reads)."""
    with torch.no_grad():
        out.copy_(value.reshape(out.shape))


def _op(opts, what: str) -> str:
    op = _OPS.get(opts.reduceOp.op)
    if op is None:
        raise ValueError(
            f"the lazax backend's {what} does not support {opts.reduceOp.op}; it supports "
            f"{', '.join(str(k).split('.')[-1] for k in _OPS)}"
        )
    return op


_LIVE: set = set()  # ids of the lazax process groups made and not shut down
_TRACED_BACKWARD: list = []  # trace_autograd_ops to restore once no lazax group lives


def process_group_made() -> bool:
    """Whether a "lazax" process group lives in this process (made, and not shut down by
    ``destroy_process_group``); DDP, FSDP2 and DTensor on lazax run over one."""
    return bool(_LIVE)


def traced_backward_setting(wanted: bool) -> bool:
    """The value for dynamo's ``trace_autograd_ops`` where ``wanted`` is what the caller
    (``lazax.dynamo``) wants: off while a lazax group lives (``_made``); ``wanted``
    comes back when the last one shuts down."""
    _TRACED_BACKWARD[:] = [wanted]
    return wanted and not _LIVE


def _made(group: dist.ProcessGroup) -> None:
    """A ``backward()`` traced into a compiled step (dynamo's ``trace_autograd_ops``,
    which ``lazax.dynamo`` turns on) bypasses the hooks DDP and FSDP2 reduce gradients
    in: the whole step under ``torch.compile`` trains each process on its own gradients
    (0.04 off after 4 AdamW steps, silently; torch's own ``aot_eager`` on CPU tensors
    over gloo does the same). While a lazax group lives, the flag is off (and
    ``lazax.dynamo``, imported meanwhile, leaves it off): the step's graph breaks at
    ``backward()``, and trains equal to the CPU."""
    config = sys.modules.get("torch._dynamo.config")  # not imported: nothing set yet
    if not _LIVE and config is not None:
        _TRACED_BACKWARD[:] = [config.trace_autograd_ops]
    _LIVE.add(id(group))
    if config is not None:
        config.trace_autograd_ops = False


def _shut_down(group: dist.ProcessGroup) -> None:
    """The group is gone (``destroy_process_group``): with no lazax group left, the
    setting ``_made`` turned off comes back, so that a later ``torch.compile`` in the
    same process traces its backward again."""
    _LIVE.discard(id(group))
    config = sys.modules.get("torch._dynamo.config")
    if not _LIVE and _TRACED_BACKWARD and config is not None:
        config.trace_autograd_ops = _TRACED_BACKWARD[0]


class LazaxProcessGroup(dist.ProcessGroup):
    """The job's processes as a torch process group over lazax tensors."""

    def __init__(self, rank: int, size: int) -> None:
        super().__init__(rank, size)
        count = EXECUTOR.runtime.process_count
        if size > count:
            raise ValueError(
                f"the lazax backend's group of {size} processes is larger than the job "
                f"({count} processes)"
            )
        self._barriers = 0
        self._name = ""
        _install_fsdp()
        _made(self)

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

    def shutdown(self) -> None:
        """Called by ``destroy_process_group`` for each group it removes."""
        _shut_down(self)
        super().shutdown()

    # torch lists a group's devices from the backends registered on it, and this group is
    # its own (a ProcessGroup, which torch returns as it is): without this, code that
    # asks which device a group's tensors go to (DCP's ``broadcast_from_rank0`` loading:
    # ``pg._device_types[0]``) found none. The CPU too, as the group takes CPU tensors;
    # with it listed, torch's object collectives keep sending CPU tensors (as with none).
    @property
    def _device_types(self) -> list:
        return [torch.device(DEVICE_NAME), torch.device("cpu")]

    @property
    def _tag(self) -> str:
        return self._name or "lazax"

    def allreduce(self, tensors, opts=None):
        op = _op(opts or dist.AllreduceOptions(), "all_reduce")
        for t in tensors:
            _write(t, _c10d.all_reduce(_own(t, "all_reduce"), op, self._tag))
        return _Done(list(tensors))

    def _gathered(self, t: torch.Tensor) -> torch.Tensor:
        """Every process's ``t`` stacked in rank order: ``(size, *t.shape)``."""
        row = _own(t, "all_gather").reshape(1, *t.shape)
        return _c10d.all_gather_into_tensor(row, self.size(), self._tag)

    def allgather(self, output_tensors, input_tensors, opts=None):
        for outputs, t in zip(output_tensors, input_tensors):
            stacked = self._gathered(t)
            for k, out in enumerate(outputs):
                _write(out, stacked[k])
        return _Done([o for outputs in output_tensors for o in outputs])

    def all_gather_single(self, output, input, opts=None):
        _write(output, self._gathered(input))
        return _Done([output])

    def broadcast(self, tensors, opts=None):
        source = (opts or dist.BroadcastOptions()).rootRank
        for t in tensors:
            _write(t, _c10d.broadcast(_own(t, "broadcast"), source, self._tag))
        return _Done(list(tensors))

    def gather(self, output_tensors, input_tensors, opts=None):
        # Every process gathers, at once (the others keep nothing that would run it
        # later, with the root); the root keeps the result.
        root = (opts or dist.GatherOptions()).rootRank
        (t,) = input_tensors
        stacked = self._gathered(t)
        EXECUTOR.sync_tensors_graph([stacked])
        outputs = list(output_tensors[0]) if self.rank() == root else []
        for k, out in enumerate(outputs):
            _write(out, stacked[k])
        return _Done(outputs)

    def scatter(self, output_tensors, input_tensors, opts=None):
        # The source's stacked inputs, broadcast; each process keeps its own row.
        source = (opts or dist.ScatterOptions()).rootRank
        # The others have no inputs: each side's rows are device data, so that the
        # collective's graph is the same in every process.
        (out,) = output_tensors
        if self.rank() == source:
            rows = torch.stack(list(input_tensors[0]))
            if type(rows) is LazyTensor:
                EXECUTOR.sync_tensors_graph([rows])
        else:
            rows = torch.zeros((self.size(), *out.shape), dtype=out.dtype).to(out.device)
        # Row j of the exchange is process j's row for this process; the source's is
        # the same row in every process (indexing by rank would differ by process).
        even = [out.shape[0] if out.dim() else 1] * self.size()
        rows = _own(rows, "scatter").reshape(self.size() * even[0], *out.shape[1:])
        exchanged = _c10d.all_to_all_single(rows, even, even, self._tag)
        exchanged = exchanged.reshape(self.size(), *out.shape)
        _write(out, exchanged[source])
        return _Done([out])

    def _scattered(self, rows: torch.Tensor, opts, shape) -> torch.Tensor:
        """This process's row of the reduction of every process's ``rows``
        (``(size, *shape)``), as ``shape``."""
        op = _op(opts or dist.ReduceScatterOptions(), "reduce_scatter")
        rows = _own(rows, "reduce_scatter").reshape(self.size(), *shape)
        return _c10d.reduce_scatter_tensor(rows, op, self.size(), self._tag)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        for out, inputs in zip(output_tensors, input_tensors):
            _write(out, self._scattered(torch.stack(list(inputs)), opts, out.shape))
        return _Done(list(output_tensors))

    def reduce_scatter_single(self, output, input, opts=None):
        _write(output, self._scattered(input, opts, output.shape))
        return _Done([output])

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    # The names torch before 2.13 calls for the single-tensor forms.
    _allgather_base = all_gather_single
    _reduce_scatter_base = reduce_scatter_single

    def barrier(self, opts=None):
        self._barriers += 1
        ranks = ranks_of(self.group_name)
        if ranks is None:
            pjrt.barrier(f"process_group/{self._barriers}", _timeout(opts))
        else:
            # Its own tags: the job's other groups meet at barriers of their own.
            tag = f"process_group/{'-'.join(map(str, ranks))}/{self._barriers}"
            pjrt.barrier(tag, _timeout(opts), processes=ranks)
        return _Done([])


def _timeout(opts) -> float:
    timeout = getattr(opts, "timeout", None)
    seconds = timeout.total_seconds() if timeout is not None else 0
    return seconds if seconds > 0 else 1800.0
