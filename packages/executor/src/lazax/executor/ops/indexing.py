"""indexing lowerings."""

from __future__ import annotations

import jax.numpy as jnp
import torch

from ._registry import lowering

aten = torch.ops.aten
