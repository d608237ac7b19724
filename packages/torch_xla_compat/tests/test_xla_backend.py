"""torch_xla.distributed.xla_backend: dist.init_process_group("xla", init_method="xla://")
in one process, and in two processes launched as torchrun launches them, where torch_xla's
DDP recipe trains equal to the CPU's full-batch training."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch_xla
import torch_xla.distributed.xla_backend as xla_backend

import lazax.modes as lx

WORKER = Path(__file__).with_name("_xla_backend_worker.py")


def test_one_process_job_over_xla_scheme():
    dist.init_process_group("xla", init_method="xla://")
    try:
        assert (dist.get_rank(), dist.get_world_size(), dist.get_backend()) == (0, 1, "xla")
        assert xla_backend.ProcessGroupXla is lx.distributed.LazaxProcessGroup
        t = torch.arange(3.0, device=torch_xla.device())
        dist.all_reduce(t)
        torch.testing.assert_close(t.cpu(), torch.arange(3.0))
    finally:
        dist.destroy_process_group()


def test_xla_scheme_refuses_a_rank_outside_a_one_process_job():
    try:
        dist.init_process_group("xla", init_method="xla://?rank=1&world_size=1")
        raise AssertionError("rank 1 of 1 was accepted")
    except ValueError as err:
        assert "needs rank 0" in str(err)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _cpu_reference() -> tuple[list, list]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(1)
    data, target = torch.randn(4, 4), torch.randn(4, 1)
    losses = []
    for _ in range(3):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(data), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model[0].weight.detach().flatten().tolist()


def test_two_processes_train_ddp_over_the_xla_backend():
    port = _free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LAZAX_", "TORCHELASTIC"))}
    base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2")
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER)],
            env={**base, "RANK": str(r), "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": "2"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, out[-2000:] + err[-3000:]
    results = [
        json.loads(line[len("RESULT ") :])
        for out, _ in outs
        for line in out.splitlines()
        if line.startswith("RESULT ")
    ]
    assert sorted(r["rank"] for r in results) == [0, 1]
    losses, weight = _cpu_reference()
    for r in results:
        assert (r["world"], r["backend"]) == (2, "xla")
        assert r["summed"] == [3.0, 3.0, 3.0]
        torch.testing.assert_close(torch.tensor(r["losses"]), torch.tensor(losses))
        torch.testing.assert_close(torch.tensor(r["weight"]), torch.tensor(weight))
    assert lx.process_count() == 1  # this test's own process stayed a job of one
