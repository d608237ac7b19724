"""``torch_xla.experimental.scan``: ``scan(fn, init, xs)``, as one XLA loop.

Contract (torch_xla 2.9's documented behaviour):
- ``scan(fn, init, xs, partition_fn=default_partition, is_fn_pure=True)`` runs
  ``carry, y = fn(carry, x)`` for each ``x`` along the leading dimension of every leaf of
  ``xs`` (a pytree of tensors), starting from ``init`` (a pytree), and returns the last
  carry and the ``y``s stacked along a new leading dimension (a pytree of the same
  structure; ``None`` where ``fn`` returns ``None``, or an empty tuple). Gradients flow
  to ``init``,
  ``xs`` and the tensors ``fn`` closes over.
- It is torch's own ``torch._higher_order_ops.scan``, which lazax lowers to one
  ``lax.scan`` (docs/deep_models.md): one program, no graph break, no host read.
- ``partition_fn`` and ``is_fn_pure`` are accepted; they change how torch_xla traces
  (what its backward keeps, whether it caches the trace), never the values, and lazax
  traces ``fn`` its own way, so they change nothing here.
"""

from __future__ import annotations

from torch._higher_order_ops.scan import scan as _torch_scan
from torch.utils._pytree import tree_leaves

__all__ = ["scan"]


def scan(fn, init, xs, partition_fn=None, is_fn_pure: bool = True):
    """``(last carry, stacked ys)`` of ``fn`` over ``xs`` (see the module docstring)."""
    del partition_fn, is_fn_pure  # values do not depend on them (module docstring)
    leaves = tree_leaves(xs)
    if not leaves:
        raise ValueError("scan: xs holds no tensor to scan over")
    length = leaves[0].shape[0] if leaves[0].dim() else None
    if length is None or any(leaf.dim() == 0 or leaf.shape[0] != length for leaf in leaves):
        shapes = [tuple(leaf.shape) for leaf in leaves]
        raise ValueError(f"scan: every leaf of xs needs the same leading dimension, got {shapes}")

    def step(carry, x):
        carry, y = fn(carry, x)
        # torch's scan stacks what each step returns and takes no None there: the empty
        # tuple, which it takes, stands for it (a flag set here would be a side effect
        # that torch's scan refuses)
        return carry, (() if y is None else y)

    carry, ys = _torch_scan(step, init, xs)
    return carry, (None if isinstance(ys, tuple) and not ys else ys)
