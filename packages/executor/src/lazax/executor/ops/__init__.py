"""The op library: aten op -> jax lowering rules, one module per op family.

Importing this package registers every rule (see ``_registry`` for the contract).
"""

from ._registry import (
    DuplicateLoweringError,
    Lowering,
    LoweringContext,
    get_lowering,
    lowering,
    op_name,
    registered_ops,
)

# Families register their rules on import.
from . import core  # noqa: E402,F401  (copies, conversions, factories, view pseudo-ops)
from . import views  # noqa: E402,F401

__all__ = [
    "DuplicateLoweringError",
    "Lowering",
    "LoweringContext",
    "get_lowering",
    "lowering",
    "op_name",
    "registered_ops",
]
