"""``torch_xla.distributed.xla_multiprocessing`` (``xmp``).

Contract: ``spawn(fn, args=(), nprocs=None, join=True, daemon=False,
start_method="spawn")`` runs ``fn(0, *args)`` in this process: lazax drives every
device of a host from one process (sharding over them with ``xs``), so the replicas
torch_xla spawns one per device are one process here. ``nprocs`` other than None or 1
raises ``ValueError`` pointing at torchrun, lazax's way to run several processes.
"""

from __future__ import annotations

__all__ = ["spawn"]


def spawn(fn, args=(), nprocs=None, join: bool = True, daemon: bool = False, start_method="spawn"):
    """Run ``fn(0, *args)`` here (one process drives every local device)."""
    if nprocs not in (None, 1):
        raise ValueError(
            f"xmp.spawn(nprocs={nprocs}): lazax runs one process per host over all its "
            f"devices; to run several processes, launch the script with torchrun and "
            f"call lazax.modes.distributed.initialize() (docs/distributed.md)"
        )
    return fn(0, *args)
