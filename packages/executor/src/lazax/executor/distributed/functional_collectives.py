"""torch's functional collectives (``torch.ops._c10d_functional``, which DTensor and
FSDP2 call) on lazax tensors.

Contract: the collectives are ops lazax lowers (``ops.collectives``): traced into the
caller's graph, they run inside its program, between the job's processes. ``install()``
registers their handlers: each traces the op as any op is traced, and tags its node
with the order this process issued it (``barrier.collective_cut``: a graph the
processes traced differently runs cut at its collectives, in that order).
A collective over a group of part of the job (a DeviceMesh dimension's) is the job's
all-gather and the group's rows of it (``subgroups``).
``wait_tensor`` and ``_wrap_tensor_autograd`` are the identity on lazax tensors (a
traced value needs no wait: whatever reads it runs after it).
"""

from __future__ import annotations

import torch
import torch.distributed._functional_collectives  # noqa: F401  (loads the ops)

from ..barrier.collective_cut import tag_collective
from ..barrier.executor import EXECUTOR
from ..dispatch.plans import FUNCTIONAL, OpPlan
from ..dispatch.run import run_plan
from ..dispatch.special import register_special
from ..ops import get_lowering
from ..state.values import ir_value
from ..tensor.lazy import LazyTensor
from . import subgroups

__all__ = ["install"]

_ops = torch.ops._c10d_functional
_JOB = "lazax:job"  # the group name of the job's own all-gather (the lowering reads none)


def _tagged(plan: OpPlan, args, kwargs):
    result = run_plan(plan, args, kwargs)
    first = result[0] if isinstance(result, (list, tuple)) else result
    if type(first) is LazyTensor:
        node = ir_value(first).node
        if node.operands and node.data is None:  # (eager mode has run it already)
            tag_collective(node)
    return result


_ALL_GATHER = _ops.all_gather_into_tensor.default
_GATHER = OpPlan(_ALL_GATHER, _ALL_GATHER.name(), FUNCTIONAL)


def _gather_job(x: torch.Tensor) -> torch.Tensor:
    """Every process's ``x``, stacked in process order: ``(processes, *x.shape)``."""
    count = EXECUTOR.runtime.process_count
    return _tagged(_GATHER, (torch.ops.aten.unsqueeze.default(x, 0), count, _JOB), {})


_GROUP_GATHER = torch.ops.lazax.group_gather.default
_GROUPS = OpPlan(_GROUP_GATHER, _GROUP_GATHER.name(), FUNCTIONAL)


def _gather_groups(x: torch.Tensor, partition: list, size: int) -> torch.Tensor:
    """Every member's ``x`` within each group of ``partition``: ``(size, *x.shape)``."""
    return _tagged(_GROUPS, (x, partition, size), {})


def _traced(func):
    plan = OpPlan(func, func.name(), FUNCTIONAL)

    def run(args, kwargs):
        group = kwargs.get("group_name", args[-1] if args else None)
        members = subgroups.members_of(group) if group is not None else None
        if members is not None:
            return subgroups.run(func, args, kwargs, members, _gather_job, _gather_groups)
        return _tagged(plan, args, kwargs)

    return run


def _wait(args, kwargs):
    return args[0]


def _collectives() -> list:
    """The functional collectives lazax lowers (``ops.collectives``' rules)."""
    found = []
    for name in dir(_ops):
        packet = getattr(_ops, name, None)
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            continue
        for overload in packet.overloads():
            func = getattr(packet, overload)
            rule = get_lowering(func)
            if rule is not None and rule.collective:
                found.append(func)
    return found


def install() -> None:
    handlers = {func: _traced(func) for func in _collectives()}
    handlers[_ops.wait_tensor.default] = _wait
    handlers[_ops._wrap_tensor_autograd.default] = _wait
    register_special(handlers)
