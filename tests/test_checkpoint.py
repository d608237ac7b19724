"""Checkpoints as on cuda: ``torch.save`` of lazax tensors, state dicts and optimizer
state writes a file ``torch.load`` reads with its default ``weights_only=True``, onto
lazax or, with ``map_location``, onto the CPU; CPU checkpoints load onto lazax; shared
storages stay shared; a run resumed in a new process equals the uninterrupted one, in
every mode. Safe loading stays safe.
"""

import io
import os
import pickle
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn

import lazax.modes as lx
from lazax.executor import storage_of

from .test_module_moves import TinyGPT, assert_tied, batches, train

DEV = lx.device()
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def round_trip(obj, **load_kwargs):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, **load_kwargs)


def same(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    torch.testing.assert_close(a.cpu(), b.cpu(), rtol=0, atol=0)


def test_numpy_raises_as_for_a_cuda_tensor():
    t = torch.arange(3.0, device=DEV)
    with pytest.raises(TypeError, match=r"can't convert lazax:0 device type tensor to numpy"):
        t.numpy()
    assert t.numpy(force=True).tolist() == [0.0, 1.0, 2.0]


def test_a_state_dict_loads_back_onto_lazax_with_weights_only():
    model = TinyGPT().to(DEV)
    loaded = round_trip(model.state_dict())
    assert set(loaded) == set(model.state_dict())
    for name, value in model.state_dict().items():
        assert loaded[name].device == DEV, name
        same(loaded[name], value)


@pytest.mark.parametrize(
    "map_location",
    ["cpu", torch.device("cpu"), {"lazax:0": "cpu"}, lambda storage, location: storage],
    ids=["str", "device", "dict", "callable"],
)
def test_map_location_puts_a_lazax_checkpoint_on_the_cpu(map_location):
    a = torch.randn(3, 4, device=DEV)
    loaded = round_trip({"a": a, "row": a[1]}, map_location=map_location)
    assert loaded["a"].device.type == "cpu" and type(loaded["a"]) is torch.Tensor
    same(loaded["a"], a)
    same(loaded["row"], a[1])
    # one storage record for the tensor and its view, as torch saves them
    assert loaded["row"].untyped_storage().data_ptr() == loaded["a"].untyped_storage().data_ptr()


@pytest.mark.parametrize("map_location", [DEV, "lazax", "lazax:0", {"cpu": "lazax:0"}])
def test_a_cpu_checkpoint_loads_onto_lazax(map_location):
    state = {"w": torch.randn(4, 5), "steps": torch.arange(3), "flag": torch.tensor([True])}
    loaded = round_trip(state, map_location=map_location)
    for name, value in state.items():
        assert loaded[name].device == DEV, name
        same(loaded[name], value)


def test_tensors_sharing_storage_share_it_after_loading():
    model = TinyGPT().to(DEV)
    base = torch.arange(12.0, device=DEV).reshape(3, 4)
    loaded = round_trip({"state": model.state_dict(), "base": base, "view": base.t()[1]})
    state = loaded["state"]
    assert storage_of(state["lm_head.weight"]) is storage_of(state["wte.weight"])
    assert storage_of(state["lm_head.bias"]) is storage_of(state["cls.bias"])
    loaded["base"].add_(100)  # written through the base, read through the view
    same(loaded["view"], torch.tensor([101.0, 105.0, 109.0]))


def test_a_tied_model_reloads_with_its_ties_and_values():
    source = TinyGPT().to(DEV)
    model = TinyGPT().to(DEV)
    model.load_state_dict(round_trip(source.state_dict()))
    assert_tied(model)
    same(model.wte.weight, source.wte.weight)
    model.load_state_dict(round_trip(source.state_dict()), assign=True)
    assert_tied(model)


@pytest.mark.parametrize(
    "dtype", [torch.bool, torch.bfloat16, torch.float16, torch.int8, torch.complex64]
)
def test_every_dtype_round_trips(dtype):
    value = torch.randn(5, 3).to(dtype) if dtype is not torch.bool else torch.randn(5, 3) > 0
    loaded = round_trip(value.to(DEV))
    assert loaded.device == DEV
    same(loaded, value)
    same(round_trip(value.to(DEV), map_location="cpu"), value)


def test_parameters_load_as_parameters():
    p = nn.Parameter(torch.randn(3, device=DEV))
    loaded = round_trip(p)
    assert isinstance(loaded, nn.Parameter) and loaded.requires_grad and loaded.device == DEV
    same(loaded, p.detach())


def test_optimizer_state_round_trips():
    model = TinyGPT().to(DEV)
    _, opt = train(model, batches(2), "lazy")
    state = round_trip(opt.state_dict())
    for key, entry in opt.state_dict()["state"].items():
        for name, value in entry.items():
            same(state["state"][key][name], value)
    assert state["param_groups"] == opt.state_dict()["param_groups"]


def test_pending_values_are_run_once_before_saving():
    model = nn.Sequential(*[nn.Linear(4 + i, 5 + i) for i in range(6)]).to(DEV)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(2)
    before = lx.metrics.counter_value("UncachedCompile") or 0
    before += lx.metrics.counter_value("CachedCompile") or 0
    loaded = round_trip(model.state_dict())
    after = (lx.metrics.counter_value("UncachedCompile") or 0) + (
        lx.metrics.counter_value("CachedCompile") or 0
    )
    assert after - before == 1  # one graph for all six updates, none per storage
    for name, value in model.state_dict().items():
        same(loaded[name], value)


def test_weights_only_still_refuses_other_globals(tmp_path):
    class Payload:
        def __reduce__(self):
            return (os.getcwd, ())

    path = tmp_path / "crafted.pt"
    torch.save({"w": torch.randn(2, device=DEV), "payload": Payload()}, path)
    with pytest.raises(pickle.UnpicklingError, match="posix.getcwd|os.getcwd"):
        torch.load(path)
    # what lazax writes names nothing beyond torch's own rebuild functions
    clean = tmp_path / "clean.pt"
    torch.save(
        {"w": torch.randn(2, device=DEV), "p": nn.Parameter(torch.ones(1, device=DEV))}, clean
    )
    assert torch.serialization.get_unsafe_globals_in_checkpoint(clean) == []


def test_a_storage_on_another_device_is_refused_by_set_():
    t = torch.empty(0, device=DEV)
    with pytest.raises(RuntimeError, match="storage on different device"):
        t.set_(torch.UntypedStorage(8), 0, (2,), (1,))


_ONE_DEVICE = """
import torch, lazax.modes as lx
loaded = torch.load({path!r})
assert lx.device_count() == 1 and lx.get_sharding(loaded["t"]) is None
assert torch.equal(loaded["t"].cpu(), loaded["full"])
"""


@pytest.mark.skipif(lx.device_count() < 8, reason="needs 8 virtual devices")
def test_a_sharded_tensor_saves_its_full_value_and_loads_sharded(tmp_path):
    mesh = lx.Mesh(range(8), (2, 4), ("data", "model"))
    full = torch.randn(16, 8)
    t = full.to(DEV)
    lx.mark_sharding(t, mesh, ("data", "model"))
    loaded = round_trip({"t": t, "row": t[3]})
    same(loaded["t"], full)
    same(loaded["row"], full[3])
    assert lx.get_sharding(loaded["t"]) == lx.Sharding(mesh, ("data", "model"))
    for map_location in ("cpu", {"lazax:0": "cpu"}):
        on_cpu = round_trip({"t": t}, map_location=map_location)["t"]
        assert on_cpu.device.type == "cpu"
        same(on_cpu, full)
    # a process without the mesh's devices loads it whole, on one device
    path = str(tmp_path / "sharded.pt")
    torch.save({"t": t, "full": full}, path)
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1")
    script = _ONE_DEVICE.format(path=path)
    subprocess.run([sys.executable, "-c", script], check=True, env=env, timeout=300)


_RESUME = """
import sys, torch
sys.path.insert(0, {root!r})
import lazax.dynamo
from tests.test_module_moves import TinyGPT, batches, train
for mode in {modes!r}:
    checkpoint = torch.load({path!r} + "." + mode)
    torch.manual_seed(123)  # a different initialisation: everything must come from the file
    model = TinyGPT().to(torch.device("lazax"))
    opt_state = checkpoint["optimizer"]
    model.load_state_dict(checkpoint["model"])
    losses, opt = train(model, batches(4)[2:], mode, opt_state=opt_state)
    torch.save({{"losses": losses, "model": model.state_dict()}}, {path!r} + ".out." + mode)
"""


def test_a_run_resumed_in_a_new_process_equals_the_uninterrupted_run(tmp_path):
    modes = ["lazy", "eager", "compile", "dynamo"]
    path = str(tmp_path / "ckpt")
    expected = {}
    for mode in modes:
        torch.manual_seed(0)
        model = TinyGPT().to(DEV)
        losses, opt = train(model, batches(4)[:2], mode)
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, path + "." + mode)
        more, _ = train(model, batches(4)[2:], mode, opt=opt)
        expected[mode] = (more, {k: v.cpu() for k, v in model.state_dict().items()})
    script = textwrap.dedent(_RESUME.format(root=ROOT, modes=modes, path=path))
    subprocess.run([sys.executable, "-c", script], check=True, cwd=ROOT, timeout=600)
    for mode in modes:
        resumed = torch.load(path + ".out." + mode, map_location="cpu")
        losses, state = expected[mode]
        assert resumed["losses"] == losses, mode
        for name, value in state.items():
            torch.testing.assert_close(resumed["model"][name], value, rtol=0, atol=0)
