"""Several processes on one host: what a job of processes costs against one process.

    python -m benchmarks.processes [--steps 200] [--rounds 200]

1. ``examples/data_parallel.py`` (data-parallel, then FSDP-style) as one process with 4
   virtual CPU devices, and under ``torchrun --nproc-per-node 2`` with 2 devices each:
   steady steps/s as each run prints it.
2. Under torchrun (2 processes): the round trip of the meeting before a cross-process
   compile (``lazax.pjrt.exchange``), and one ``dist.all_reduce`` of a 1-element lazax
   tensor over the "lazax" backend, waited for; medians over ``--rounds``.
3. torch's own parallelism over the "lazax" backend, 2 processes x 1 device: a 4-block
   MLP (width 256, batch 32 per process, AdamW) under ``DistributedDataParallel``
   (buckets of 0.3 MB: five all-reduces a step) and under FSDP2 (``fully_shard`` on each
   block and the root): programs run per steady step (``ExecuteTime``'s count), the
   median milliseconds a step, waited for, over ``--parallel-steps`` after 5 warm ones,
   and those steps' peak ``lx.max_memory_allocated()`` beside what is held between.

On this host both processes share its cores, so the ratios say what the machinery
costs here, not what separate hosts would see.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = str(ROOT / "examples" / "data_parallel.py")


def _port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def _env(devices: int) -> dict:
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    for name in ("PJRT_DEVICE", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def _torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"] + [
        "--master-port",
        _port(),
        *args,
    ]


def _run(command: list[str], devices: int) -> str:
    ran = subprocess.run(command, env=_env(devices), capture_output=True, text=True, timeout=900)
    if ran.returncode:
        raise RuntimeError(f"{command} failed:\n{ran.stdout[-2000:]}{ran.stderr[-2000:]}")
    return ran.stdout


def _rate(output: str) -> float:
    rates = [float(r) for r in re.findall(r"\(([0-9.]+) steady steps/s\)", output)]
    return min(rates)  # a job runs at its slowest process's pace


def worker(rounds: int) -> None:
    """One process of part 2 (run under torchrun)."""
    import torch
    import torch.distributed as dist

    import lazax.modes as lx
    from lazax import pjrt

    dist.init_process_group("lazax")
    meet, reduce = [], []
    for k in range(rounds):
        start = time.perf_counter()
        pjrt.exchange(f"bench/{k}", b"x" * 2000, 60)
        meet.append(time.perf_counter() - start)
    t = torch.ones(1, device=lx.device())
    for _ in range(rounds):
        start = time.perf_counter()
        dist.all_reduce(t)
        lx.sync_tensors([t], wait=True)
        reduce.append(time.perf_counter() - start)
    if dist.get_rank() == 0:
        median = statistics.median
        print(f"meeting {median(meet) * 1e3:.2f} ms, all_reduce {median(reduce) * 1e3:.2f} ms")


def parallel_worker(kind: str, steps: int) -> None:
    """One process of part 3 (run under torchrun)."""
    import torch
    import torch.distributed as dist
    from torch import nn

    import lazax.modes as lx

    dist.init_process_group("lazax")
    torch.manual_seed(0)
    width = 256
    model = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(4)])
    model = model.to(lx.device())
    if kind == "ddp":
        model = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.3)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(lx.device().type, (dist.get_world_size(),))
        for block in model:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(32, width).to(lx.device())
    y = torch.randn(32, width).to(lx.device())
    times, programs = [], []
    for k in range(5 + steps):
        if k == 5:  # the steady steps' peak: the state held, plus what a step needs
            lx.reset_peak_memory_stats()
        ran = (lx.metrics.metric_data("ExecuteTime") or (0,))[0]
        start = time.perf_counter()
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        lx.sync(wait=True)
        if k >= 5:
            times.append(time.perf_counter() - start)
            programs.append(lx.metrics.metric_data("ExecuteTime")[0] - ran)
    if dist.get_rank() == 0:
        print(
            f"{kind}: {statistics.mean(programs):.1f} programs a step, "
            f"{statistics.median(times) * 1e3:.1f} ms a step, peak "
            f"{lx.max_memory_allocated() / 2**20:.2f} MiB (held between steps "
            f"{lx.memory_allocated() / 2**20:.2f} MiB)"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--parallel-steps", type=int, default=30)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--parallel", choices=("ddp", "fsdp2"), help=argparse.SUPPRESS)
    parser.add_argument("--only-parallel", action="store_true", help="part 3 alone")
    args = parser.parse_args()
    if args.worker:
        worker(args.rounds)
        return
    if args.parallel:
        parallel_worker(args.parallel, args.parallel_steps)
        return
    if args.only_parallel:
        _parallel(args.parallel_steps)
        return
    steps = ["--steps", str(args.steps)]
    for flag in ([], ["--fsdp"]):
        alone = _rate(_run([sys.executable, EXAMPLE, *steps, *flag], 4))
        job = _rate(_run(_torchrun(EXAMPLE, *steps, *flag), 2))
        kind = "fsdp" if flag else "data-parallel"
        print(
            f"{kind}: 1 process x 4 devices {alone:.1f} steps/s, 2 processes x 2 devices "
            f"{job:.1f} steps/s ({job / alone:.2f}x)"
        )
    out = _run(_torchrun("-m", "benchmarks.processes", "--worker", "--rounds", str(args.rounds)), 2)
    print(next(line for line in out.splitlines() if line.startswith("meeting")))
    _parallel(args.parallel_steps)


def _parallel(steps: int) -> None:
    for kind in ("ddp", "fsdp2"):
        command = _torchrun("-m", "benchmarks.processes", "--parallel", kind)
        out = _run([*command, "--parallel-steps", str(steps)], 1)
        print(next(line for line in out.splitlines() if line.startswith(kind)))


if __name__ == "__main__":
    main()
