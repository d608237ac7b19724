"""Between lazax and JAX: arrays both ways, JAX functions as graph nodes, JAX lowerings
of torch ops (see each module)."""

from .arrays import from_jax, to_jax
from .calls import call_jax, prepare_call_jax
from .lowerings import register_lowering

__all__ = ["call_jax", "from_jax", "prepare_call_jax", "register_lowering", "to_jax"]
