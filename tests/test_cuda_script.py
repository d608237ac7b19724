"""A CUDA training script runs with ``device="cuda"`` changed to ``lx.device()``: the
host-side parts torch's generic code asks of an accelerator, each against the CPU (or
against what CUDA does where the CPU has no counterpart).

- pinned memory: ``pin_memory()``, ``is_pinned()``, ``DataLoader(pin_memory=True,
  num_workers=2)`` training equal to the CPU, ``non_blocking=True`` copies;
- ``torch.accelerator`` and ``torch.lazax``: device index, synchronize, streams and
  events with ordered semantics, memory statistics;
- aliasing: ``set_`` (tensor and storage forms) shares storage as on the CPU;
  ``data_ptr()`` raises instead of answering 0.
"""

import copy
import subprocess
import sys
import threading
import time

import pytest
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import lazax.modes as lx
from lazax.executor import storage_of
from lazax.executor.hooks import pinned

DEV = lx.device()


# -- pinned memory -----------------------------------------------------------------


def test_pin_memory_gives_a_pinned_copy_as_on_cuda():
    x = torch.randn(4, 3)
    assert not x.is_pinned()
    p = x.pin_memory()
    assert p.is_pinned() and p is not x and not x.is_pinned()
    assert p.data_ptr() != x.data_ptr()
    torch.testing.assert_close(p, x, rtol=0, atol=0)
    assert p.pin_memory() is p  # already pinned: the tensor itself
    assert p[1:].is_pinned() and p.t().is_pinned()  # views of a pinned storage
    strided = torch.randn(3, 4).t()
    pinned_strided = strided.pin_memory()
    assert pinned_strided.stride() == strided.stride() and pinned_strided.is_pinned()
    assert torch.empty(0).pin_memory().shape == (0,)
    # autograd records the copy, as torch does
    w = torch.randn(3, requires_grad=True)
    w.pin_memory().sum().backward()
    assert w.grad.tolist() == [1.0, 1.0, 1.0]


def test_a_freed_pinned_storage_is_forgotten():
    p = torch.randn(64).pin_memory()
    address = p.untyped_storage().data_ptr()
    view = p[3:]
    del p
    assert address in pinned._PINNED  # the view keeps the storage
    del view
    assert address not in pinned._PINNED


def test_lazax_tensors_are_not_pinned_and_refuse_pinning():
    t = torch.ones(3, device=DEV)
    assert not t.is_pinned()
    with pytest.raises(RuntimeError, match=r"only dense CPU tensors can be pinned"):
        t.pin_memory()


def test_non_blocking_copies_from_pinned_memory_stay_correct():
    p = torch.arange(6.0).pin_memory()
    on_device = p.to(DEV, non_blocking=True)
    p.add_(100)  # the pin thread reuses its buffers: the copy already made is kept
    assert on_device.cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    back = torch.empty(6).pin_memory()
    back.copy_(on_device * 2, non_blocking=True)
    lx.wait_device_ops()
    assert back.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))


def _train(device, loader):
    model = _model().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for x, y in loader:
        if device != "cpu":
            assert x.is_pinned() and y.is_pinned()
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return [float(v) for v in losses], [p.detach().cpu() for p in model.parameters()]


def _dataset():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(48, 8, generator=g)
    return TensorDataset(x, x.sum(1, keepdim=True).sin())


@pytest.mark.parametrize("device_arg", [{}, {"pin_memory_device": "lazax"}], ids=["", "device"])
def test_a_pinned_memory_dataloader_with_workers_trains_as_on_the_cpu(device_arg):
    data = _dataset()
    cpu_losses, cpu_params = _train("cpu", DataLoader(data, batch_size=8))
    loader = DataLoader(data, batch_size=8, pin_memory=True, num_workers=2, **device_arg)
    losses, params = _train(DEV, loader)
    torch.testing.assert_close(losses, cpu_losses, rtol=1e-5, atol=1e-6)
    for got, want in zip(params, cpu_params):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


# -- torch.accelerator and torch.lazax -----------------------------------------------


@pytest.fixture
def device_0():
    yield
    torch.accelerator.set_device_index(0)


def test_the_accelerator_is_lazax_with_every_device(device_0):
    acc = torch.accelerator.current_accelerator()
    assert acc.type == "lazax" and torch.accelerator.is_available()
    assert torch.get_device_module(acc) is torch.lazax
    assert torch.accelerator.device_count() == lx.device_count() == torch.lazax.device_count()
    assert torch.lazax.is_available() and torch.lazax.is_initialized()
    torch.lazax.init()
    assert torch.accelerator.current_device_index() == torch.lazax.current_device() == 0
    assert isinstance(torch.lazax.get_device_name(), str)


def test_setting_the_device_does_not_start_the_runtime():
    """``torch.cuda.set_device(local_rank)`` comes before ``init_process_group`` in
    distributed scripts: the runtime must not start before the process joins its job."""
    script = (
        "import torch, lazax.modes as lx\n"
        "torch.accelerator.set_device_index(3); torch.lazax.set_device(2)\n"
        "assert torch.accelerator.current_device_index() == 2\n"
        "assert not torch.lazax.is_initialized()\n"
        "torch.lazax.init(); assert torch.lazax.is_initialized()\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.stdout.strip() == "ok", done.stderr[-3000:]


def test_the_current_device_index_per_thread(device_0):
    last = lx.device_count() - 1
    torch.accelerator.set_device_index(last)
    assert torch.accelerator.current_device_index() == torch.lazax.current_device() == last
    seen = []
    thread = threading.Thread(target=lambda: seen.append(torch.accelerator.current_device_index()))
    thread.start()
    thread.join()
    assert seen == [0]  # per thread, as cuda's
    with torch.accelerator.device_index(0):
        assert torch.accelerator.current_device_index() == 0
    assert torch.accelerator.current_device_index() == last
    with torch.lazax.device(f"lazax:{last - 1}"):
        assert torch.lazax.current_device() == last - 1
    torch.lazax.set_device(lx.device(0))
    assert torch.accelerator.current_device_index() == 0
    with pytest.raises(ValueError, match=r"cpu doesn't match the current accelerator lazax"):
        torch.accelerator.set_device_index("cpu")
    with pytest.raises(RuntimeError, match=r"Invalid device index"):
        torch.accelerator.set_device_index(last + 1)


def _work(x=None):
    """Four matmuls on ``x`` (a random lazax tensor if None), on ``x``'s device; the
    values stay about 0.5 in size (``/ 256`` would shrink them to 1e-19)."""
    x = torch.randn(256, 256, device=DEV) if x is None else x
    for _ in range(4):
        x = (x @ x / 8).tanh()
    return x


def test_synchronize_runs_and_waits_for_everything():
    x = _work()
    assert storage_of(x).pending
    torch.accelerator.synchronize()
    assert not storage_of(x).pending and storage_of(x).value.node.data.is_ready()
    y = _work()
    torch.lazax.synchronize()
    assert not storage_of(y).pending
    z = _work()
    stream = torch.accelerator.current_stream()
    assert isinstance(stream, torch.Stream) and stream.device == DEV
    assert not stream.query()  # work is pending
    stream.synchronize()
    assert stream.query() and not storage_of(z).pending


def test_streams_and_events_keep_order():
    s = torch.Stream(DEV)
    assert isinstance(s, torch.Stream) and s.device_type == torch.Stream(DEV).device_type
    start = torch.randn(256, 256)
    with torch.lazax.stream(s):
        x = _work(start.to(DEV))
    event = s.record_event()
    assert isinstance(event, torch.Event)
    # An event without timing cuts nothing (FSDP2 orders its streams with these, and
    # its step stays one graph); its synchronize runs and waits for what came before.
    assert storage_of(x).pending and not event.query()
    torch.accelerator.current_stream().wait_event(event)
    torch.accelerator.current_stream().wait_stream(s)
    event.wait()
    event.synchronize()
    assert event.query() and storage_of(x).value.node.data.is_ready()
    timed = torch.Event(enable_timing=True)
    y = _work()
    timed.record()
    assert not storage_of(y).pending  # a timed record dispatched what came before it
    later = torch.Event()
    assert later.query()  # never recorded: nothing to wait for
    later.synchronize()
    with torch.Stream(DEV) as entered:
        assert isinstance(entered, torch.Stream)
    x.record_stream(s)  # PJRT keeps buffers alive while programs use them
    torch.testing.assert_close(x.cpu(), _work(start), rtol=1e-4, atol=1e-4)  # the CPU's


def test_timed_events_measure_the_work_between_them():
    start, end = torch.Event(enable_timing=True), torch.Event(enable_timing=True)
    began = time.perf_counter()
    start.record()
    x = _work()
    end.record()
    end.synchronize()
    wall_ms = (time.perf_counter() - began) * 1000.0
    ms = start.elapsed_time(end)
    # the work between the events took time, and no more than the wall clock around them
    assert isinstance(ms, float) and 0.0 < ms <= wall_ms, (ms, wall_ms)
    assert storage_of(x).value.node.data.is_ready()
    with pytest.raises(RuntimeError, match=r"enable_timing=True"):
        torch.Event().elapsed_time(end)
    with pytest.raises(RuntimeError, match=r"must be recorded"):
        torch.Event(enable_timing=True).elapsed_time(end)


def test_memory_statistics_through_torch_accelerator():
    before = torch.accelerator.memory_allocated()
    assert before == lx.memory_allocated() == torch.lazax.memory_allocated()
    big = torch.ones(1 << 20, device=DEV) + 1
    lx.sync(wait=True)
    assert torch.accelerator.memory_allocated() >= before + 4 * (1 << 20)
    assert torch.accelerator.max_memory_allocated() >= torch.accelerator.memory_allocated()
    assert torch.accelerator.memory_reserved() == torch.accelerator.memory_allocated()
    stats = torch.accelerator.memory_stats()
    assert stats["allocated_bytes.all.current"] == torch.accelerator.memory_allocated()
    free, total = torch.accelerator.get_memory_info()
    assert 0 < free <= total and torch.lazax.mem_get_info()[1] == total
    torch.accelerator.reset_peak_memory_stats()
    torch.accelerator.empty_cache()
    torch.lazax.empty_cache()
    del big
    assert torch.lazax.max_memory_allocated() >= torch.lazax.memory_allocated()


def test_device_agnostic_code_runs_as_on_the_cpu():
    """A library written against torch.accelerator: a side stream, an event, a wait."""

    def run(device):
        torch.manual_seed(0)
        w = torch.randn(8, 8).to(device)
        x = torch.randn(4, 8).to(device)
        if device != "cpu":
            module = torch.get_device_module(torch.accelerator.current_accelerator())
            side = module.Stream()
            with module.stream(side):
                y = x @ w
            done = side.record_event()
            module.current_stream().wait_event(done)
            torch.accelerator.synchronize()
        else:
            y = x @ w
        return (y.relu() + 1).sum(0)

    torch.testing.assert_close(run(DEV).cpu(), run("cpu"))


# -- aliasing: set_ and data pointers ----------------------------------------------


def _both(fn):
    """``fn(device)`` on the CPU and on lazax; their results, on the CPU."""
    cpu = fn("cpu")
    got = fn(DEV)
    return cpu, tuple(g.cpu() if isinstance(g, torch.Tensor) else g for g in got)


def test_set_to_a_tensor_shares_its_storage_as_on_the_cpu():
    def run(device):
        a = torch.arange(6.0, device=device)
        b = torch.empty(0, device=device)
        assert b.set_(a) is b
        b.mul_(2)  # seen through a
        a[0] = -1.0  # seen through b
        row = torch.arange(12.0, device=device).reshape(3, 4)[1]
        c = torch.zeros(1, device=device).set_(row)
        c.add_(100)
        return a, b, row, c, b.is_set_to(a), c.stride(), c.storage_offset()

    cpu, got = _both(run)
    for want, have in zip(cpu, got):
        if isinstance(want, torch.Tensor):
            torch.testing.assert_close(have, want, rtol=0, atol=0)
        else:
            assert have == want


def test_set_to_pending_work_and_a_shape_change():
    def run(device):
        a = torch.ones(2, 3, device=device) * 3  # pending on lazax
        b = torch.zeros(5, device=device)
        b.set_(a)
        b.t_().add_(1)  # an in-place view op on b: a keeps its own metadata
        return a, b, tuple(b.shape), b.is_set_to(a)

    cpu, got = _both(run)
    torch.testing.assert_close(got[0], cpu[0], rtol=0, atol=0)
    torch.testing.assert_close(got[1], cpu[1], rtol=0, atol=0)
    assert got[2:] == cpu[2:]


def test_set_to_a_storage_and_with_an_offset_as_on_the_cpu():
    def run(device):
        a = torch.arange(12.0, device=device)
        b = torch.empty(0, device=device).set_(a.untyped_storage(), 2, (2, 3), (3, 1))
        b.mul_(-1)
        whole = torch.empty(0, device=device).set_(a.untyped_storage())
        c = torch.empty(0, device=device).set_(a, 1, (4,), (2,))
        c.add_(1000)
        # a storage outlives its tensor, as on the CPU
        kept = torch.empty(0, device=device).set_(
            (torch.ones(3, device=device) * 7).untyped_storage()
        )
        return a, b, whole, c, kept, tuple(whole.shape)

    cpu, got = _both(run)
    for want, have in zip(cpu[:5], got[:5]):
        torch.testing.assert_close(have, want, rtol=0, atol=0)
    assert got[5] == cpu[5]


def test_set_with_no_source_gives_an_empty_storage():
    a = torch.arange(3.0, device=DEV)
    b = torch.empty(0, device=DEV).set_(a)
    b.set_()
    assert b.shape == (0,) and b.cpu().tolist() == []
    assert a.cpu().tolist() == [0.0, 1.0, 2.0]


def test_set_errors_are_torchs():
    with pytest.raises(RuntimeError) as cpu_err:
        torch.empty(0).set_(torch.ones(3, dtype=torch.float64))
    with pytest.raises(RuntimeError) as err:
        torch.empty(0, device=DEV).set_(torch.ones(3, dtype=torch.float64, device=DEV))
    assert str(err.value) == str(cpu_err.value)
    with pytest.raises(RuntimeError, match=r"the devices must match"):
        torch.empty(0, device=DEV).set_(torch.ones(3))
    with pytest.raises(RuntimeError, match=r"out of bounds for storage of size 12"):
        torch.empty(0, device=DEV).set_(torch.ones(3, device=DEV).untyped_storage(), 2, (2,))


def test_data_ptr_raises_instead_of_answering_0():
    t = torch.ones(3, device=DEV)
    with pytest.raises(RuntimeError, match=r"cannot give the data pointer of a lazax:0 tensor"):
        t.data_ptr()
    with pytest.raises(RuntimeError, match=r"data pointer"):
        t.untyped_storage().data_ptr()
    # what still works: the buffer through DLPack, and deepcopy
    assert torch.utils.dlpack.from_dlpack(t.__dlpack__()).tolist() == [1.0, 1.0, 1.0]
    capsule = torch.utils.dlpack.to_dlpack(t)
    assert torch.utils.dlpack.from_dlpack(capsule).data_ptr() != 0
    model = nn.Linear(2, 2).to(DEV)
    twin = copy.deepcopy(model)
    twin.weight.data.mul_(0)
    assert twin.weight.cpu().abs().sum() == 0 and model.weight.cpu().abs().sum() > 0
