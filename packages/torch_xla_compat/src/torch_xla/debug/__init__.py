"""``torch_xla.debug``: ``metrics`` (``met``) and ``profiler`` (``xp``)."""

from . import metrics, profiler

__all__ = ["metrics", "profiler"]
