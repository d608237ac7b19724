"""torch.distributed's own parallelism on lazax, the torch way: two processes of one
lazax device each, ``init_device_mesh("lazax", (2,))``, DTensor placements, FSDP2's
``fully_shard`` (mixed precision, torch.distributed.checkpoint), tensor parallel, and
``examples/fsdp2.py`` under torchrun (issue 35).

Real processes on loopback (``tests/_dtensor_worker.py``), each with one virtual CPU
device, started with torchrun's variables, as ``test_processes.py`` starts its own.
torch on the CPU, in each worker, is the oracle.
"""

import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _workers(script: str, processes: int) -> list:
    """Each process's RESULT, in rank order, after it ran every scenario of ``script``."""
    env = dict(
        os.environ,
        XLA_FLAGS="--xla_force_host_platform_device_count=1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(_free_port()),
        WORLD_SIZE=str(processes),
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    )
    env.pop("PJRT_DEVICE", None)
    procs = [
        subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / script)],
            env=dict(env, RANK=str(rank), LOCAL_RANK=str(rank)),
            # Apart: Gloo writes to stderr from its own threads, into a line of ours.
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(processes)
    ]
    results = []
    try:
        for rank, proc in enumerate(procs):
            stdout, stderr = proc.communicate(timeout=300)
            text = stdout + stderr
            lines = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")]
            assert proc.returncode == 0 and lines, f"process {rank} failed:\n{text[-4000:]}"
            results.append(json.loads(lines[-1][len("RESULT ") :]))
    finally:
        for proc in procs:
            proc.kill()
    return results


@pytest.fixture(scope="module")
def ran() -> list:
    """Both processes' RESULT (``_dtensor_worker.py``)."""
    return _workers("_dtensor_worker.py", 2)


@pytest.fixture(scope="module")
def ran_2d() -> list:
    """The four processes' RESULT (``_mesh2d_worker.py``): a (2, 2) mesh, dp x tp."""
    return _workers("_mesh2d_worker.py", 4)


def test_init_device_mesh_spans_the_processes_one_lazax_device_each(ran):
    for rank, result in enumerate(ran):
        assert result["rank"] == rank and result["local_devices"] == 1
        assert result["mesh"] == "DeviceMesh((2,), 'lazax', stride=(1,))"


def test_dtensor_placements_round_trip_equal_to_the_cpu(ran):
    whole = torch.arange(24.0).reshape(6, 4)
    for rank, result in enumerate(ran):
        got = result["dtensor"]
        mine = whole[3 * rank : 3 * rank + 3].tolist()
        assert got["local"] == mine and got["local_device"] == "lazax:0"
        assert got["full"] == whole.tolist()
        assert got["replicated_local"] == whole.tolist()
        assert got["back_local"] == mine
        assert got["from_local_shape"] == [4, 3]
        assert got["from_local_full"] == [[1.0] * 3] * 2 + [[2.0] * 3] * 2
        assert got["sum"] == 2 * whole.sum().item()


def test_fully_shard_trains_a_four_block_mlp_equal_to_the_cpu(ran):
    for result in ran:
        got = result["fsdp2"]
        # The mean of the two halves' losses is the whole batch's loss on the CPU.
        torch.testing.assert_close(got["losses"], got["ref_losses"], rtol=1e-4, atol=0)
        assert len(got["param_errors"]) == 8
        assert max(got["param_errors"].values()) < 1e-5, got["param_errors"]
        # Every parameter a DTensor, each process holding half its rows.
        for name, (kind, shape) in got["sharded"].items():
            assert kind == "DTensor", name
            assert shape[0] == 8, (name, shape)
        # FSDP2's copy ops (fsdp::all_gather_copy_in, split_with_sizes_copy, chunk_cat)
        # are traced on lazax, not run on the CPU.
        assert got["cpu_fallbacks"] == {}, got["cpu_fallbacks"]
        # Every all-gather and reduce-scatter runs inside the step's one program, never
        # cut apart (the first step also places the shards: each process its own rows).
        assert got["programs"][1:] == [1, 1, 1], got["programs"]
        assert got["cuts"] == [0, 0, 0], got["cuts"]
    assert ran[0]["fsdp2"]["losses"] == ran[1]["fsdp2"]["losses"]


def test_fully_shard_with_a_bfloat16_policy_trains_equal_to_torch_fsdp2_on_the_cpu(ran):
    for result in ran:
        for reshard, got in result["mixed"].items():
            # The oracle is torch's own FSDP2 with the same policy on CPU tensors (over
            # gloo): both round the same float32 values to bfloat16 and sum in float32,
            # so they agree to float32 rounding (6e-8 here); 1e-5 is still 400 times
            # below bfloat16's resolution near 1, which one differently rounded step
            # would exceed.
            torch.testing.assert_close(got["losses"], got["ref_losses"], rtol=1e-5, atol=0)
            assert got["error"] < 1e-5, (reshard, got["error"])
            # The policy took: a bfloat16 forward, float32 sharded parameters and
            # gradients (reduce_dtype).
            assert got["out_dtype"] == "torch.bfloat16"
            assert got["param_dtypes"] == got["grad_dtypes"] == ["torch.float32"]
        # After a forward, resharded blocks hold DTensors again; the others keep the
        # gathered lazax tensors until backward.
        assert result["mixed"]["True"]["after_forward"] == "DTensor"
        assert result["mixed"]["False"]["after_forward"] == "LazyTensor"
        assert result["fallbacks"]["mixed"] == {}
    assert ran[0]["mixed"]["True"]["losses"] != ran[1]["mixed"]["True"]["losses"]  # halves


def test_fully_shard_holds_only_sharded_state_between_steps(ran):
    # After steps, FSDP2 holds the sharded parameters, their sharded gradients (views
    # of each block's reduce-scatter output, which has exactly their size: 16 rows
    # split in two need no padding) and AdamW's exp_avg and exp_avg_sq of the same
    # shapes (its step counters stay on the CPU): four times the sharded parameters'
    # bytes, on every process, whether blocks reshard after forward or not (both
    # reshard after backward, as torch's FSDP2 does). The all-gathered parameters
    # FSDP2 frees (untyped_storage().resize_(0)) hold no lazax memory: they held a
    # whole extra copy of the parameters (4,352 bytes more here) before.
    for result in ran:
        for reshard, got in result["memory"].items():
            sharded = got["sharded_param_bytes"]
            assert 2 * sharded == got["param_bytes"] == 4 * 272 * 4, got
            assert got["steps"] == ["cpu"], got
            assert got["held"] == 4 * sharded, (reshard, got)
            # The step's program (collectives inside) writes its new state over the
            # old: every moment buffer is reused (none was, when graphs with
            # collectives donated nothing; the step's peak was 27,300 bytes, now 20,836).
            assert got["moments_in_place"] == got["moments"] == 8, got


def test_a_buffer_one_process_holds_is_copied_not_donated_and_the_steps_agree(ran):
    # Every process donates what the step's graph says (one cache key for all); where
    # process 0 holds a moment's buffer too, it passes a copy for the program to write
    # over: the buffer keeps its value, nothing hangs, training stays equal.
    for result in ran:
        assert result["held_elsewhere"]["error"] < 1e-5, result["held_elsewhere"]
    assert ran[0]["held_elsewhere"]["kept_changed"] == 0.0
    assert "kept_changed" not in ran[1]["held_elsewhere"]
    # Only there, once: the step after it took the buffer (the next step's input is the
    # moment's new buffer). No scenario before this one in the worker copied anything.
    assert ran[0]["held_elsewhere"]["copies"] == 1 and not ran[1]["held_elsewhere"]["copies"]


def test_distributed_checkpoint_of_fsdp2_resumes_equal_to_uninterrupted_training(ran):
    for result in ran:
        got = result["checkpoint"]
        assert got["before_load"] > 0.1  # another seed: loading has something to do
        assert got["loaded"] == 0.0  # parameters (and AdamW's state) as saved
        assert got["resumed"] < 1e-5, got  # two steps more: four uninterrupted steps
        assert got["local_devices"] == ["lazax:0"] and got["state_steps"] == [4.0]
        assert result["fallbacks"]["checkpoint"] == {}


def test_a_state_dict_on_process_0_alone_loads_with_broadcast_from_rank0(ran):
    # The TorchTitan / accelerate way to load a whole checkpoint into FSDP2: before, the
    # group listed no device type (torch's broadcast read pg._device_types[0]), and the
    # receivers' torch.empty buffers were left out of the collective's own program.
    for result in ran:
        got = result["from_rank0"]
        assert got["before_load"] > 0.1  # another seed: loading has something to do
        assert got["resumed"] < 1e-5, got  # model and AdamW state loaded, 2 steps more
        assert got["state_steps"] == [4.0]
        assert result["fallbacks"]["from_rank0"] == {}


def test_tensor_parallel_mlp_trains_equal_to_the_cpu(ran):
    for result in ran:
        got = result["tensor_parallel"]
        torch.testing.assert_close(got["losses"], got["ref_losses"], rtol=1e-5, atol=0)
        assert got["error"] < 1e-5, got["error"]
        assert got["placements"] == {
            "w1.weight": ["S(0)", [16, 16]],
            "w1.bias": ["S(0)", [16]],
            "w2.weight": ["S(1)", [16, 16]],
            "w2.bias": ["R", [16]],
        }
        assert result["fallbacks"]["tensor_parallel"] == {}


def test_redistribute_from_partial_and_between_shardings_equal_to_the_cpu(ran):
    whole = torch.arange(12.0).reshape(3, 4)
    summed = 3 * whole  # process 0 holds whole, process 1 twice whole
    for rank, result in enumerate(ran):
        got = result["partial"]
        # torch splits 3 rows over 2 processes as 2 and 1; 4 columns as 2 and 2.
        rows = slice(0, 2) if rank == 0 else slice(2, 3)
        columns = slice(2 * rank, 2 * rank + 2)
        assert got["sum_replicate"] == got["sum_full"] == summed.tolist()
        assert got["avg_replicate"] == (summed / 2).tolist()
        assert got["sum_shard0"] == summed[rows].tolist()
        assert got["sum_shard1"] == summed[:, columns].tolist()
        assert got["shard1_local"] == got["shard1_replicate_shard1"] == whole[:, columns].tolist()
        assert got["shard1_back"] == whole[rows].tolist()
        assert result["fallbacks"]["partial"] == {}


def test_torchrun_launches_the_fsdp2_example_equal_to_the_cpu():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1")
    env.pop("PJRT_DEVICE", None)
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    command += ["--master-port", str(_free_port()), "examples/fsdp2.py", "--steps", "4"]
    ran = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    pattern = r"process (\d) of 2: 4 steps, losses (\[.*?\]), grad norms (\[.*?\])"
    found = {rank: (losses, norms) for rank, losses, norms in re.findall(pattern, ran.stdout)}
    assert sorted(found) == ["0", "1"], ran.stdout
    assert found["0"] == found["1"]  # every process prints the whole batch's values
    losses, norms = (json.loads(v) for v in found["0"])

    # The oracle: the example's model and data, on the CPU, one step per whole batch
    # (both processes' shares: one sampler over every row, with the same seed).
    spec = importlib.util.spec_from_file_location("fsdp2_example", ROOT / "examples" / "fsdp2.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    data, net = example.dataset(), example.model()
    sampler = torch.utils.data.DistributedSampler(data, num_replicas=1, rank=0, seed=0)
    loader = torch.utils.data.DataLoader(data, batch_size=32, sampler=sampler, drop_last=True)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    expected, expected_norms = [], []
    for (x, y), _ in zip(loader, range(4)):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        expected_norms.append(torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0).item())
        opt.step()
        expected.append(loss.item())
    torch.testing.assert_close(losses, expected, rtol=1e-5, atol=0)
    # The norm of every process's gradient shards together, as torch's of the whole.
    torch.testing.assert_close(norms, expected_norms, rtol=1e-5, atol=0)


def test_fully_shard_under_lx_compile_trains_equal_to_the_cpu(ran):
    for result in ran:
        got = result["compiled"]
        torch.testing.assert_close(got["losses"], got["ref_losses"], rtol=1e-4, atol=0)
        assert got["error"] < 1e-5, got["error"]
        # Each call is one program, its all-gathers and reduce-scatters inside, never cut.
        assert got["programs"] == [1, 1, 1, 1] and got["cuts"] == 0, got
        # Compiled: the first call's program only. The second call's graph (AdamW's
        # state, made by the first, now an input) is the lazy-mode "fsdp2" scenario's
        # steady step, traced the same and compiled there already (run alone, this
        # scenario compiles [1, 1, 0, 0]); the lazy scenario's first step also placed
        # the shards, so this first graph is new. Steady calls compile nothing.
        assert got["compiles"] == [1, 0, 0, 0], got["compiles"]
        assert result["fallbacks"]["compiled"] == {}


def test_meta_device_init_after_fully_shard_trains(ran):
    for result in ran:
        reset = result["meta_init"]["reset"]
        # reset_parameters() drew each shard on lazax, through DTensor's RNG tracker:
        # in Linear's bounds, and the two processes' rows differ (each drew its own part
        # of the whole tensor's numbers, not the same numbers twice).
        assert reset["kind"] == "DTensor" and reset["local_shape"] == [8, 16]
        assert reset["local_device"] == "lazax:0"
        assert 0.2 < reset["bound"] <= 0.25 and reset["halves_differ"]
        # Four steps on one batch: the loss falls every step.
        losses = reset["losses"]
        assert all(b < a for a, b in zip(losses, losses[1:])), losses
        # Initialized from a CPU reference of the same seed: training equals the CPU's.
        copied = result["meta_init"]["copied"]
        torch.testing.assert_close(copied["losses"], copied["ref_losses"], rtol=1e-4, atol=0)
        assert copied["error"] < 1e-5, copied["error"]
    assert ran[0]["meta_init"] == ran[1]["meta_init"]


def test_fully_shard_with_blocks_compiled_by_dynamo_trains_equal_to_the_cpu(ran):
    for result in ran:
        got = result["dynamo"]
        torch.testing.assert_close(got["losses"], got["ref_losses"], rtol=1e-4, atol=0)
        assert got["error"] < 1e-5, got["error"]
        # dynamo compiled the blocks' frames, all of them, with no graph break (FSDP2's
        # hooks are outside them); each step is still one program.
        frames = got["dynamo"]["frames"]
        assert frames["ok"] == frames["total"] > 0 and "graph_break" not in got["dynamo"]
        assert got["programs"] == [1, 1, 1, 1], got["programs"]
        assert result["fallbacks"]["dynamo"] == {}
        # The whole step under torch.compile, unchanged: fully_shard turned dynamo's
        # traced backward off (with it, FSDP2's gradients came out wrong, 0.04 off
        # after 4 steps): equal to the CPU; the graph breaks at backward and FSDP2's
        # hooks, into programs that are the same every step.
        assert got["traced_backward"] is False
        whole = got["whole_step"]
        torch.testing.assert_close(whole["losses"], whole["ref_losses"], rtol=1e-4, atol=0)
        assert whole["error"] < 1e-5, whole["error"]
        assert whole["compiles"][2:] == [0, 0], whole["compiles"]
        assert len(set(whole["programs"])) == 1, whole["programs"]


def _groups(rank: int) -> dict:
    """The global ranks of ``rank``'s group in each dimension of the (dp=2, tp=2) mesh."""
    dp, tp = divmod(rank, 2)
    return {"dp": [tp, 2 + tp], "tp": [2 * dp, 2 * dp + 1]}


def test_each_dimension_of_a_2d_mesh_is_a_group_whose_collectives_equal_torchs(ran_2d):
    for rank, result in enumerate(ran_2d):
        assert result["mesh"] == "DeviceMesh((dp=2, tp=2), 'lazax', stride=(2, 1))"
        for dim, ranks in _groups(rank).items():
            got = result["collectives"][dim]
            me = ranks.index(rank)
            inputs = [torch.arange(4.0) + 10 * r for r in ranks]
            assert got["ranks"] == ranks
            assert got["sum"] == [float(sum(r + 1 for r in ranks))] * 2
            assert got["max"] == [max(ranks)] and got["avg"] == [sum(ranks) // 2]
            assert got["all_gather"] == torch.cat(inputs).tolist()
            assert got["reduce_scatter"] == sum(inputs).chunk(2)[me].tolist()
            assert got["all_to_all"] == torch.cat([x.chunk(2)[me] for x in inputs]).tolist()
            assert got["broadcast"] == [float(ranks[1])] * 2  # from the group's rank 1
            # One all-gather within each group of the dimension, XLA's replica groups.
            groups = "{{0,2},{1,3}}" if dim == "dp" else "{{0,1},{2,3}}"
            assert got["replica_groups"] == [groups], got["replica_groups"]
        # Groups of unequal sizes: the job's all-gather and each group's rows of it.
        assert result["collectives"]["own_barrier"]  # processes 0 and 1 alone
        uneven = [1.0] * 2 if rank == 0 else [9.0] * 2
        assert result["collectives"]["uneven_sum"] == uneven


@pytest.mark.parametrize("scenario", ["fsdp_tp", "hsdp", "fsdp_tp_compiled", "fsdp_tp_dynamo"])
def test_fsdp2_over_a_2d_mesh_trains_equal_to_the_cpu(ran_2d, scenario):
    # fsdp_tp: tensor parallel over tp, FSDP2 over dp (also with the step under
    # lx.compile, and with each block compiled by dynamo); hsdp: fully_shard over both
    # (replicated over dp, sharded over tp).
    for result in ran_2d:
        got = result[scenario]
        torch.testing.assert_close(got["losses"], got["ref_losses"], rtol=1e-5, atol=0)
        assert max(got["param_errors"].values()) < 1e-6, got["param_errors"]
        assert got["cuts"][1:] == [0, 0, 0], got
        if scenario == "fsdp_tp_dynamo":
            frames = got["dynamo"]["frames"]
            assert frames["ok"] == frames["total"] > 0 and not got["dynamo"]["graph_break"]
            # The compiled blocks' graphs hold tensor parallel's collectives, and each
            # replays as a program of its own: the same programs every step.
            assert len(set(got["programs"][1:])) == 1, got["programs"]
        else:  # collectives of both groups in one program
            assert got["programs"][1:] == [1, 1, 1], got["programs"]
    hsdp = ran_2d[0]["hsdp"]["placements"]
    assert hsdp["0.up.weight"] == ["[Replicate(), Shard(dim=0)]", [16, 16]]
    both = ran_2d[0]["fsdp_tp"]["placements"]
    assert both["0.down.weight"] == ["[Shard(dim=0), Shard(dim=1)]", [8, 16]]


def test_torch_xla_replica_groups_reduce_within_each_group(ran_2d):
    for rank, result in enumerate(ran_2d):
        got = result["xm_groups"]
        group = [0, 3] if rank in (0, 3) else [1, 2]
        inputs = [torch.arange(4.0) + 10 * r for r in group]
        assert got["sum"] == (sum(inputs) * 0.5).tolist()
        assert got["all_gather"] == torch.cat(inputs).tolist()
        assert got["reduce_scatter"] == sum(inputs).chunk(2)[group.index(rank)].tolist()
        assert "every replica of the 4 once" in got["refused"]
