"""``torch_xla.utils``: torch_xla's plain helpers (``utils.utils``)."""

from . import utils

__all__ = ["utils"]
