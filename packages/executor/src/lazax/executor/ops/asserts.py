"""``lazax::assert_async(cond, msg)``: torch's ``_assert_async`` as an op with a result,
so that a compiled program can carry it.

Contract: the op returns ``cond`` as a 0-dim bool and checks on the device that it is
true; if not, ``RuntimeError(msg)`` is raised at the next sync point, as CUDA's
``_assert_async`` raises later (``barrier.checks``). torch's ``_assert_async`` returns
nothing, so no graph would hold it; the dynamo bridge rewrites each ``_assert_async``
of an FX graph into this op and keeps its result as an extra output of the graph's
program (``F.one_hot``'s range checks under ``torch.compile``). On the CPU and on a
fake tensor the op checks nothing itself (a fake value has none; a CPU caller has
``_assert_async``).
"""

from __future__ import annotations

import torch

from ._registry import lowering

_LIB = torch.library.Library("lazax", "FRAGMENT")
_LIB.define("assert_async(Tensor cond, str msg) -> Tensor")


def _value(cond, msg):
    # A new tensor: a custom op's result may not alias its input.
    return cond.to(torch.bool).reshape(()).clone()


_LIB.impl("assert_async", _value, "CompositeExplicitAutograd")
torch.library.register_fake("lazax::assert_async", _value, lib=_LIB)


@lowering("lazax::assert_async", checked=True)
def assert_async(ctx, cond, msg):
    holds = cond.astype(bool).reshape(())
    ctx.check(~holds, None, "RuntimeError", msg)
    return holds
