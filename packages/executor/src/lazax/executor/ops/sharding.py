"""The sharding constraint pseudo-op (``lazax::shard``) and its registry.

Contract: a constraint is named by a stable string key (mesh and partition spec), so a
graph hashes the same in every process; ``CONSTRAINTS`` maps the key to jax's
``NamedSharding``. ``ACTIVE["active"]`` turns true at the first sharding of the process:
until then, the barrier's placement step costs nothing.
"""

from __future__ import annotations

from jax.lax import with_sharding_constraint

from ._registry import lowering

__all__ = ["ACTIVE", "CONSTRAINTS", "SHARD_OP"]

SHARD_OP = "lazax::shard"

ACTIVE = {"active": False}  # set by the first mark_sharding: until then, zero cost

CONSTRAINTS: dict[str, object] = {}  # constraint key -> jax NamedSharding


@lowering(SHARD_OP)
def _shard(ctx, x, key):
    return with_sharding_constraint(x, CONSTRAINTS[key])
