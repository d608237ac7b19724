"""Several processes as one job (jax's distributed runtime): each process places, runs
and reads on its own devices; one SPMD program spans every process's devices; the
processes agree on each program before it runs; a lost process is an error, not a hang.

Real processes on loopback, with virtual CPU devices and gloo collectives, started as
torchrun starts them (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``), or by
torchrun itself. torch on the CPU and lazax in this one process (8 devices) are the
oracles.
"""

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import lazax.modes as lx
from benchmarks.models import Decoder, DecoderConfig, lm_loss, make_tokens

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(scenario: str, devices_each: int = 4, timeout: float = 240, **env) -> list:
    """Two processes of ``tests/_process_worker.py`` as torchrun would start them: (exit
    status, output, seconds, parsed RESULT or None) per process."""
    base = dict(
        os.environ,
        XLA_FLAGS=f"--xla_force_host_platform_device_count={devices_each}",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(_free_port()),
        WORLD_SIZE="2",
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        **env,
    )
    base.pop("PJRT_DEVICE", None)
    start = time.monotonic()
    procs = [
        subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "_process_worker.py"), scenario],
            env=dict(base, RANK=str(rank), LOCAL_RANK=str(rank)),
            # Apart: native libraries (Gloo) write to stderr from their own threads, and a
            # message of theirs once landed inside the RESULT line.
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    out = []
    try:
        for proc in procs:
            stdout, stderr = proc.communicate(timeout=timeout)
            lines = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")]
            result = json.loads(lines[-1][len("RESULT ") :]) if lines else None
            text = stdout + stderr
            out.append((proc.returncode, text, time.monotonic() - start, result))
    finally:
        for proc in procs:
            proc.kill()
    return out


def test_two_processes_each_run_on_their_own_devices_and_see_the_jobs():
    ran = _launch("own", devices_each=2, COORDINATOR=f"127.0.0.1:{_free_port()}")
    for rank, (code, text, _, result) in enumerate(ran):
        assert code == 0 and result is not None, f"process {rank} failed:\n{text[-4000:]}"
        assert (result["rank"], result["local_devices"], result["devices"]) == (rank, 2, 4)
        assert result["process_count"] == 2
        assert result["device"] == f"lazax:0 = global device {2 * rank}"
        assert result["error"] < 1e-5, result  # its own model, as torch on the CPU trains it
    # Each trained its own seed's model: different losses.
    assert ran[0][3]["loss"] != ran[1][3]["loss"]


CFG = DecoderConfig(vocab=64, d_model=32, n_heads=2, n_layers=1, seq=16, batch=8)


def _one_process(mesh, fsdp: bool) -> tuple[list, list]:
    """The worker's training, in this process: the whole batch marked over ``mesh`` (8
    devices), or on one device (``mesh`` None)."""
    torch.manual_seed(0)
    model = Decoder(CFG).to(lx.device())
    if fsdp:
        for p in model.parameters():
            if p.shape[0] % 8 == 0:
                lx.mark_sharding(p, mesh, ("data",) + (None,) * (p.dim() - 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses, compiles = [], []
    for step in range(10):
        x = make_tokens(CFG, step).to(lx.device())
        if mesh is not None:
            lx.mark_sharding(x, mesh, ("data", None))
        before = lx.metrics.counter_value("UncachedCompile") or 0
        opt.zero_grad()
        loss = lm_loss(model(x), x)
        loss.backward()
        opt.step()
        lx.sync()
        compiles.append((lx.metrics.counter_value("UncachedCompile") or 0) - before)
        losses.append(loss)
    return [loss.item() for loss in losses], compiles


def test_two_processes_of_four_devices_train_as_one_process_of_eight(tmp_path):
    ran = _launch("train", CHECKPOINTS=str(tmp_path))
    for rank, (code, text, _, result) in enumerate(ran):
        assert code == 0 and result is not None, f"process {rank} failed:\n{text[-4000:]}"
    results = [r for *_, r in ran]
    mesh = lx.Mesh(range(8), (8,), ("data",))
    one_device, _ = _one_process(None, False)
    for kind, fsdp in (("dp", False), ("fsdp", True)):
        eight, eight_compiles = _one_process(mesh, fsdp)
        for rank, result in enumerate(results):
            got = result[kind]
            torch.testing.assert_close(got["losses"], eight, rtol=1e-4, atol=0)
            torch.testing.assert_close(got["losses"], one_device, rtol=1e-4, atol=0)
            # One graph for the first step, which is the steady step (AdamW's state is
            # made on the device as its input), then nothing more, as in one process
            # (whose counts are not compared: another test in this process may have
            # compiled the same graphs already).
            assert got["compiles"] == [1] + [0] * 9, (kind, rank, got["compiles"])
            assert sum(eight_compiles[1:]) == 0
            # Each process holds its own rows of the batch, one per device.
            expected = make_tokens(CFG, 9)[rank * 4 : (rank + 1) * 4].tolist()
            assert got["batch_part"] == expected
            assert got["batch_shards"] == [[1, 16]]
            shards = got["weight_shards"]
            assert sorted(int(k) for k in shards) == list(range(rank * 4, rank * 4 + 4))
            # DP: every device holds the whole weight; FSDP: 16 of its 128 rows, and so
            # does AdamW's state.
            rows = 16 if fsdp else 128
            assert set(map(tuple, shards.values())) == {(rows, 32)}, shards
            assert got["state_shards"] == [[rows, 32]]
        assert results[0][kind]["weight_sum"] == results[1][kind]["weight_sum"]
        # Checkpoints: loaded into a model of another seed laid out alike, the weights
        # and AdamW's state are the saved ones; each value was written once: DP's
        # replicated state by process 0 alone, FSDP's split state half by each.
        state = 3 * sum(p.numel() for p in Decoder(CFG).parameters())  # weights, 2 moments
        written = [r[kind]["checkpoint"]["written"] for r in results]
        assert sum(written) == state
        assert written == ([state, 0] if kind == "dp" else [state // 2, state // 2])
        for result in results:
            assert result[kind]["checkpoint"]["error"] == 0.0
            assert result[kind]["checkpoint"]["same_layout"]
    for result in results:
        assert "split over several processes" in result["read_split"]
        assert "lazax.modes.distributed.local_part" in result["read_split"]
        assert result["replicated_read"] == 12.0  # process 1's four rows of ones
        assert (result["local_devices"], result["devices"]) == (4, 8)


def test_processes_that_trace_different_graphs_raise_naming_the_node():
    ran = _launch("diverge", devices_each=2, LAZAX_DISTRIBUTED_TIMEOUT="60")
    for rank, (code, text, _, result) in enumerate(ran):
        assert result is not None and "error" in result, f"process {rank}:\n{text[-4000:]}"
        assert code == 0  # both raised where they compiled, and left together
        error = result["error"]
        assert "traced different programs" in error
        # Process 0 synced mid-step (the .item() in peek), process 1 the whole step: the
        # first node where their graphs differ, and where each process synced.
        other = 1 - rank
        assert f"in process {rank}, but" in error and f"in process {other}." in error, error
        assert "(in peek)" in error and "(in train)" in error, error
        assert "Nothing was compiled or run" in error


def test_a_lost_process_is_an_error_in_the_others_within_the_heartbeat_timeout():
    ran = _launch("die", devices_each=2, HEARTBEAT="5")
    code, text, _, result = ran[0]
    assert ran[1][0] == 3  # process 1 left at step 2
    assert code == 1, text[-4000:]  # not a hang, not an abort
    assert result is not None, text[-4000:]
    # Found by the coordination service (no heartbeat), or by the collective's transport
    # (the connection to process 1 reset), whichever comes first.
    assert result["error"].startswith("ProcessLostError: lazax: process 0 "), result["error"]
    assert "stopped" in result["error"] and "restart it" in result["error"]
    assert result["seconds"] < 60, result


def test_processes_leave_with_status_0_while_the_heartbeat_is_inside_jax():
    # Before the heartbeat was stopped at exit, two launches of three aborted in process
    # 1 ("FATAL: exception not rethrown", status -6): the chance this passes without the
    # fix is about 1 in 27.
    for _ in range(3):
        ran = _launch("exit_beating", devices_each=1)
        for rank, (code, text, _, result) in enumerate(ran):
            assert code == 0 and result == {**result, "sum": 8.0}, f"{rank}:\n{text[-3000:]}"


def test_torchrun_launches_the_example_and_every_process_trains_the_same_model():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    env.pop("PJRT_DEVICE", None)
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    command += ["--master-port", str(_free_port()), "examples/data_parallel.py", "--steps", "8"]
    ran = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    # The processes' lines may interleave in torchrun's output.
    found = dict(re.findall(r"process (\d) of 2: (.*?compiled programs: \d+) \(", ran.stdout))
    assert sorted(found) == ["0", "1"], ran.stdout
    # Both processes: 2 of 4 devices, the same losses, one program (AdamW's state, made in
    # the first step, is made on the device: the first step is the steady one).
    ends = set(found.values())
    assert len(ends) == 1, found
    (end,) = ends
    assert end.startswith("2 of 4 devices, 8 steps, loss ") and end.endswith(
        ", compiled programs: 1"
    )
    first, last = (float(v) for v in end.split("loss ")[1].split(",")[0].split(" -> "))
    assert last < first


def test_a_process_whose_peers_never_come_raises_within_the_timeout():
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    env.update(RANK="0", WORLD_SIZE="2")
    code = "import lazax.modes as lx; lx.distributed.initialize(timeout=3)"
    start = time.monotonic()
    ran = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert time.monotonic() - start < 60
    assert ran.returncode == 1
    assert "TimeoutError: lazax: process 0 of 2 could not meet the others" in ran.stderr


def test_initialize_alone_is_one_process_and_late_is_an_error(monkeypatch):
    for name in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    lx.distributed.initialize()  # no launcher: a job of one process, nothing to join
    assert not lx.distributed.is_initialized()
    assert (lx.process_index(), lx.process_count()) == (0, 1)
    with pytest.raises(ValueError, match=r"process_id must be in \[0, 2\)"):
        lx.distributed.initialize(num_processes=2, process_id=2)
    lx.device()  # this process uses its devices: too late to join a job
    with pytest.raises(RuntimeError, match="must start before anything uses a device"):
        lx.distributed.initialize("127.0.0.1:1", num_processes=2, process_id=0)


def test_global_tensor_and_local_part_in_one_process_are_the_whole_value():
    mesh = lx.Mesh(range(8), (2, 4), ("data", "model"))
    batch = torch.arange(48.0).reshape(8, 6)
    x = lx.distributed.global_tensor(batch, mesh, ("data", None))
    assert lx.get_sharding(x) == lx.Sharding(mesh, ("data", None))
    assert lx.shard_shapes(x) == {d: (4, 6) for d in range(8)}
    torch.testing.assert_close(x.cpu(), batch)
    torch.testing.assert_close(lx.distributed.local_part(x * 2), batch * 2)
    wide = torch.arange(64.0).reshape(8, 8).to(torch.bfloat16)
    y = lx.distributed.global_tensor(wide, mesh, (None, "model"))
    assert lx.shard_shapes(y) == {d: (8, 2) for d in range(8)}
    torch.testing.assert_close(lx.distributed.local_part(y), wide)
    # 3 rows over 2: held padded, as mark_sharding holds it (in one process)
    odd = lx.distributed.global_tensor(torch.arange(18.0).reshape(3, 6), mesh, ("data", None))
    assert lx.shard_shapes(odd) == {d: (2, 6) for d in range(8)}
    torch.testing.assert_close(lx.distributed.local_part(odd), torch.arange(18.0).reshape(3, 6))
    torch.testing.assert_close((odd + 1).cpu(), torch.arange(1.0, 19.0).reshape(3, 6))
    with pytest.raises(ValueError, match="names mesh axis 'rows'"):
        lx.distributed.global_tensor(batch, mesh, ("rows", None))


def test_a_device_loader_in_each_process_gives_global_batches():
    ran = _launch("loader")
    for rank, (code, text, _, result) in enumerate(ran):
        assert code == 0 and result is not None, f"process {rank} failed:\n{text[-4000:]}"
    parts = [[torch.arange(8.0).reshape(4, 2) + 100 * r + 10 * i for i in range(3)] for r in (0, 1)]
    for rank, (*_, result) in enumerate(ran):
        assert result["loader_shapes"] == [[8, 2]] * 3  # both processes' rows
        assert result["loader_sums"] == [
            float(parts[0][i].sum() + parts[1][i].sum()) for i in range(3)
        ]
        assert result["loader_local"] == [p.tolist() for p in parts[rank]]


def test_torch_distributed_collectives_and_ddp_on_lazax_tensors():
    ran = _launch("collectives", devices_each=2)
    for rank, (code, text, _, result) in enumerate(ran):
        assert code == 0 and result is not None, f"process {rank} failed:\n{text[-4000:]}"
        t = [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0]]  # each process's tensor: (rank + 1) * [1, 2, 3]
        assert result["backend"] == "lazax"
        assert result["sum"] == [3.0, 6.0, 9.0]
        assert result["max"] == t[1]
        assert result["avg_view"] == [6.0, 9.0]  # (2t)[1:], averaged, written into the view
        assert result["all_gather"] == t
        assert result["all_gather_into_tensor"] == t[0] + t[1]
        assert result["broadcast"] == t[1]
        # Process k gets the sum over processes of input k: [t, 10 t].
        assert result["reduce_scatter"] == ([3.0, 6.0, 9.0], [30.0, 60.0, 90.0])[rank]
        assert result["reduce_scatter_tensor"] == ([0.0, 3.0], [6.0, 9.0])[rank]
        assert result["band"] == [6 & 7, 3 & 4]
        assert result["cpu_all_reduce"] == [3.0, 3.0]
        assert result["all_gather_object"] == [{"rank": 0}, {"rank": 1}]
        assert result["broadcast_object_list"] == ["from 1"]
        assert result["gather_object"] == ([0, 10], None)[rank]
        assert result["differs"] == [[3.0, 3.0], 1]
        # DDP: the mean of the processes' gradients, as torch on the CPU computes it;
        # a steady step compiles nothing.
        assert result["ddp_error"] < 1e-6
        # The whole DDP step under torch.compile: DDP's gradient hooks ran (the lazax
        # group turned dynamo's traced backward off, which bypassed them).
        assert result["ddp_whole_step_error"] < 1e-5, result["ddp_whole_step_error"]
        assert result["ddp_compiles"][3:] == [0, 0, 0]
        # Functional collectives: x_k = arange(4) + 10 k; all_reduce(2x) summed is
        # 2 * (6 + 46) = 104; process k's row block of max(x_0 + 1, x_1 + 1) stacked
        # (8 rows) is rows 4k..4k+3 of [x_0 + 1, x_1 + 1] (no overlap): 10 and 50.
        expected = 104.0 + (10.0, 50.0)[rank]
        for mode in ("lazy", "compile", "dynamo"):
            values, programs = result[f"funcol_{mode}"]
            assert values == [expected] * 3, (mode, values)
            assert programs == [1, 1, 1], (mode, programs)  # one program, collectives in it
        assert result["funcol_eager"] == expected
        # Every bucket's all-reduce runs inside the step's one program.
        assert result["ddp_buckets"] >= 2, result["ddp_buckets"]
        assert result["ddp_programs"][3:] == [1, 1, 1]
    # dynamo: the same losses in both processes, torch's on the CPU over the whole batch.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    expected = []
    for step in range(4):
        opt.zero_grad()
        loss = model(torch.randn(8, 8, generator=torch.Generator().manual_seed(step)))
        loss = loss.square().mean()
        loss.backward()
        opt.step()
        expected.append(loss.item())
    for *_, result in ran:
        torch.testing.assert_close(result["dynamo_losses"], expected, rtol=1e-5, atol=1e-7)


def test_a_process_that_fails_alone_makes_the_others_raise_at_once():
    ran = _launch("fail_alone", devices_each=2)
    assert "ValueError: a bug in process 1 only" in ran[1][1]
    code, text, _, result = ran[0]
    assert code == 1, text[-4000:]
    assert result is not None, text[-4000:]
    # Process 1 left on an uncaught error and said so: no heartbeat timeout to wait.
    assert "process 1 stopped: it left the job on an error" in result["error"]
    assert result["seconds"] < 30, result
