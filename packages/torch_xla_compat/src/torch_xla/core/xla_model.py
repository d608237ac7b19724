"""``torch_xla.core.xla_model`` (``xm``) over lazax, with torch_xla 2.9's semantics.

Contract:
- ``xla_device(n=None, devkind=None)``: the lazax device ``n``; ``xla_device_hw(device)``:
  ``"CPU"``, ``"CUDA"`` or ``"TPU"``; ``is_xla_tensor(t)``: ``t`` is on lazax.
- ``mark_step(wait=False, reset_scope=True)``: ``torch_xla.sync``; ``add_step_closure``.
- ``optimizer_step(optimizer, barrier=False, optimizer_args={}, groups=None,
  pin_layout=True)``: the gradients are averaged over the replicas (``reduce_gradients``:
  nothing to do with one), ``optimizer.step(**optimizer_args)`` runs, and with
  ``barrier=True`` the step is marked; returns what ``step`` returned.
  ``_fetch_gradients(optimizer)``: the gradients it would average.
- ``wait_device_ops(devices=[])``: ``lx.wait_device_ops()``.
- ``save(data, file_or_path, master_only=True, global_master=False)``: ``torch.save`` of a
  copy whose lazax tensors are CPU tensors, by the master only (all, if not
  ``master_only``), then a ``rendezvous``.
- Ordinals: ``get_ordinal()``, ``get_local_ordinal()``, ``world_size()`` /
  ``xrt_world_size()``, ``is_master_ordinal(local=True)``, ``master_print``.
- Collectives (``all_reduce``, ``all_gather``, ``reduce_scatter``, ``rendezvous``): with one
  replica, the reduction of one value (``scale`` applied); with several, through
  ``torch.distributed`` when a process group (lazax's ``"lazax"`` backend) is initialized.
  ``all_reduce`` of a tensor returns a new tensor; of a list, updates it in place and
  returns it. ``groups`` (torch_xla's replica groups: lists of ordinals that together
  hold every replica once, ``[[0, 1], [2, 3]]``) reduce, gather and scatter within each
  replica's own group: a ``torch.distributed.new_group`` per list (made once per
  ``groups``, by every process, as torch asks), over lazax's sub-groups; groups that do
  not cover every replica once raise ``ValueError``.
- ``get_rng_state(device=None)`` is one int holding lazax's (seed, counter) pair
  (``seed + counter * 2**64``); ``set_rng_state(seed, device=None)`` takes such an int
  (or a plain seed) and restores it, so a saved state repeats the same random numbers.
- ``optimization_barrier_(tensors)``: ``jax.lax.optimization_barrier`` over the tensors,
  in place (one ``lx.call_jax`` node; values unchanged).
- ``send_cpu_data_to_device(datas, device, input_sharding=None)``: ``datas`` (a tensor, or
  lists, tuples, dicts and dataclasses of them) with every CPU tensor on ``device``
  (sharded by ``input_sharding``, an ``xs.ShardingSpec`` or ``lx.Sharding``, where it
  applies), placed at once as ``pl.MpDeviceLoader`` places a batch, with no step marked.
- ``get_memory_info(device=None)``: ``bytes_used``, ``peak_bytes_used``, and
  ``bytes_limit`` where the device says (``lx.memory_info``).
"""

from __future__ import annotations

import sys

import jax
import torch

import lazax.modes as lx

from .. import _api, runtime

__all__ = [
    "REDUCE_AND",
    "REDUCE_MAX",
    "REDUCE_MIN",
    "REDUCE_MUL",
    "REDUCE_OR",
    "REDUCE_SUM",
    "add_step_closure",
    "all_gather",
    "all_reduce",
    "get_local_ordinal",
    "get_memory_info",
    "get_ordinal",
    "get_rng_state",
    "get_xla_supported_devices",
    "is_master_ordinal",
    "is_xla_tensor",
    "mark_step",
    "master_print",
    "optimization_barrier_",
    "optimizer_step",
    "reduce_gradients",
    "reduce_scatter",
    "rendezvous",
    "save",
    "send_cpu_data_to_device",
    "set_rng_state",
    "wait_device_ops",
    "world_size",
    "xla_device",
    "xla_device_hw",
    "xrt_world_size",
]

REDUCE_SUM = "sum"
REDUCE_MUL = "mul"
REDUCE_AND = "and"
REDUCE_OR = "or"
REDUCE_MIN = "min"
REDUCE_MAX = "max"

_MASK64 = (1 << 64) - 1

add_step_closure = _api.add_step_closure


def xla_device(n: int | None = None, devkind: str | None = None) -> torch.device:
    """The lazax device ``n`` (0 when None); ``devkind`` must name this platform."""
    if devkind is not None and devkind.upper() not in (runtime.device_type(), "XLA"):
        raise RuntimeError(f"no {devkind} device: lazax runs on {runtime.device_type()}")
    return _api.device(n)


def get_xla_supported_devices(devkind: str | None = None, max_devices=None) -> list[str]:
    """This process's devices as strings (``"lazax:0"``, ...)."""
    found = [str(d) for d in _api.devices()]
    return found[:max_devices] if max_devices is not None else found


def xla_device_hw(device) -> str:
    """The hardware behind a lazax device: ``"CPU"``, ``"CUDA"`` or ``"TPU"``."""
    kind = device.type if isinstance(device, torch.device) else str(device).partition(":")[0]
    if kind not in ("lazax", "xla"):
        raise RuntimeError(f"{device} is not a lazax device")
    return runtime.device_type()


def is_xla_tensor(tensor) -> bool:
    return isinstance(tensor, torch.Tensor) and tensor.device.type == _api.DEVICE_TYPE


def mark_step(wait: bool = False, reset_scope: bool = True) -> None:
    """Cut the trace: the pending graph compiles once, runs asynchronously."""
    _api.sync(wait=wait, reset_scope=reset_scope)


def wait_device_ops(devices=()) -> None:
    """Wait for everything dispatched so far."""
    lx.wait_device_ops()


def get_ordinal(defval: int = 0) -> int:
    return runtime.global_ordinal()


def get_local_ordinal(defval: int = 0) -> int:
    return runtime.local_ordinal()


def world_size() -> int:
    return runtime.world_size()


def xrt_world_size(defval: int = 1) -> int:
    """Deprecated in torch_xla: ``world_size()``."""
    return runtime.world_size()


def is_master_ordinal(local: bool = True) -> bool:
    return (get_local_ordinal() if local else get_ordinal()) == 0


def master_print(*args, fd=None, local: bool = False, flush: bool = False) -> None:
    """``print`` on the master replica only (``fd``: sys.stdout when None)."""
    if is_master_ordinal(local=local):
        print(*args, file=fd if fd is not None else sys.stdout, flush=flush)


def _distributed() -> bool:
    dist = torch.distributed
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


_GROUPS: dict = {}  # replica groups -> this process's torch group of them


def _group(groups):
    """This replica's torch process group among ``groups``; None for all replicas."""
    if not groups:
        return None
    key = tuple(tuple(int(r) for r in group) for group in groups)
    if key not in _GROUPS:
        count = world_size()
        if sorted(r for group in key for r in group) != list(range(count)):
            raise ValueError(
                f"replica groups must hold every replica of the {count} once; got "
                f"{[list(g) for g in key]}"
            )
        if not _distributed():
            _GROUPS[key] = None
        else:
            made = [torch.distributed.new_group(list(group)) for group in key]
            me = get_ordinal()
            _GROUPS[key] = next(pg for group, pg in zip(key, made) if me in group)
    return _GROUPS[key]


_OPS = {
    REDUCE_SUM: "SUM",
    REDUCE_MUL: "PRODUCT",
    REDUCE_MIN: "MIN",
    REDUCE_MAX: "MAX",
    REDUCE_AND: "MIN",
    REDUCE_OR: "MAX",
}


def _reduce(reduce_type: str, tensor: torch.Tensor, scale: float, group=None) -> torch.Tensor:
    if reduce_type not in _OPS:
        raise ValueError(f"unknown reduce type {reduce_type!r}; expected one of {list(_OPS)}")
    result = tensor.clone()
    if _distributed():
        dist = torch.distributed
        dist.all_reduce(result, op=getattr(dist.ReduceOp, _OPS[reduce_type]), group=group)
    if scale != 1.0:
        result = result * scale
    return result


def all_reduce(reduce_type: str, inputs, scale: float = 1.0, groups=None, pin_layout=True):
    """Reduce ``inputs`` over the replicas (see the module docstring)."""
    group = _group(groups)
    if isinstance(inputs, torch.Tensor):
        return _reduce(reduce_type, inputs, scale, group)
    for tensor in inputs:
        with torch.no_grad():
            tensor.copy_(_reduce(reduce_type, tensor, scale, group))
    return inputs


def all_gather(value: torch.Tensor, dim: int = 0, groups=None, output=None, pin_layout=True):
    """Every replica's ``value`` concatenated along ``dim``."""
    group = _group(groups)
    if _distributed():
        count = torch.distributed.get_world_size(group)
        parts = [torch.empty_like(value) for _ in range(count)]
        torch.distributed.all_gather(parts, value.contiguous(), group=group)
        result = torch.cat(parts, dim=dim)
    else:
        result = value.clone()
    if output is not None:
        output.copy_(result)
        return output
    return result


def reduce_scatter(
    reduce_type, input, scale, scatter_dim, shard_count, groups=None, output=None, pin_layout=True
):
    """Reduce ``input`` over the replicas and keep this replica's ``1/shard_count``."""
    group = _group(groups)
    reduced = _reduce(reduce_type, input, scale, group)
    mine = torch.distributed.get_rank(group) if group is not None else get_ordinal()
    piece = reduced.chunk(shard_count, dim=scatter_dim)[mine % shard_count]
    if output is not None:
        output.copy_(piece)
        return output
    return piece.clone()


def rendezvous(tag: str, payload: bytes = b"", replicas=()) -> list[bytes]:
    """Wait for every replica to reach ``tag``; returns every replica's ``payload``."""
    if not _distributed():
        return [payload]
    gathered: list = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(gathered, payload)
    return gathered


def _fetch_gradients(optimizer) -> list[torch.Tensor]:
    """The gradients of the optimizer's parameters that have one, in its groups' order
    (torch_xla's helper, which its syncfree optimizers' users call)."""
    return [
        p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None
    ]


def reduce_gradients(optimizer, groups=None, pin_layout=True) -> None:
    """Average every gradient over the replicas (nothing with one)."""
    count = world_size()
    if count == 1 or not _distributed():
        return
    grads = _fetch_gradients(optimizer)
    all_reduce(REDUCE_SUM, grads, scale=1.0 / count, groups=groups)


def optimizer_step(
    optimizer, barrier: bool = False, optimizer_args=None, groups=None, pin_layout=True
):
    """Reduce the gradients, ``optimizer.step()``, and mark the step if ``barrier``."""
    reduce_gradients(optimizer, groups=groups, pin_layout=pin_layout)
    loss = optimizer.step(**(optimizer_args or {}))
    if barrier:
        mark_step()
    return loss


def _to_cpu(data):
    if isinstance(data, torch.Tensor):
        return data.detach().cpu() if data.device.type == _api.DEVICE_TYPE else data
    if isinstance(data, dict):
        return type(data)((k, _to_cpu(v)) for k, v in data.items())
    if isinstance(data, (list, tuple)) and not hasattr(data, "_fields"):
        return type(data)(_to_cpu(v) for v in data)
    return data


def save(data, file_or_path, master_only: bool = True, global_master: bool = False) -> None:
    """``torch.save`` of ``data`` with CPU copies of its lazax tensors (master only)."""
    cpu_data = _to_cpu(data)
    if not master_only or is_master_ordinal(local=not global_master):
        torch.save(cpu_data, file_or_path)
    rendezvous("torch_xla.core.xla_model.save")


def get_rng_state(device=None) -> int:
    """The device RNG's state as one int (``seed + counter * 2**64``)."""
    state = torch.get_device_module(_api.DEVICE_TYPE).get_rng_state()
    # 16 bytes (CUDA's philox layout): the seed, then the counter, as two int64s.
    seed, counter = (int(v) for v in state.view(torch.int64).tolist())
    return (seed & _MASK64) | (counter << 64)


def set_rng_state(seed: int, device=None) -> None:
    """Restore ``get_rng_state()``'s int, or seed with a plain int."""
    seed = int(seed)
    low, counter = seed & _MASK64, seed >> 64
    # As a signed int64: lazax's state tensor cannot hold a seed of 2**63 or more, and
    # its random keys depend on the seed modulo 2**63 only, so both read the same.
    signed = low - (1 << 64) if low >= 1 << 63 else low
    state = torch.tensor([signed, counter], dtype=torch.int64)
    torch.get_device_module(_api.DEVICE_TYPE).set_rng_state(state)


def optimization_barrier_(tensors) -> None:
    """XLA's optimization barrier over ``tensors``, in place: their values pass through
    ``jax.lax.optimization_barrier`` (one node of the graph, ``lx.call_jax``), so XLA
    neither moves computation across it nor merges what it separates."""
    tensors = list(tensors)
    if not tensors:
        return
    with torch.no_grad():
        outs = lx.call_jax(jax.lax.optimization_barrier, tensors)
        for tensor, out in zip(tensors, outs):
            tensor.copy_(out)


def send_cpu_data_to_device(datas, device, input_sharding=None):
    """``datas`` with its CPU tensors placed on ``device``, sharded by ``input_sharding``
    where it applies (lazax's device loader does the placing, for one item)."""
    loader = lx.DeviceLoader([datas], device, prefetch=1, sharding=input_sharding, sync=False)
    batches = iter(loader)
    try:
        return next(batches)
    finally:
        batches.close()


def get_memory_info(device=None) -> dict:
    """``bytes_used``, ``peak_bytes_used`` and, where known, ``bytes_limit``."""
    return lx.memory_info(device)
