"""The op library: aten op -> jax lowering rules, one module per op family.

Importing this package registers every rule (see ``_registry`` for the contract).
"""

# Families register their rules on import.
from . import (  # noqa: E402,F401
    core,  # copies, conversions, factories, view pseudo-ops
    elementwise,  # unary/binary math, comparisons, where, clamp, activations (+ backward)
    foreach,  # the _foreach_* ops optimizers use
    indexing,  # cat/stack, index/index_put, gather/scatter, triu/tril, arange, masks
    linalg,  # mm, bmm, addmm, baddbmm, dot
    nn,  # softmax, layer norm, embedding, losses, dropout (+ backward)
    random,  # normal_, uniform_, bernoulli, random_
    reductions,  # sum, mean, max/min, argmax, var/std, prod, any/all
    views,  # view ops and reshapes
)
from ._registry import (
    DuplicateLoweringError,
    Lowering,
    LoweringContext,
    get_lowering,
    lowering,
    op_name,
    registered_ops,
)

__all__ = [
    "DuplicateLoweringError",
    "Lowering",
    "LoweringContext",
    "get_lowering",
    "lowering",
    "op_name",
    "registered_ops",
]
