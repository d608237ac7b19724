"""One process of the DTensor / FSDP2 tests (``test_dtensor.py``): two processes of one
lazax device each, the torch way (one device per process, ``init_device_mesh``),
started with torchrun's variables and ``XLA_FLAGS`` giving each its one CPU device.
``python tests/_dtensor_worker.py``; prints one ``RESULT <json>`` line on success.

- ``dtensor``: ``distribute_tensor`` with ``Shard(0)``, ``to_local``, ``full_tensor``,
  ``DTensor.from_local``, ``redistribute`` Shard -> Replicate -> Shard.
- ``fsdp2``: ``fully_shard`` on each of four blocks of an MLP and on its root, AdamW,
  four steps on this process's half of each batch; torch on the CPU trains the same
  model on the whole batch in this process too (the oracle).
"""

import copy
import json
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

import lazax.modes as lx


def fallbacks() -> dict:
    """Ops that ran on the CPU fallback so far (their counters are named ``ns::op``)."""
    return {n: lx.metrics.counter_value(n) for n in lx.metrics.counter_names() if "::" in n}


def placements(mesh, rank: int) -> dict:
    dev = lx.device()
    whole = torch.arange(24.0).reshape(6, 4)
    d = distribute_tensor(whole.to(dev), mesh, [Shard(0)])
    replicated = d.redistribute(mesh, [Replicate()])
    back = replicated.redistribute(mesh, [Shard(0)])
    mine = torch.full((2, 3), float(rank + 1), device=dev)
    joined = DTensor.from_local(mine, mesh, [Shard(0)])
    return {
        "local": d.to_local().cpu().tolist(),
        "local_device": str(d.to_local().device),
        "full": d.full_tensor().cpu().tolist(),
        "replicated_local": replicated.to_local().cpu().tolist(),
        "back_local": back.to_local().cpu().tolist(),
        "from_local_full": joined.full_tensor().cpu().tolist(),
        "from_local_shape": list(joined.shape),
        "sum": (d * 2).sum().full_tensor().item(),  # an op on DTensors: a Partial, reduced
    }


def mlp() -> torch.nn.Module:
    blocks = [torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh()) for _ in range(4)]
    return torch.nn.Sequential(*blocks)


def fsdp2(mesh, rank: int) -> dict:
    torch.manual_seed(0)
    reference = mlp()
    model = copy.deepcopy(reference).to(lx.device())
    for block in model:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    before = fallbacks()
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    losses, ref_losses, seconds = [], [], []
    for step in range(4):
        g = torch.Generator().manual_seed(step)
        x, y = torch.randn(8, 16, generator=g), torch.randn(8, 16, generator=g)
        half = slice(4 * rank, 4 * rank + 4)
        start = time.monotonic()
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x[half].to(lx.device())), y[half].to(lx.device()))
        loss.backward()
        opt.step()
        lx.sync()
        mean = loss.detach().clone()
        dist.all_reduce(mean, op=dist.ReduceOp.AVG)  # halves of equal size: the batch's mean
        losses.append(mean.item())
        seconds.append(time.monotonic() - start)
        ref_opt.zero_grad()
        ref_loss = torch.nn.functional.mse_loss(reference(x), y)
        ref_loss.backward()
        ref_opt.step()
        ref_losses.append(ref_loss.item())
    params = dict(model.named_parameters())
    return {
        "losses": losses,
        "ref_losses": ref_losses,
        "param_errors": {
            name: (params[name].full_tensor().cpu() - p).abs().max().item()
            for name, p in reference.named_parameters()
        },
        "sharded": {n: [type(p).__name__, list(p.to_local().shape)] for n, p in params.items()},
        "seconds": seconds,
        "cpu_fallbacks": {
            n: count - before.get(n, 0)
            for n, count in fallbacks().items()
            if count != before.get(n, 0)
        },
    }


def main() -> None:
    dist.init_process_group("lazax")  # joins the job itself
    rank = dist.get_rank()
    mesh = init_device_mesh("lazax", (2,))
    result = {"rank": rank, "mesh": str(mesh), "local_devices": lx.device_count()}
    result["dtensor"] = placements(mesh, rank)
    result["fsdp2"] = fsdp2(mesh, rank)
    print("RESULT " + json.dumps(result), flush=True)


main()
