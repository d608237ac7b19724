"""``torch_xla.core``: ``xla_model`` (``import torch_xla.core.xla_model as xm``) and
``dynamo_bridge``, imported here so that lazax's dynamo integration is installed before
dynamo traces anything for ``torch.compile(backend="openxla")``."""

from . import dynamo_bridge, xla_model

__all__ = ["dynamo_bridge", "xla_model"]
