"""``torch_xla.distributed.spmd`` (xs), ``parallel_loader`` (pl) and
``xla_multiprocessing`` (xmp) against torch_xla's documented behaviour. The sharding
tests need 8 devices (the root conftest.py gives the CPU 8)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torch_xla
import torch_xla._XLAC as xlac
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
import torch_xla.distributed.parallel_loader as pl
import torch_xla.distributed.spmd as xs
import torch_xla.distributed.xla_multiprocessing as xmp
import torch_xla.runtime as xr

import lazax.modes as lx

# "xla" when torch_xla was imported before lazax (as here), lazax's "lazax" otherwise.
DEV = lx.device().type

needs_8 = pytest.mark.skipif(lx.device_count() < 8, reason="needs 8 devices")


@needs_8
def test_mesh_has_torch_xla_methods_and_is_a_lazax_mesh():
    mesh = xs.Mesh(np.arange(8), (2, 4), ("data", "model"))
    assert isinstance(mesh, lx.Mesh)
    assert mesh.size() == 8 and mesh.shape() == {"data": 2, "model": 4}
    assert list(mesh.shape()) == ["data", "model"]
    assert mesh.get_axis_name_idx("model") == 1 and mesh.get_axis_name_idx("x") is None
    np.testing.assert_array_equal(mesh.get_logical_mesh(), np.arange(8).reshape(2, 4))


@needs_8
def test_mark_sharding_by_axis_index_or_name_splits_the_tensor_and_keeps_values():
    mesh = xs.Mesh(list(range(8)), (2, 4), ("data", "model"))
    value = torch.arange(32.0).reshape(4, 8)
    t = value.to(xm.xla_device())
    assert xs.mark_sharding(t, mesh, (0, "model")).global_tensor is t
    shapes = set(lx.shard_shapes(t).values())
    assert shapes == {(2, 2)}
    torch.testing.assert_close((t * 2).cpu(), value * 2)
    xs.clear_sharding(t)
    assert lx.get_sharding(t) is None
    torch.testing.assert_close(t.cpu(), value)


@needs_8
def test_global_mesh_and_1d_mesh():
    mesh = xs.get_1d_mesh("data")
    assert mesh.mesh_shape == (xr.global_runtime_device_count(),)
    assert mesh.axis_names == ("data",)
    xs.set_global_mesh(mesh)
    try:
        assert xs.get_global_mesh() is mesh
        t = torch.ones(16, 2, device=xm.xla_device())
        xs.mark_sharding(t, None, ("data", None))
        assert set(lx.shard_shapes(t).values()) == {(2, 2)}
    finally:
        xs.set_global_mesh(None)
    with pytest.raises(ValueError, match="no mesh"):
        xs.mark_sharding(t, None, ("data", None))


@needs_8
def test_sharded_training_equals_the_cpu():
    mesh = xs.Mesh(range(8), (8,), ("data",))
    torch.manual_seed(0)
    cpu_model = torch.nn.Linear(4, 2)
    model = torch.nn.Linear(4, 2).to(xm.xla_device())
    model.load_state_dict(cpu_model.state_dict())
    opts = [torch.optim.SGD(m.parameters(), lr=0.5) for m in (cpu_model, model)]
    x, y = torch.randn(16, 4), torch.randn(16, 2)
    for _ in range(3):
        for m, opt, dev in ((cpu_model, opts[0], "cpu"), (model, opts[1], DEV)):
            xb = x.to(dev)
            if dev == DEV:
                xs.mark_sharding(xb, mesh, ("data", None))
            opt.zero_grad()
            F.mse_loss(m(xb), y.to(dev)).backward()
            opt.step()
        xm.mark_step()
    torch.testing.assert_close(model.weight.cpu(), cpu_model.weight, rtol=1e-5, atol=1e-6)


def _batches(n=5):
    gen = torch.Generator().manual_seed(0)
    return [(torch.randn(4, 3, generator=gen), torch.arange(4) + i) for i in range(n)]


def test_mp_device_loader_gives_device_batches_and_marks_each_step():
    batches = _batches()
    loader = pl.MpDeviceLoader(batches, xm.xla_device())
    assert len(loader) == 5
    seen = []
    for i, (x, y) in enumerate(loader):
        assert x.device == lx.device(0) and y.device == lx.device(0)
        torch.testing.assert_close(x.cpu(), batches[i][0])
        out = x.sum() + y.sum()
        xm.add_step_closure(lambda v=out: seen.append(v.item()))
    assert len(seen) == 5  # every step was marked, the last one at the end
    assert seen[0] == pytest.approx(float(batches[0][0].sum() + batches[0][1].sum()), rel=1e-5)


def test_mp_device_loader_loop_compiles_once_per_distinct_graph():
    model = torch.nn.Linear(3, 1).to(xm.xla_device())
    for x, _ in pl.MpDeviceLoader(_batches(2), xm.xla_device()):
        model(x).sum().backward()
    met.clear_all()
    for x, _ in pl.MpDeviceLoader(_batches(4), xm.xla_device()):
        model(x).sum().backward()
    assert met.counter_value("UncachedCompile") is None  # every step's graph was cached


def test_parallel_loader_per_device_loader():
    batches = _batches(3)
    para = pl.ParallelLoader(batches, [xm.xla_device()], device_prefetch_size=1)
    assert para.per_device_samples() == 3
    got = [x.cpu() for x, _ in para.per_device_loader(xm.xla_device())]
    for a, (b, _) in zip(got, batches):
        torch.testing.assert_close(a, b)
    para.close()
    with pytest.raises(ValueError, match="shards"):
        pl.ParallelLoader(batches, [f"{DEV}:0", f"{DEV}:1"])


def test_xmp_spawn_runs_one_process_here():
    assert xmp.spawn(lambda index, a: (index, a), args=(7,)) == (0, 7)
    assert xmp.spawn(lambda index: index, nprocs=1) == 0
    with pytest.raises(ValueError, match="torchrun"):
        xmp.spawn(lambda index: index, nprocs=4)


def test_torch_xla_device_works_as_a_loader_device():
    x, _ = next(iter(pl.MpDeviceLoader(_batches(1), torch_xla.device())))
    assert x.device.type == DEV


@pytest.mark.parametrize(
    "ids, shape, names, words",
    [
        (range(2), (4,), None, "Number of device IDs"),
        ([0, 0], (2,), None, "Device IDs must be unique"),
        ([1, 2], (2,), None, "Device IDs must be less than mesh size"),
        (range(2), (1, 2), ("a",), "Number of axis names"),
        (range(2), (1, 2), ("a", "a"), "Axis names must be unique"),
        # a well-formed mesh over part of the job's devices: lx.Mesh takes it
        (range(2), (1, 2), None, r"Number of device IDs \(2\) must match the global number"),
    ],
)
def test_mesh_refuses_in_torch_xla_words(ids, shape, names, words):
    with pytest.raises(AssertionError, match=words):
        xs.Mesh(ids, shape, names)


def test_sharding_spec_shards_the_loader_tensors_it_applies_to():
    if lx.global_device_count() < 2:
        pytest.skip("needs 2 devices")
    mesh = xs.get_1d_mesh("data")
    spec = xs.ShardingSpec(mesh, ("data", None))
    n = mesh.size()
    assert spec.can_apply(torch.zeros(n, 3)) and not spec.can_apply(torch.zeros(n))
    batches = [(torch.ones(n, 3), torch.zeros(n, dtype=torch.int64))] * 2
    x, y = next(iter(pl.MpDeviceLoader(batches, torch_xla.device(), input_sharding=spec)))
    ids = ",".join(str(i) for i in range(n))
    assert xlac._get_xla_sharding_spec(x) == f"{{devices=[{n},1]{ids}}}"
    assert xlac._get_xla_sharding_spec(y) == ""  # one dimension: the spec does not apply
    torch.testing.assert_close(x.cpu(), torch.ones(n, 3))


def test_mesh_device_ids_list_as_torch_xlas_array():
    mesh = xs.Mesh(np.arange(lx.global_device_count()), (1, lx.global_device_count()))
    assert mesh.device_ids.tolist() == list(range(lx.global_device_count()))


@needs_8
def test_a_batch_that_does_not_divide_is_split_unevenly_unless_minibatch():
    mesh = xs.get_1d_mesh("data")
    batches = [(torch.randn(7, 4), torch.arange(7)) for _ in range(2)]
    spec = xs.ShardingSpec(mesh, ("data", None))
    for (x, _), (x_cpu, _) in zip(
        pl.MpDeviceLoader(batches, xm.xla_device(), input_sharding=spec), batches
    ):
        assert xlac._get_xla_sharding_spec(x) == "{devices=[8,1]0,1,2,3,4,5,6,7}"
        torch.testing.assert_close(x.cpu(), x_cpu)
    per_host = xs.ShardingSpec(mesh, ("data", None), minibatch=True)
    loader = pl.MpDeviceLoader(batches, xm.xla_device(), input_sharding=per_host)
    with pytest.raises(RuntimeError, match="per-host batch size must be divisible by local"):
        next(iter(loader))
