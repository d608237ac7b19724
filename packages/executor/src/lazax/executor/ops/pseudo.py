"""lazax's own pseudo-ops: IR nodes that no aten op names, built by the layers above and
lowered in this package (``views.py``, ``core.py``, ``sharding.py``).

- ``lazax::view_gather`` (``view_gather``): a strided view read out of a base.
- ``lazax::view_scatter`` (``view_scatter``): a value written through a view into a base.
- ``lazax::copy_to`` (``copy_to``): broadcast and cast to a shape and dtype.
- ``lazax::optimization_barrier`` (``optimization_barrier``): the same value, which XLA
  may not merge with another computation of it (a checkpoint's recomputation).
- ``lazax::shard`` (``sharding.SHARD_OP``): a sharding constraint.
- ``lazax::manual_enter`` / ``lazax::manual_exit`` (``manual``): manual sharding's ends.
- ``lazax::freed`` (``freed``): the content of a storage whose memory was freed
  (``Storage.free``). A sync of everything leaves it alone; read before the next write,
  it lowers to zeros (torch's re-allocated memory holds whatever was there).
"""

from __future__ import annotations

from lazax import ir

__all__ = [
    "COPY_TO",
    "FREED",
    "OPTIMIZATION_BARRIER",
    "VIEW_GATHER",
    "VIEW_SCATTER",
    "contiguous_strides",
    "copy_to",
    "freed",
    "optimization_barrier",
    "view_gather",
    "view_scatter",
]

VIEW_GATHER = "lazax::view_gather"
VIEW_SCATTER = "lazax::view_scatter"
COPY_TO = "lazax::copy_to"
OPTIMIZATION_BARRIER = "lazax::optimization_barrier"
FREED = "lazax::freed"


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides = []
    acc = 1
    for size in reversed(shape):
        strides.append(acc)
        acc *= max(size, 1)
    return tuple(reversed(strides))


def view_gather(base: ir.Value, view: tuple, dtype: str) -> ir.Value:
    size, stride, offset = view
    spec = ir.TensorSpec(size, dtype)
    return ir.Node(VIEW_GATHER, (base,), ((("%", 0), size, stride, offset), ()), (spec,)).outputs[0]


def view_scatter(base: ir.Value, view: tuple, value: ir.Value) -> ir.Value:
    size, stride, offset = view
    return ir.Node(
        VIEW_SCATTER,
        (base, value),
        ((("%", 0), ("%", 1), size, stride, offset), ()),
        (base.spec,),
    ).outputs[0]


def copy_to(value: ir.Value, shape: tuple, dtype: str) -> ir.Value:
    """``value`` broadcast to ``shape`` and cast to ``dtype``."""
    spec = ir.TensorSpec(shape, dtype)
    return ir.Node(COPY_TO, (value,), ((("%", 0), shape, dtype), ()), (spec,)).outputs[0]


def optimization_barrier(value: ir.Value) -> ir.Value:
    """``value``, behind a barrier XLA's optimizations do not see through."""
    return ir.Node(OPTIMIZATION_BARRIER, (value,), ((("%", 0),), ()), (value.spec,)).outputs[0]


def freed(spec: ir.TensorSpec) -> ir.Value:
    """What a freed storage of ``spec`` holds: no operand, so no device data kept."""
    return ir.Node(FREED, (), ((), ()), (spec,)).outputs[0]
