"""torch's functional collectives (``torch.ops._c10d_functional``, which DTensor and
FSDP2 call) on lazax tensors.

Contract: ``install()`` registers handlers for ``all_gather_into_tensor``,
``reduce_scatter_tensor``, ``all_reduce`` (and their ``_coalesced`` forms) and
``wait_tensor``. Each collective runs at once, as the "lazax" process group's calls do:
the inputs' pending work first, then one XLA program over one device per process; the
result is a new lazax tensor whose value is pending on the device. ``wait_tensor`` (and
``_wrap_tensor_autograd``) is the identity. The group named is the job's "lazax" group
(a group of another backend is not reached here: its tensors are not lazax tensors).
These collectives are not yet nodes of the caller's traced graph.
"""

from __future__ import annotations

import torch
import torch.distributed._functional_collectives  # noqa: F401  (loads the ops)

from ..dispatch.special import register_special
from .process_group import collective_into

__all__ = ["install"]

_ops = torch.ops._c10d_functional


def _gather(t: torch.Tensor, group_size: int) -> torch.Tensor:
    out = t.new_empty((group_size * t.shape[0], *t.shape[1:]))
    collective_into(out, "all_gather", t)
    return out


def _scatter(t: torch.Tensor, reduce_op: str, group_size: int) -> torch.Tensor:
    if t.shape[0] % group_size:
        raise ValueError(
            f"reduce_scatter_tensor: the input's first dimension ({t.shape[0]}) is not "
            f"divisible by the group size ({group_size})"
        )
    out = t.new_empty((t.shape[0] // group_size, *t.shape[1:]))
    collective_into(out, "reduce_scatter", t, reduce_op)
    return out


def _reduce(t: torch.Tensor, reduce_op: str) -> torch.Tensor:
    out = t.new_empty(t.shape)
    collective_into(out, "all_reduce", t, reduce_op)
    return out


def _all_gather(args, kwargs):
    t, group_size, _ = args
    return _gather(t, group_size)


def _all_gather_coalesced(args, kwargs):
    ts, group_size, _ = args
    return [_gather(t, group_size) for t in ts]


def _reduce_scatter(args, kwargs):
    t, reduce_op, group_size, _ = args
    return _scatter(t, reduce_op, group_size)


def _reduce_scatter_coalesced(args, kwargs):
    ts, reduce_op, group_size, _ = args
    return [_scatter(t, reduce_op, group_size) for t in ts]


def _all_reduce(args, kwargs):
    t, reduce_op, _ = args
    return _reduce(t, reduce_op)


def _all_reduce_coalesced(args, kwargs):
    ts, reduce_op, _ = args
    return [_reduce(t, reduce_op) for t in ts]


def _wait(args, kwargs):
    return args[0]


def install() -> None:
    register_special(
        {
            _ops.all_gather_into_tensor.default: _all_gather,
            _ops.all_gather_into_tensor_coalesced.default: _all_gather_coalesced,
            _ops.reduce_scatter_tensor.default: _reduce_scatter,
            _ops.reduce_scatter_tensor_coalesced.default: _reduce_scatter_coalesced,
            _ops.all_reduce.default: _all_reduce,
            _ops.all_reduce_coalesced.default: _all_reduce_coalesced,
            _ops.wait_tensor.default: _wait,
            _ops._wrap_tensor_autograd.default: _wait,
        }
    )
