"""FSDP2 (``fully_shard``) training on lazax, one device per process, launched by torchrun.

    XLA_FLAGS=--xla_force_host_platform_device_count=1 \\
        torchrun --nproc-per-node 2 examples/fsdp2.py [--steps N] [--bf16]

On this CPU host the flag gives each process one virtual CPU device (without it, each
process would see every core as a device; FSDP2's mesh is one device per process). On
GPUs: ``PJRT_DEVICE=CUDA`` and one process per GPU, no flag.

The torch recipe, unchanged but for the device: ``init_process_group("lazax")`` joins
the processes, ``init_device_mesh("lazax", (world,))`` is their mesh, ``fully_shard``
on each block and on the root splits every parameter by rows over it (DTensors), and
AdamW steps on the shards. Each process loads its own share of each batch
(``DistributedSampler``); FSDP2 averages the gradients over the processes, so each step
equals one step on the whole batch. ``--bf16`` computes in bfloat16 and reduces
gradients in float32 (``MixedPrecisionPolicy``). Gradients are clipped to norm 1
(``clip_grad_norm_`` on the sharded gradients: the norm of the whole model's). Every
process prints, for each step, the mean loss over the whole batch and the gradients'
norm (the same numbers in every process).
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import lazax.modes as lx


def dataset() -> TensorDataset:
    """The same synthetic classification data in every process (one seed)."""
    g = torch.Generator().manual_seed(0)
    features = torch.randn(1024, 32, generator=g)
    labels = (features[:, :10] * torch.arange(1, 11)).argmax(dim=1)
    return TensorDataset(features, labels)


def model() -> torch.nn.Sequential:
    """Four blocks and a head, the same initial weights in every process (one seed)."""
    torch.manual_seed(0)
    blocks = [torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU()) for _ in range(4)]
    return torch.nn.Sequential(*blocks, torch.nn.Linear(32, 10))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=16, help="rows per process per step")
    parser.add_argument("--bf16", action="store_true", help="bfloat16 compute, float32 reduce")
    args = parser.parse_args()

    dist.init_process_group("lazax")  # joins the processes torchrun started
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("lazax", (world,))

    net = model().to(lx.device())
    options = {"mesh": mesh}
    if args.bf16:
        options["mp_policy"] = MixedPrecisionPolicy(torch.bfloat16, torch.float32)
    for block in net[:-1]:
        fully_shard(block, **options)
    fully_shard(net, **options)  # the root: the head, and the step's hooks
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)

    data = dataset()
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, seed=0)
    loader = DataLoader(data, batch_size=args.batch, sampler=sampler, drop_last=True)
    losses, norms = [], []
    for step, (x, y) in enumerate(loader):
        if step == args.steps:
            break
        opt.zero_grad()
        loss = F.cross_entropy(net(x.to(lx.device())).float(), y.to(lx.device()))
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)  # a DTensor
        opt.step()
        # Every process reads, in step: a read in one process only would change the
        # graphs the others run (lazax raises GraphsDifferError).
        mean = loss.detach().clone()
        dist.all_reduce(mean, op=dist.ReduceOp.AVG)  # equal shares: the whole batch's
        losses.append(mean.item())
        norms.append(norm.full_tensor().item())
    print(
        f"process {rank} of {world}: {len(losses)} steps, losses {losses}, grad norms {norms}",
        flush=True,
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
