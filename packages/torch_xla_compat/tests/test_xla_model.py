"""``torch_xla.core.xla_model`` (xm) against torch_xla's documented behaviour, one
process: devices, mark_step and step closures, optimizer_step (training equal to the
CPU), save, ordinals, collectives of one replica, the RNG state, memory."""

import copy
import io

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torch_xla
import torch_xla._XLAC as xlac
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
import torch_xla.distributed.spmd as xs

import lazax.modes as lx

# "xla" when torch_xla was imported before lazax (as here), lazax's "lazax" otherwise.
DEV = lx.device().type


def test_xla_device_and_its_hardware():
    dev = xm.xla_device()
    assert dev == lx.device(0) == xm.xla_device(0)
    assert xm.xla_device_hw(dev) == "CPU"
    assert xm.xla_device_hw(f"{DEV}:0") == "CPU"
    assert xm.get_xla_supported_devices()[0] == f"{DEV}:0"
    assert xm.is_xla_tensor(torch.ones(1, device=dev))
    assert not xm.is_xla_tensor(torch.ones(1))
    with pytest.raises(RuntimeError):
        xm.xla_device_hw(torch.device("cpu"))


def test_mark_step_runs_the_graph_then_the_step_closures_in_order():
    x = torch.ones(3, device=xm.xla_device()) * 4
    seen = []
    xm.add_step_closure(lambda t: seen.append(t.cpu().sum().item()), args=(x,))
    xm.add_step_closure(seen.append, args=("second",))
    assert seen == []
    xm.mark_step()
    assert seen == [12.0, "second"]
    xm.mark_step()
    assert seen == [12.0, "second"]  # each closure runs once


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def _train(device, steps=4, barrier=True):
    model = _model().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    gen = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x, y = torch.randn(6, 8, generator=gen), torch.randint(0, 3, (6,), generator=gen)
        opt.zero_grad()
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        if device.type == DEV:
            xm.optimizer_step(opt, barrier=barrier)
            if not barrier:
                xm.mark_step()
        else:
            opt.step()
        losses.append(loss.detach())
    return [v.item() for v in losses], [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("barrier", [True, False])
def test_optimizer_step_trains_as_on_the_cpu(barrier):
    cpu_losses, cpu_params = _train(torch.device("cpu"))
    losses, params = _train(xm.xla_device(), barrier=barrier)
    torch.testing.assert_close(losses, cpu_losses, rtol=1e-4, atol=1e-5)
    for got, want in zip(params, cpu_params):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_optimizer_step_with_barrier_marks_the_step_and_returns_steps_result():
    p = torch.nn.Parameter(torch.ones(2, device=xm.xla_device()))
    opt = torch.optim.SGD([p], lr=1.0)
    p.grad = torch.ones(2, device=xm.xla_device())
    before = (met.metric_data("ExecuteTime") or (0,))[0]
    assert xm.optimizer_step(opt, barrier=True) is None
    assert met.metric_data("ExecuteTime")[0] == before + 1
    assert xm.optimizer_step(opt, optimizer_args={"closure": lambda: 5.0}) == 5.0


def test_save_writes_cpu_tensors_that_load_without_lazax(tmp_path):
    dev = xm.xla_device()
    state = {"w": torch.arange(4.0, device=dev) * 2, "meta": [1, torch.ones(2, device=dev)]}
    path = tmp_path / "ckpt.pt"
    xm.save(state, path)
    loaded = torch.load(path)
    assert loaded["w"].device.type == "cpu" and loaded["meta"][1].device.type == "cpu"
    torch.testing.assert_close(loaded["w"], torch.arange(4.0) * 2)
    assert loaded["meta"][0] == 1
    buffer = io.BytesIO()
    xm.save(state["w"], buffer, master_only=False)
    buffer.seek(0)
    torch.testing.assert_close(torch.load(buffer), torch.arange(4.0) * 2)


def test_ordinals_of_one_process(capsys):
    assert xm.get_ordinal() == 0 and xm.get_local_ordinal() == 0
    assert xm.world_size() == 1 and xm.xrt_world_size() == 1
    assert xm.is_master_ordinal() and xm.is_master_ordinal(local=False)
    xm.master_print("hello", 3)
    assert capsys.readouterr().out == "hello 3\n"


def test_all_reduce_of_one_replica_is_the_value_scaled():
    dev = xm.xla_device()
    t = torch.tensor([1.0, 2.0], device=dev)
    out = xm.all_reduce(xm.REDUCE_SUM, t, scale=0.5)
    assert out is not t
    torch.testing.assert_close(out.cpu(), torch.tensor([0.5, 1.0]))
    torch.testing.assert_close(t.cpu(), torch.tensor([1.0, 2.0]))  # a tensor is not changed
    many = [torch.ones(2, device=dev), torch.full((3,), 4.0, device=dev)]
    assert xm.all_reduce(xm.REDUCE_MAX, many, scale=2.0) is many  # a list: in place
    torch.testing.assert_close(many[1].cpu(), torch.full((3,), 8.0))
    with pytest.raises(ValueError):
        xm.all_reduce("median", t)
    # Replica groups: one replica is one group of itself; a replica that is not there
    # is refused (4 processes with groups: tests/test_dtensor.py).
    torch.testing.assert_close(xm.all_reduce(xm.REDUCE_SUM, t, groups=[[0]]).cpu(), t.cpu())
    with pytest.raises(ValueError, match="every replica of the 1 once"):
        xm.all_reduce(xm.REDUCE_SUM, t, groups=[[0, 1]])


def test_all_gather_reduce_scatter_and_rendezvous_of_one_replica():
    dev = xm.xla_device()
    t = torch.arange(6.0, device=dev).reshape(2, 3)
    torch.testing.assert_close(xm.all_gather(t, dim=1).cpu(), torch.arange(6.0).reshape(2, 3))
    piece = xm.reduce_scatter(xm.REDUCE_SUM, t, 2.0, 0, 1)
    torch.testing.assert_close(piece.cpu(), torch.arange(6.0).reshape(2, 3) * 2)
    assert xm.rendezvous("tag", b"data") == [b"data"]
    xm.wait_device_ops()


def test_rng_state_round_trips_and_repeats_random_numbers():
    dev = xm.xla_device()
    xm.set_rng_state(123)
    torch.rand(2, device=dev).cpu()
    state = xm.get_rng_state()
    assert isinstance(state, int)
    first = torch.rand(4, device=dev).cpu()
    xm.set_rng_state(state)
    torch.testing.assert_close(torch.rand(4, device=dev).cpu(), first)
    xm.set_rng_state(123)
    assert xm.get_rng_state() == 123
    xm.set_rng_state(2**64 - 1)  # torch_xla takes any 64-bit seed
    assert xm.get_rng_state() == 2**64 - 1


def test_memory_info_and_optimization_barrier():
    dev = xm.xla_device()
    keep = torch.ones(256, device=dev) + 1
    keep.cpu()
    info = xm.get_memory_info(dev)
    assert info["bytes_used"] >= 0 and info["peak_bytes_used"] >= info["bytes_used"]
    xm.optimization_barrier_([keep])
    torch.testing.assert_close(keep.cpu(), torch.full((256,), 2.0))


def test_optimization_barrier_is_a_node_of_the_graph_and_keeps_values():
    from lazax.modes.testing import last_program

    dev = xm.xla_device()
    a, b = torch.arange(3.0, device=dev), torch.ones(2, device=dev)

    def run():
        x, y = a * 2, b + 1
        xm.optimization_barrier_([x, y])
        xm.mark_step()
        return x, y

    program = last_program(run)
    assert "stablehlo.optimization_barrier" in program
    x, y = run()
    torch.testing.assert_close(x.cpu(), torch.arange(3.0) * 2)
    torch.testing.assert_close(y.cpu(), torch.full((2,), 2.0))


def test_torch_xla_sync_and_mark_step_are_one_function():
    seen = []
    xm.add_step_closure(lambda: seen.append(1))
    torch_xla.sync()
    assert seen == [1]


def test_send_cpu_data_to_device_moves_every_tensor_of_a_structure_without_a_step():
    dev = xm.xla_device()
    data = {"x": torch.arange(6.0).reshape(2, 3), "rest": [torch.ones(2), "label", 3]}
    met.clear_all()
    moved = xm.send_cpu_data_to_device(data, dev)
    assert moved["x"].device == dev and moved["rest"][0].device == dev
    assert moved["rest"][1:] == ["label", 3]
    torch.testing.assert_close(moved["x"].cpu(), data["x"])
    assert met.counter_value("MarkStep") is None


@pytest.mark.skipif(lx.device_count() < 8, reason="needs 8 devices")
def test_send_cpu_data_to_device_shards_what_the_spec_applies_to():
    mesh = xs.Mesh(np.arange(8), (1, 8))
    spec = xs.ShardingSpec(mesh, (0, 1))
    matrix, vector = torch.arange(16.0).reshape(1, 16), torch.arange(3.0)
    sharded, plain = xm.send_cpu_data_to_device([matrix, vector], xm.xla_device(), spec)
    assert xlac._get_xla_sharding_spec(sharded) == "{devices=[1,8]0,1,2,3,4,5,6,7}"
    assert xlac._get_xla_sharding_spec(plain) == ""  # one dimension: the spec does not apply
    torch.testing.assert_close(sharded.cpu(), matrix)
    torch.testing.assert_close(plain.cpu(), vector)


def test_backward_optimization_barrier_keeps_gradients_and_is_in_the_program():
    from lazax.modes.testing import last_program

    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
    model = copy.deepcopy(cpu).to(xm.xla_device())
    handle = xs.apply_backward_optimization_barrier(model[2])
    x = torch.randn(3, 4)
    cpu(x).square().sum().backward()

    def run():
        model(x.to(xm.xla_device())).square().sum().backward()
        xm.mark_step()

    assert "stablehlo.optimization_barrier" in last_program(run)
    for p_cpu, p in zip(cpu.parameters(), model.parameters()):
        torch.testing.assert_close(p.grad.cpu(), p_cpu.grad)
    handle.remove()
    model.zero_grad()
    assert "stablehlo.optimization_barrier" not in last_program(run)
