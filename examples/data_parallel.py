"""Data-parallel training over every process's devices, launched by torchrun.

    XLA_FLAGS=--xla_force_host_platform_device_count=2 \\
        torchrun --nproc-per-node 2 examples/data_parallel.py [--fsdp] [--steps N]

(the flag gives each process 2 virtual CPU devices; on GPUs, PJRT_DEVICE=CUDA and one
process per GPU). Run alone (``python examples/data_parallel.py``), it is one process.

Each process loads its own share of each batch (``DistributedSampler``) and hands it to
``global_tensor``: one global batch split along the mesh's "data" axis over every
process's devices. The weights are replicated (``--fsdp``: split by rows along "data",
with AdamW's state), and each step is one SPMD program that XLA partitions (the first
step's too: AdamW's state is made on the device as its input); the
processes run it together. Every process runs the same code: reads of replicated values
(the loss) happen in every process, and only the printing is left to process 0.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import lazax.modes as lx


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=16, help="rows per process per step")
    parser.add_argument("--fsdp", action="store_true", help="split weights and state too")
    args = parser.parse_args()

    lx.distributed.initialize()  # first: joins the processes torchrun started
    rank, processes = lx.process_index(), lx.process_count()
    devices = lx.global_device_count()
    mesh = lx.Mesh(range(devices), (devices,), ("data",))

    torch.manual_seed(0)  # the same data and initial weights in every process
    features = torch.randn(4096, 32)
    labels = (features[:, :10] * torch.arange(1, 11)).argmax(dim=1)
    sampler = DistributedSampler(
        TensorDataset(features, labels), num_replicas=processes, rank=rank, seed=0
    )
    loader = DataLoader(
        TensorDataset(features, labels), batch_size=args.batch, sampler=sampler, drop_last=True
    )

    model = torch.nn.Sequential(
        torch.nn.Linear(32, 128), torch.nn.GELU(), torch.nn.Linear(128, 10)
    ).to(lx.device())
    if args.fsdp:
        for p in model.parameters():
            if p.shape[0] % devices == 0:
                lx.mark_sharding(p, mesh, ("data",) + (None,) * (p.dim() - 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)

    step = 0
    first = None
    started = None  # the steady steps' clock starts after the first two (compiles)
    for epoch in range(10**6):
        sampler.set_epoch(epoch)
        for x, y in loader:
            x = lx.distributed.global_tensor(x, mesh, ("data", None))
            y = lx.distributed.global_tensor(y, mesh, ("data",))
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            lx.sync()
            step += 1
            if step == 2:
                lx.wait_device_ops()
                started = time.perf_counter()
            if step == 1 or step == args.steps:
                value = loss.item()  # replicated: every process reads the whole loss
                first = value if first is None else first
                if rank == 0:
                    print(f"step {step}: loss {value:.4f}", flush=True)
            if step == args.steps:
                break
        if step == args.steps:
            break
    lx.wait_device_ops()
    rate = (step - 2) / (time.perf_counter() - started) if step > 2 else float("nan")
    compiled = lx.metrics.counter_value("UncachedCompile")
    print(
        f"process {rank} of {processes}: {lx.device_count()} of {devices} devices, "
        f"{step} steps, loss {first:.4f} -> {value:.4f}, compiled programs: {compiled} "
        f"({rate:.1f} steady steps/s)",
        flush=True,
    )


if __name__ == "__main__":
    main()
