"""Several processes as one job: ``torchrun --nproc-per-node N train.py`` and SPMD.

import lazax.modes as lx
lx.distributed.initialize()          # first thing: joins the processes torchrun started
mesh = lx.Mesh(range(lx.global_device_count()), (lx.global_device_count(),), ("data",))
x = lx.distributed.global_tensor(my_batch, mesh, ("data", None))  # this process's rows
loss = step(x)                       # one program over every process's devices
loss.item()                          # a replicated value reads back whole everywhere

Contract:
- ``initialize(coordinator_address=None, num_processes=None, process_id=None,
  local_device_ids=None, timeout=300, heartbeat_timeout=100)``: joins this process to
  the job (jax's distributed runtime) before anything uses a device. Unset arguments
  come from the launcher's environment: ``RANK`` and ``WORLD_SIZE`` (torchrun's, or any
  launcher's that sets them; without them, one process), and the coordinator from
  ``LAZAX_COORDINATOR_ADDRESS`` or else torch's own rendezvous (``MASTER_ADDR`` /
  ``MASTER_PORT``): process 0 starts jax's coordinator on a free port and publishes
  ``MASTER_ADDR:port`` in torch's store (torchrun's agent already holds
  ``MASTER_PORT``). With one process it joins nothing.
  On a GPU or TPU with several processes per host, each takes device ``LOCAL_RANK``
  unless ``local_device_ids`` says otherwise. ``timeout``: seconds to wait for every
  process to join; ``heartbeat_timeout``: seconds without a heartbeat after which a
  process counts as dead.
- ``is_initialized()``; ``global_tensor`` and ``local_part`` (``lazax.executor``'s).
- ``save(state_dict, path)`` / ``load(state_dict, path)``: checkpoints written by every
  process, each its own pieces (``lazax.executor``'s ``distributed.sharded_checkpoint``).
- torch.distributed's ``"lazax"`` backend is registered at import:
  ``dist.init_process_group("lazax")`` joins the job (if ``initialize`` did not) and
  gives ``LazaxProcessGroup``, collectives on lazax tensors. Its creator is public
  (``create_process_group(store, rank, size, timeout)``, torch's backend-creator
  signature) so that another name can be registered for the same backend (the
  ``torch_xla`` compatibility package's ``"xla"``).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from datetime import timedelta

from lazax import pjrt as _pjrt
from lazax.executor import (
    DEVICE_NAME,
    GraphsDifferError,
    LazaxProcessGroup,
    global_tensor,
    load_sharded,
    local_part,
    save_sharded,
)

__all__ = [
    "GraphsDifferError",
    "LazaxProcessGroup",
    "create_process_group",
    "global_tensor",
    "initialize",
    "is_initialized",
    "load",
    "local_part",
    "save",
]


def save(state_dict, path) -> None:
    """Write ``state_dict`` (nested dicts and lists of lazax tensors and values) to the
    directory ``path``, every process its own pieces (no process writes or holds a whole
    sharded tensor, and a replicated one is written once). Every process calls it."""
    save_sharded(state_dict, path)


def load(state_dict, path) -> None:
    """Load what ``save`` wrote into ``state_dict``, in place, each tensor keeping its
    current layout (each device reads only its pieces). Every process calls it."""
    load_sharded(state_dict, path)


_STORE: list = []  # torch's rendezvous store, kept while the process lives


def is_initialized() -> bool:
    """Whether this process joined a job of several processes."""
    return _pjrt.is_distributed()


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    local_device_ids: Sequence[int] | None = None,
    timeout: float = 300,
    heartbeat_timeout: float = 100,
    store=None,
) -> None:
    """Join the job's other processes (see the module docstring). ``store``: a torch
    store every process reaches, to meet through instead of ``MASTER_ADDR`` /
    ``MASTER_PORT``'s."""
    if num_processes is None:
        num_processes = _env_int("WORLD_SIZE")
    if process_id is None:
        process_id = _env_int("RANK")
    if not 0 <= process_id < num_processes:
        raise ValueError(
            f"process_id must be in [0, {num_processes}) for a job of {num_processes} "
            f"processes, but got {process_id}"
        )
    if num_processes == 1:
        return
    if coordinator_address is None:
        coordinator_address = os.environ.get("LAZAX_COORDINATOR_ADDRESS") or _rendezvous(
            process_id, num_processes, timeout, store
        )
    if local_device_ids is None and _pjrt.platform_from_env() != "cpu":
        per_host = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        if per_host > 1:
            local_device_ids = [int(os.environ.get("LOCAL_RANK", "0"))]
    _pjrt.initialize_distributed(
        coordinator_address,
        num_processes,
        process_id,
        local_device_ids=local_device_ids,
        timeout_s=int(timeout),
        heartbeat_timeout_s=int(heartbeat_timeout),
    )


def _env_int(name: str) -> int:
    """A launcher's variable; unset (no launcher): a job of one process, process 0."""
    raw = os.environ.get(name)
    if raw is None:
        return 1 if name == "WORLD_SIZE" else 0
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer") from None


def _rendezvous(process_id: int, num_processes: int, timeout: float, store=None) -> str:
    """Process 0 picks a port for jax's coordinator and tells the others through torch's
    rendezvous store (torchrun's agent store, or one process 0 hosts at MASTER_PORT)."""
    import torch.distributed as dist

    host = os.environ.get("MASTER_ADDR")
    if store is not None:
        return _publish(dist.PrefixStore("lazax/", store), process_id, host or "127.0.0.1")
    if host is None or "MASTER_PORT" not in os.environ:
        raise ValueError(
            "lazax.modes.distributed.initialize() needs a coordinator: pass "
            "coordinator_address='host:port' (process 0's host), set "
            "LAZAX_COORDINATOR_ADDRESS, or launch with torchrun (MASTER_ADDR, MASTER_PORT)"
        )

    try:
        rendezvous = dist.rendezvous(
            "env://", rank=process_id, world_size=num_processes, timeout=timedelta(seconds=timeout)
        )
        store, _, _ = next(rendezvous)
    except (RuntimeError, ValueError) as err:  # torch's DistError is a RuntimeError
        raise TimeoutError(
            f"lazax: process {process_id} of {num_processes} could not meet the others at "
            f"{host}:{os.environ['MASTER_PORT']} within {timeout:g} s (a process did "
            f"not start, or died; or MASTER_ADDR / MASTER_PORT differ between them): {err}"
        ) from err
    # A restarted attempt (torchrun --max-restarts) must not read the last one's port.
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return _publish(dist.PrefixStore(f"lazax/{attempt}/", store), process_id, host)


def _publish(store, process_id: int, host: str) -> str:
    _STORE.append(store)
    if process_id == 0:
        with socket.socket() as probe:
            probe.bind(("", 0))
            port = probe.getsockname()[1]
        store.set("jax_coordinator", f"{host}:{port}")
    return store.get("jax_coordinator").decode()


def create_process_group(store, rank: int, size: int, timeout):
    """torch.distributed's creator for the "lazax" backend: joins the job first if the
    script did not (the process group's store carries the coordinator's address)."""
    if size > 1 and not is_initialized():
        initialize(
            num_processes=size,
            process_id=rank,
            timeout=timeout.total_seconds() if timeout else 300,
            store=store,
        )
    return LazaxProcessGroup(rank, size)


def _register_backend() -> None:
    import torch.distributed as dist

    if dist.is_available() and "lazax" not in dist.Backend.backend_list:
        dist.Backend.register_backend("lazax", create_process_group, devices=[DEVICE_NAME])


_register_backend()
