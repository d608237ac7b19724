"""``torch_xla.distributed.xla_backend``: torch.distributed's ``"xla"`` backend and its
``xla://`` init method, over lazax's ``"lazax"`` backend.

Contract (torch_xla 2.9's documented use, ``import torch_xla.distributed.xla_backend``
then ``dist.init_process_group("xla", init_method="xla://")``):
- Importing this module registers the backend ``"xla"`` for the device (its creator is
  lazax's ``lx.distributed.create_process_group``: the group is a ``LazaxProcessGroup``,
  collectives traced into the step's program) and the rendezvous scheme ``xla://``.
  Importing it twice registers nothing more.
- ``xla://`` meets the job's other processes as ``env://`` does when a launcher set
  ``WORLD_SIZE`` above 1 (torchrun: ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
  ``MASTER_PORT``); otherwise the job is this one process (rank 0 of 1, an in-process
  store): lazax drives every local device from one process, where torch_xla would
  start one process per device. ``rank=`` / ``world_size=`` given to
  ``init_process_group`` win over the environment, as with ``env://``.
- ``ProcessGroupXla`` is the group's class (``LazaxProcessGroup``).
"""

from __future__ import annotations

import os
import urllib.parse

import torch.distributed as dist
from torch.distributed.rendezvous import register_rendezvous_handler, rendezvous

import lazax.modes as lx

from .._api import DEVICE_TYPE

__all__ = ["ProcessGroupXla", "XLA_BACKEND"]

XLA_BACKEND = "xla"
ProcessGroupXla = lx.distributed.LazaxProcessGroup


def _query_int(query: dict, name: str) -> int | None:
    values = query.get(name)
    return int(values[0]) if values and int(values[0]) >= 0 else None


def _xla_rendezvous(url: str, timeout=None, **kwargs):
    """torch's rendezvous handler for ``xla://`` (see the module docstring)."""
    query = urllib.parse.parse_qs(urllib.parse.urlparse(url).query)
    world_size = _query_int(query, "world_size")
    if world_size is None:
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = _query_int(query, "rank")
    if rank is None:
        rank = int(os.environ.get("RANK", "0"))
    if world_size > 1:
        return rendezvous(
            "env://", rank=rank, world_size=world_size, **({"timeout": timeout} if timeout else {})
        )
    if rank != 0:
        raise ValueError(f"xla:// with a world size of 1 needs rank 0, but got rank {rank}")
    return iter([(dist.HashStore(), 0, 1)])


def _register() -> None:
    if XLA_BACKEND not in dist.Backend.backend_list:
        dist.Backend.register_backend(
            XLA_BACKEND, lx.distributed.create_process_group, devices=[DEVICE_TYPE]
        )
    try:
        register_rendezvous_handler("xla", _xla_rendezvous)
    except RuntimeError:  # registered already (torch refuses a scheme twice)
        pass


_register()
