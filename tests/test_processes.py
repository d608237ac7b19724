"""Several processes joined by jax's distributed runtime (issue 20's first step): each
process places, runs and reads on its own devices, and sees the job's.

Real processes on loopback: two, with two virtual CPU devices each and gloo
collectives, as ``jax.distributed.initialize`` joins them on one host.
"""

import os
import socket
import subprocess
import sys
import textwrap

WORKER = textwrap.dedent(
    """
    import copy, sys
    rank, port = int(sys.argv[1]), int(sys.argv[2])
    import jax
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        f"127.0.0.1:{port}", num_processes=2, process_id=rank, initialization_timeout=60
    )
    import torch
    import lazax.modes as lx

    assert lx.process_index() == rank, lx.process_index()
    assert lx.process_count() == 2, lx.process_count()
    assert lx.device_count() == 2, lx.device_count()
    assert lx.global_device_count() == 4, lx.global_device_count()
    lx.Mesh(range(4), (2, 2), ("data", "model"))  # a mesh numbers every process's devices

    # Each process trains its own copy on its own devices (nothing is shared yet).
    torch.manual_seed(rank)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    x, y = torch.randn(5, 6), torch.randn(5, 2)
    dev = lx.device()  # this process's first device (global index 2 in process 1)
    lazy = copy.deepcopy(model).to(dev)
    losses = {}
    for name, net, data in (("cpu", model, (x, y)), ("lazax", lazy, (x.to(dev), y.to(dev)))):
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(net(data[0]), data[1])
            loss.backward()
            opt.step()
            lx.sync()
        losses[name] = loss.item()
    assert abs(losses["cpu"] - losses["lazax"]) < 1e-5, losses
    print(f"process {rank} ok {losses['lazax']:.6f}", flush=True)
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_each_run_on_their_own_devices_and_see_the_jobs(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    env.pop("PJRT_DEVICE", None)
    port = str(_free_port())
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(rank), port],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(2)
    ]
    outputs = []
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=240)
            outputs.append(out)
    finally:
        for proc in procs:
            proc.kill()
    for rank, (proc, out) in enumerate(zip(procs, outputs)):
        assert proc.returncode == 0, f"process {rank} failed:\n{out[-3000:]}"
        assert f"process {rank} ok" in out
    # Each trained its own seed's model: different losses, both equal to torch CPU's.
    assert outputs[0].split()[-1] != outputs[1].split()[-1]
