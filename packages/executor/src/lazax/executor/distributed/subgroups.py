"""Collectives over a process group that is a part of the job: a DeviceMesh dimension's
groups (``init_device_mesh("lazax", (2, 2))``), ``new_group``, ``new_subgroups``.

Contract:
- ``members_of(name)``: for torch's group named ``name``, ``None`` when it is the whole
  job in process order (its collectives are the lowerings of ``ops.collectives``, over
  the job's process axis), else the ``Members`` of this process's group: its global
  ranks, as a ``(size,)`` int64 lazax tensor too, this process's position in it as a
  ``(1,)`` one (device data, made once per group: no upload per step), and
  ``partition``: every process's group, flattened, when they are groups of one size
  that hold each process once (the groups of a DeviceMesh dimension, ``new_subgroups``),
  else None. The partition is learnt at the group's first collective, where every
  process of the job meets (``pjrt.exchange``): a group used by its own processes only
  raises ``TimeoutError`` there, saying so, after ``LAZAX_DISTRIBUTED_TIMEOUT``.
- ``ranks_of(name)``: the group's global ranks alone (None for the whole job), with no
  meeting: what a group's ``barrier`` needs.
- ``run(func, args, kwargs, members, gather_job, gather_groups)``: torch's functional
  collective ``func`` (``torch.ops._c10d_functional``: ``all_reduce``,
  ``all_gather_into_tensor``, ``reduce_scatter_tensor``, their ``_coalesced`` forms,
  ``all_to_all_single`` with equal splits, ``broadcast`` from a group rank) over the
  group, with torch's semantics and result dtypes. Each is one all-gather, traced, and
  work on its rows: with a partition, an all-gather within each group
  (``gather_groups(x, partition, size)``: ``lazax::group_gather``); else one over the
  whole job (``gather_job(x)``: ``(processes, *x.shape)``) and the group's rows of it,
  picked by the members tensor, which moves (job size / group size) times more. Why
  all-gathers: jax has no grouped sum inside a per-process program (``psum``'s
  ``axis_index_groups`` raises ``NotImplementedError`` under ``shard_map``; its
  all-gather takes groups). Either way the graph is the same in every process (the
  partition is the same everywhere, and a position is the program's input, not its
  constant), so a step with collectives over two dimensions (FSDP2 over one, tensor
  parallel over the other) is one program, agreed and compiled once.
- So every process of the job runs each program that holds a group collective: the
  groups used at one point cover the job, each process calling on its own (as the
  groups of one DeviceMesh dimension do).
- The calls are aten ops on lazax tensors from inside lazax's dispatch (no composite
  ops: those would reach the dispatch whole).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _resolve_process_group

from lazax import pjrt

from ..barrier.agreement import timeout_s
from ..barrier.executor import EXECUTOR
from ..config import DEVICE_NAME

__all__ = ["Members", "members_of", "ranks_of", "run"]

aten = torch.ops.aten
_c10d = torch.ops._c10d_functional


@dataclass(frozen=True)
class Members:
    ranks: tuple  # the group's global ranks, in group-rank order
    rank: int  # this process's rank in the group
    indices: torch.Tensor  # (size,) int64: ``ranks`` on the device
    position: torch.Tensor  # (1,) int64: ``rank`` on the device
    partition: tuple | None  # every process's group, flattened (equal sizes), or None

    @property
    def size(self) -> int:
        return len(self.ranks)


_MEMBERS: dict[str, Members | None] = {}


def ranks_of(name) -> tuple | None:
    """The global ranks of torch's group ``name`` (a group or its name), in group-rank
    order; None when it is the whole job in process order."""
    key = name if isinstance(name, str) else name.group_name
    if key not in _RANKS:
        group = _resolve_process_group(key) if isinstance(name, str) else name
        ranks = tuple(dist.get_process_group_ranks(group))
        whole = ranks == tuple(range(EXECUTOR.runtime.process_count))
        _RANKS[key] = None if whole else ranks
    return _RANKS[key]


_RANKS: dict[str, tuple | None] = {}


def members_of(name) -> Members | None:
    """This process's group of ``name`` (a group or its name), or None for the job."""
    key = name if isinstance(name, str) else name.group_name
    if key not in _MEMBERS:
        ranks = ranks_of(name)
        if ranks is None:
            _MEMBERS[key] = None
        else:
            device = torch.device(DEVICE_NAME, 0)
            rank = ranks.index(EXECUTOR.runtime.process_index)
            _MEMBERS[key] = Members(
                ranks,
                rank,
                torch.tensor(ranks, dtype=torch.int64).to(device),
                torch.tensor([rank], dtype=torch.int64).to(device),
                _partition(ranks),
            )
    return _MEMBERS[key]


_MET = [0]  # the groups whose partition this process learnt


def _partition(ranks: tuple) -> tuple | None:
    """Every process's group at this group's first collective (see the contract)."""
    _MET[0] += 1
    count = EXECUTOR.runtime.process_count
    try:
        everyone = pjrt.exchange(
            f"subgroups/{_MET[0]}", json.dumps(ranks).encode(), timeout_s(), "at a group"
        )
    except TimeoutError as err:
        raise TimeoutError(
            f"lazax: the first collective over the group of ranks {list(ranks)}: a "
            f"group's collectives run in one program of every process of the job, so "
            f"each process must issue it at the same point, each on its own group (as "
            f"the groups of a DeviceMesh dimension do); {err}"
        ) from None
    groups = sorted({tuple(json.loads(data)) for data in everyone})
    held = sorted(r for group in groups for r in group)
    if held != list(range(count)) or len({len(g) for g in groups}) != 1:
        return None
    return tuple(r for group in groups for r in group)


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

    def __init__(self, members: Members, gather_job: Callable, gather_groups: Callable) -> None:
        self.m = members
        self.gather_job = gather_job
        self.gather_groups = gather_groups

    def rows(self, x: torch.Tensor) -> torch.Tensor:
        """The group's inputs, stacked in group-rank order: ``(size, *x.shape)``."""
        if self.m.partition is not None:
            return self.gather_groups(x, list(self.m.partition), self.m.size)
        return aten.index_select.default(self.gather_job(x), 0, self.m.indices)

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


def run(func, args, kwargs, members: Members, gather_job: Callable, gather_groups: Callable):
    """``func`` (a functional collective) over ``members``' group; see the docstring."""
    group = _Group(members, gather_job, gather_groups)
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
