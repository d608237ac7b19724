"""``torch_xla._internal``: the internal helpers scripts import (``tpu``)."""

from . import tpu

__all__ = ["tpu"]
