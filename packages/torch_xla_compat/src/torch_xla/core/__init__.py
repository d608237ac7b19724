"""``torch_xla.core``: holds ``xla_model`` (``import torch_xla.core.xla_model as xm``)."""

from . import xla_model

__all__ = ["xla_model"]
