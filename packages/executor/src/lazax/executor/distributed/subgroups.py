"""Collectives over a process group that is a part of the job: a DeviceMesh dimension's
groups (``init_device_mesh("lazax", (2, 2))``), ``new_group``, ``new_subgroups``.

Contract:
- ``members_of(name)``: for torch's group named ``name``, ``None`` when it is the whole
  job in process order (its collectives are the lowerings of ``ops.collectives``, over
  the job's process axis), else the ``Members`` of this process's group: its global
  ranks as a ``(size,)`` int64 lazax tensor, and this process's position in it as a
  ``(1,)`` one. Both are device data, made once per group (no upload per step).
- ``run(func, args, kwargs, members, gather)``: torch's functional collective ``func``
  (``torch.ops._c10d_functional``: ``all_reduce``, ``all_gather_into_tensor``,
  ``reduce_scatter_tensor``, their ``_coalesced`` forms, ``all_to_all_single`` with equal
  splits, ``broadcast`` from a group rank) over the group, with torch's semantics and
  result dtypes. Each is one all-gather over the whole job (``gather``: ``x`` to
  ``(processes, *x.shape)``, the traced collective) and the group's rows of it, picked
  by the members tensor. Why: every process of a job runs the same program, and the
  processes of a DeviceMesh dimension are in different groups; with the members as the
  program's input rather than its constants, their graphs stay equal, so a step with
  collectives over two dimensions (FSDP2 over one, tensor parallel over the other) is
  one program, agreed and compiled once. jax has no grouped sum inside a per-process
  program (``psum``'s ``axis_index_groups`` raises ``NotImplementedError`` under
  ``shard_map``). The price: each process receives every process's input, (job size /
  group size) times what a grouped collective moves.
- So every process of the job must run each program that holds a group collective: the
  groups used at one point cover the job, each process calling on its own (as the
  groups of one DeviceMesh dimension do). A group that leaves processes out, when those
  do not call, is met by the job's agreement timeout (``LAZAX_DISTRIBUTED_TIMEOUT``).
- The calls are aten ops on lazax tensors from inside lazax's dispatch (no composite
  ops: those would reach the dispatch whole).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _resolve_process_group

from ..barrier.executor import EXECUTOR
from ..config import DEVICE_NAME

__all__ = ["Members", "members_of", "run"]

aten = torch.ops.aten
_c10d = torch.ops._c10d_functional


@dataclass(frozen=True)
class Members:
    ranks: tuple  # the group's global ranks, in group-rank order
    rank: int  # this process's rank in the group
    indices: torch.Tensor  # (size,) int64: ``ranks`` on the device
    position: torch.Tensor  # (1,) int64: ``rank`` on the device

    @property
    def size(self) -> int:
        return len(self.ranks)


_MEMBERS: dict[str, Members | None] = {}


def members_of(name) -> Members | None:
    """This process's group of ``name`` (a group or its name), or None for the job."""
    key = name if isinstance(name, str) else name.group_name
    if key not in _MEMBERS:
        group = _resolve_process_group(key) if isinstance(name, str) else name
        ranks = tuple(dist.get_process_group_ranks(group))
        if ranks == tuple(range(EXECUTOR.runtime.process_count)):
            _MEMBERS[key] = None
        else:
            device = torch.device(DEVICE_NAME, 0)
            rank = ranks.index(EXECUTOR.runtime.process_index)
            _MEMBERS[key] = Members(
                ranks,
                rank,
                torch.tensor(ranks, dtype=torch.int64).to(device),
                torch.tensor([rank], dtype=torch.int64).to(device),
            )
    return _MEMBERS[key]


def _reduced(rows: torch.Tensor, op: str, count: int) -> torch.Tensor:
    """The reduction over dim 0 of the group's ``rows``, in their dtype (as
    ``ops.collectives`` reduces over the job: bool sums are "any", integer means floor)."""
    op = op.lower()
    dtype = rows.dtype
    if dtype == torch.bool:
        as_int = aten._to_copy.default(rows, dtype=torch.int8)
        if op in ("sum", "max", "bor", "avg"):
            return aten.ne.Scalar(aten.amax.default(as_int, [0]), 0)
        if op in ("product", "min", "band"):
            return aten.ne.Scalar(aten.amin.default(as_int, [0]), 0)
        if op == "bxor":
            total = aten.sum.dim_IntList(as_int, [0], dtype=torch.int32)
            return aten.ne.Scalar(aten.remainder.Scalar(total, 2), 0)
    if op in ("sum", "avg"):
        total = aten.sum.dim_IntList(rows, [0], dtype=dtype)
        if op == "sum":
            return total
        if dtype.is_floating_point or dtype.is_complex:
            return aten.div.Scalar(total, count)
        return aten.div.Scalar_mode(total, count, rounding_mode="floor")
    if op == "product":
        return aten.prod.dim_int(rows, 0, dtype=dtype)
    if op in ("min", "max"):
        return (aten.amin if op == "min" else aten.amax).default(rows, [0])
    bitwise = {"band": aten.bitwise_and, "bor": aten.bitwise_or, "bxor": aten.bitwise_xor}
    if op not in bitwise:
        raise ValueError(
            f"lazax's collectives support the reductions sum, avg, product, min, max, "
            f"band, bor, bxor; got {op!r}"
        )
    pieces = [aten.select.int(rows, 0, k) for k in range(count)]
    return functools.reduce(bitwise[op].Tensor, pieces)


class _Group:
    """The group's collectives over one tensor each, from the job's all-gather."""

    def __init__(self, members: Members, gather: Callable) -> None:
        self.m = members
        self.gather = gather

    def rows(self, x: torch.Tensor) -> torch.Tensor:
        """The group's inputs, stacked in group-rank order: ``(size, *x.shape)``."""
        return aten.index_select.default(self.gather(x), 0, self.m.indices)

    def check_size(self, group_size: int, what: str) -> None:
        if group_size != self.m.size:
            raise ValueError(
                f"{what}: group_size is {group_size}, but the group has {self.m.size} "
                f"processes (ranks {list(self.m.ranks)})"
            )

    def all_reduce(self, x, op):
        return _reduced(self.rows(x), op, self.m.size)

    def all_gather(self, x, group_size):
        self.check_size(group_size, "all_gather_into_tensor")
        shape = [self.m.size * x.shape[0], *x.shape[1:]] if x.dim() else [self.m.size]
        return aten.view.default(self.rows(x), shape)

    def mine(self, stacked: torch.Tensor, dim: int) -> torch.Tensor:
        """This process's piece along ``dim`` of ``stacked`` (its dim ``dim`` cut in
        ``size`` equal pieces), picked on the device (the rank is the program's input)."""
        size = self.m.size
        if stacked.shape[dim] % size:
            raise ValueError(
                f"a collective over {size} processes needs dim {dim} of its input to be "
                f"a multiple of {size}; got shape {list(stacked.shape)}"
            )
        shape = [*stacked.shape[:dim], size, stacked.shape[dim] // size, *stacked.shape[dim + 1 :]]
        pieces = aten.view.default(aten.clone.default(stacked), shape)
        picked = aten.index_select.default(pieces, dim, self.m.position)
        return aten.squeeze.dim(picked, dim)

    def reduce_scatter(self, x, op, group_size):
        self.check_size(group_size, "reduce_scatter_tensor")
        return aten.clone.default(self.mine(self.all_reduce(x, op), 0))

    def all_to_all(self, x, output_split_sizes, input_split_sizes):
        for sizes in (output_split_sizes, input_split_sizes):
            if sizes is not None and len(set(sizes)) > 1:
                raise NotImplementedError(
                    f"lazax's all_to_all_single takes equal splits; got split sizes {sizes}"
                )
        # Row j: process j's input; this process takes piece ``rank`` of each, in order.
        taken = self.mine(self.rows(x), 1)
        return aten.view.default(aten.clone.default(taken), list(x.shape))

    def broadcast(self, x, src):
        if not 0 <= src < self.m.size:
            raise ValueError(f"broadcast: src {src} is not a rank of a group of {self.m.size}")
        return aten.clone.default(aten.select.int(self.rows(x), 0, src))


def _arguments(func, args, kwargs) -> dict:
    names = [a.name for a in func._schema.arguments]
    return {**dict(zip(names, args)), **kwargs}


def run(func, args, kwargs, members: Members, gather: Callable):
    """``func`` (a functional collective) over ``members``' group; see the docstring."""
    group = _Group(members, gather)
    a = _arguments(func, args, kwargs)
    name = func._schema.name.split("::")[-1]
    if name == "all_reduce":
        return group.all_reduce(a["input"], a["reduce_op"])
    if name == "all_reduce_coalesced":
        return [group.all_reduce(x, a["reduce_op"]) for x in a["inputs"]]
    if name == "all_gather_into_tensor":
        return group.all_gather(a["input"], a["group_size"])
    if name == "all_gather_into_tensor_coalesced":
        return [group.all_gather(x, a["group_size"]) for x in a["inputs"]]
    if name == "reduce_scatter_tensor":
        return group.reduce_scatter(a["input"], a["reduce_op"], a["group_size"])
    if name == "reduce_scatter_tensor_coalesced":
        return [group.reduce_scatter(x, a["reduce_op"], a["group_size"]) for x in a["inputs"]]
    if name == "all_to_all_single":
        return group.all_to_all(a["input"], a["output_split_sizes"], a["input_split_sizes"])
    if name == "broadcast":
        return group.broadcast(a["input"], a["src"])
    raise NotImplementedError(
        f"lazax: {func} over a group of part of the job (ranks {list(members.ranks)}) is "
        f"not supported; it runs over the whole job's group"
    )
