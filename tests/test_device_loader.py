"""``lx.DeviceLoader``: batches of any structure come back on the device with their
values, the next ones are loaded and moved in a background thread while the step runs,
errors of the source reach the loop, the thread ends with the loop (exhausted, broken
off, closed or collected), leaves can be sharded, and training through it equals the
CPU with the step's programs unchanged.
"""

import dataclasses
import gc
import threading
import time
from typing import NamedTuple

import pytest
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import lazax.modes as lx
from lazax.executor import LazyTensor, storage_of

DEV = lx.device()


def loader_threads() -> int:
    return sum(t.name == "lazax-device-loader" and t.is_alive() for t in threading.enumerate())


class Pair(NamedTuple):
    x: torch.Tensor
    y: torch.Tensor


@dataclasses.dataclass
class Batch:
    images: torch.Tensor
    meta: dict
    name: str = "b"
    count: int = dataclasses.field(default=0, init=False)


def test_every_structure_comes_back_on_the_device_with_its_values():
    a, b, c = torch.randn(2, 3), torch.arange(4), torch.tensor(True)
    batch = Batch(a, {"ids": b, "flags": [c, None, "text"]})
    batch.count = 7
    already = torch.ones(2, device=DEV)
    source = [a, (a, b), [b, 3], {"x": a, "y": (b, c)}, Pair(a, b), batch, already]
    got = list(lx.DeviceLoader(source))
    assert len(got) == len(source)
    assert type(got[0]) is LazyTensor and got[0].device == DEV
    torch.testing.assert_close(got[0].cpu(), a)
    assert type(got[1]) is tuple and got[1][1].cpu().tolist() == b.tolist()
    assert type(got[2]) is list and got[2][1] == 3
    assert got[3]["y"][1].cpu().item() is True
    assert type(got[4]) is Pair and got[4].y.device == DEV
    moved = got[5]
    assert type(moved) is Batch and moved.name == "b" and moved.count == 7
    torch.testing.assert_close(moved.images.cpu(), a)
    assert moved.meta["flags"][1:] == [None, "text"] and moved.meta["flags"][0].device == DEV
    assert batch.images.device.type == "cpu"  # the source's batch is left as it was
    assert got[6] is already


def test_the_next_batches_are_prepared_in_the_background():
    fetched = []

    def source():
        for i in range(10):
            fetched.append(i)
            yield torch.full((2,), float(i))

    it = iter(lx.DeviceLoader(source(), prefetch=3))
    first = next(it)
    deadline = time.monotonic() + 5
    while len(fetched) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    # one given, three ready, one waiting for room: no further
    assert len(fetched) == 5
    assert first.cpu().tolist() == [0.0, 0.0]
    assert [v.cpu()[0].item() for v in it] == [float(i) for i in range(1, 10)]


def test_loading_overlaps_the_step():
    def slow_source(n):
        for i in range(n):
            time.sleep(0.05)  # the loader's work for one batch
            yield torch.full((4,), float(i))

    def run(batches):
        start = time.perf_counter()
        total = 0.0
        for x in batches:
            time.sleep(0.05)  # the step
            total += float(x.sum())
        return time.perf_counter() - start, total

    serial, want = run(t.to(DEV) for t in slow_source(8))
    overlapped, got = run(lx.DeviceLoader(slow_source(8)))
    assert got == want
    assert overlapped < 0.8 * serial, (overlapped, serial)


def test_an_error_of_the_source_reaches_the_loop_where_it_happened():
    def source():
        yield torch.zeros(1)
        yield torch.ones(1)
        raise KeyError("sample 2 is missing")

    seen = []
    with pytest.raises(KeyError, match="sample 2 is missing") as err:
        for x in lx.DeviceLoader(source()):
            seen.append(x.cpu().item())
    assert seen == [0.0, 1.0]
    assert "source" in _frame_names(err.value.__traceback__)  # its own traceback
    assert loader_threads() == 0


def _frame_names(tb) -> list[str]:
    names = []
    while tb is not None:
        names.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    return names


def test_the_thread_ends_with_the_loop():
    data = [torch.full((1,), float(i)) for i in range(50)]
    for _ in lx.DeviceLoader(data):
        break
    assert loader_threads() == 0  # a break joins it
    it = iter(lx.DeviceLoader(data))
    next(it)
    it.close()
    assert loader_threads() == 0 and list(it) == []
    it = iter(lx.DeviceLoader(data))
    next(it)
    del it
    gc.collect()
    assert loader_threads() == 0
    assert len(list(lx.DeviceLoader(data))) == 50 and loader_threads() == 0
    assert len(lx.DeviceLoader(data)) == 50


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="not cpu"):
        lx.DeviceLoader([], device="cpu")
    with pytest.raises(ValueError, match="prefetch"):
        lx.DeviceLoader([], prefetch=0)
    with pytest.raises(TypeError, match="sharding"):
        lx.DeviceLoader([], sharding=("data",))
    assert lx.DeviceLoader([], device=lx.device(1)).device == lx.device(1)
    (x,) = list(lx.DeviceLoader([torch.ones(2)], device=lx.device(1)))
    assert x.device == lx.device(1)


def test_leaves_are_sharded_as_asked():
    mesh = lx.Mesh(range(8), (8,), ("data",))
    images, labels = torch.randn(16, 3, 4), torch.arange(16)
    ((x, y),) = list(lx.DeviceLoader([(images, labels)], sharding=lx.Sharding(mesh, ("data",))))
    assert lx.get_sharding(x).partition_spec == ("data", None, None)
    assert set(lx.shard_shapes(x).values()) == {(2, 3, 4)}
    assert set(lx.shard_shapes(y).values()) == {(2,)}
    torch.testing.assert_close(x.cpu(), images)
    assert y.cpu().tolist() == labels.tolist()

    def images_only(t):
        return lx.Sharding(mesh, ("data",)) if t.dim() == 3 else None

    ((x, y),) = list(lx.DeviceLoader([(images, labels)], sharding=images_only))
    assert lx.get_sharding(x) is not None and lx.get_sharding(y) is None
    torch.testing.assert_close((x.sum(dim=(1, 2)) + y).cpu(), images.sum(dim=(1, 2)) + labels)


def _train(batches, device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 1)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    losses, compiles = [], []
    for x, y in batches:
        if device == "cpu":
            x, y = x.to(device), y.to(device)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        compiles.append(lx.metrics.counter_value("UncachedCompile") or 0)
    return losses, compiles


def test_training_through_a_dataloader_equals_the_cpu_and_compiles_the_same():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(64, 6, generator=g)
    data = TensorDataset(x, x.pow(2).sum(1, keepdim=True))
    cpu_losses, _ = _train(DataLoader(data, batch_size=8), "cpu")
    loader = DataLoader(data, batch_size=8, num_workers=2, pin_memory=True)
    losses, compiles = _train(lx.DeviceLoader(loader, prefetch=2), DEV)
    torch.testing.assert_close(losses, cpu_losses, rtol=1e-5, atol=1e-6)
    # No lx.sync() in the loop: the loader cuts each step, so the steady steps (from the
    # third on: Adam's first step makes its state) come from the cache.
    assert compiles[-1] == compiles[3]
    assert loader_threads() == 0


def test_each_batch_cuts_the_trace_unless_asked_not_to():
    for sync, pending in ((True, False), (False, True)):
        it = iter(lx.DeviceLoader([torch.ones(2), torch.ones(2)], sync=sync))
        y = next(it) * 2
        next(it)
        assert storage_of(y).pending is pending, sync
        it.close()
