"""``torch_xla.distributed``: ``spmd`` (``xs``), ``parallel_loader`` (``pl``),
``xla_multiprocessing`` (``xmp``)."""

from . import parallel_loader, spmd, xla_multiprocessing

__all__ = ["parallel_loader", "spmd", "xla_multiprocessing"]
