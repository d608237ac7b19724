"""lazax.modes: the public front-end (device, sync, metrics)."""

import gc
import os
import subprocess
import sys
import time

import pytest
import torch

import lazax.modes as lx
from lazax.executor.config import settings


def test_device_is_the_lazax_device():
    assert lx.device() == torch.device("lazax:0")
    assert lx.device_count() >= 1
    with pytest.raises(RuntimeError, match="out of range"):
        lx.device(lx.device_count())


def test_sync_runs_every_pending_tensor_as_one_graph():
    a = torch.randn(3, 3).to(lx.device())
    b = a * 2.0
    c = torch.exp(a)
    compiles = (lx.metrics.counter_value("UncachedCompile") or 0) + (
        lx.metrics.counter_value("CachedCompile") or 0
    )
    count_before = (lx.metrics.metric_data("ExecuteTime") or (0,))[0]
    lx.sync(wait=True)
    assert lx.metrics.metric_data("ExecuteTime")[0] == count_before + 1
    after = (lx.metrics.counter_value("UncachedCompile") or 0) + (
        lx.metrics.counter_value("CachedCompile") or 0
    )
    assert after == compiles + 1
    torch.testing.assert_close(b.cpu(), a.cpu() * 2.0)
    torch.testing.assert_close(c.cpu(), torch.exp(a.cpu()))


def test_metrics_report_and_clear():
    x = torch.ones(2).to(lx.device())
    (x + 3.0).cpu()
    report = lx.metrics.metrics_report()
    assert "Metric: ExecuteTime" in report and "TransferFromDeviceTime" in report
    assert "Counter:" in lx.metrics.short_metrics_report()
    lx.metrics.clear_all()
    assert lx.metrics.counter_names() == [] and lx.metrics.metric_names() == []
    assert lx.metrics.counter_value("CachedCompile") is None


def test_metrics_count_bytes_buffers_aliases_and_scalar_reads():
    lx.metrics.clear_all()
    x = torch.zeros(2, 3, dtype=torch.float64).to(lx.device())  # 48 bytes in
    x += 1
    lx.sync()  # donated: the program's output takes x's buffer
    assert x.sum().item() == 6.0  # a compile, 8 bytes out, one scalar read
    m = lx.metrics
    assert m.metric_data("OutboundData")[:2] == (1, 48)  # to the device
    assert m.metric_unit("OutboundData") == "bytes"
    assert m.metric_data("InboundData")[:2] == (1, 8)  # back to the host
    assert m.metric_data("InputOutputAliasCount")[:2] == (2, 1)  # x += 1 donates x; sum none
    assert m.metric_unit("InputOutputAliasCount") == "count"
    assert m.metric_unit("ExecuteTime") == "seconds"
    assert m.counter_value("CreateCompileHandles") == 2
    assert m.counter_value("CreateDataHandles") == 3  # the upload, each program's output
    assert m.counter_value("ScalarReads") == 1
    assert "Accumulator: 48B" in m.metrics_report()


def test_traced_op_counts_count_each_traced_op_by_name():
    x = torch.ones(4).to(lx.device())
    lx.sync()
    lx.metrics.clear_all()
    y = x * 2.0
    y += 1  # in place: counted under its functional name, as torch_xla's functionalized add_
    y.add_(x)
    assert lx.metrics.traced_op_counts() == {"aten::add": 2, "aten::mul": 1}
    lx.metrics.clear_all()
    assert lx.metrics.traced_op_counts() == {}


def test_traced_op_counts_count_eager_ops_too():
    x = torch.ones(4).to(lx.device())
    with lx.eager_mode_context(True):
        lx.metrics.clear_all()
        torch.exp(x)
        assert lx.metrics.traced_op_counts() == {"aten::exp": 1}


@pytest.fixture
def op_metrics():
    before = lx.metrics.op_metrics()
    lx.metrics.set_op_metrics(True)
    yield
    lx.metrics.set_op_metrics(before)


def test_per_op_metrics_are_off_by_default():
    code = "import lazax.modes as lx; print(lx.metrics.op_metrics())"
    env = {k: v for k, v in os.environ.items() if k != "LAZAX_OP_METRICS"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.stdout.strip() == "False", done.stderr[-2000:]


def test_per_op_metrics_off_install_nothing_and_count_nothing():
    import lazax.executor as lx_exec
    from lazax.executor.dispatch import handlers

    before = lx.metrics.op_metrics()
    lx.metrics.set_op_metrics(False)  # (the torch_xla package, if imported, turned them on)
    assert lx_exec.LazyTensor.__torch_dispatch__.__func__ is handlers.dispatch
    assert "__del__" not in lx_exec.LazyTensor.__dict__
    lx.metrics.clear_all()
    x = torch.ones(4).to(lx.device())
    del x
    y = torch.ones(3).to(lx.device()) * 2
    gc.collect()
    assert lx.metrics.counter_value("CreateXlaTensor") is None
    assert lx.metrics.counter_value("DestroyXlaTensor") is None
    assert "LazyTracing" not in lx.metrics.metric_names()
    del y
    lx.metrics.set_op_metrics(True)
    assert lx_exec.LazyTensor.__torch_dispatch__.__func__ is handlers.dispatch_timed
    assert "__del__" in lx_exec.LazyTensor.__dict__
    lx.metrics.set_op_metrics(before)


def test_each_op_on_a_lazax_tensor_is_one_lazy_tracing_sample(op_metrics):
    x = torch.ones(4).to(lx.device())
    lx.sync()
    lx.metrics.clear_all()
    y = (x * 2.0).exp()
    count, total, samples = lx.metrics.metric_data("LazyTracing")
    assert count == 2 and len(samples) == 2 and total > 0
    assert lx.metrics.metric_unit("LazyTracing") == "seconds"
    del y


def test_tensors_made_and_freed_are_counted(op_metrics):
    gc.collect()
    lx.metrics.clear_all()
    x = torch.tensor(2.0, device=lx.device())  # one tensor, as torch_xla counts it
    assert lx.metrics.counter_value("CreateXlaTensor") == 1
    y = x + 1
    del y
    gc.collect()
    assert lx.metrics.counter_value("CreateXlaTensor") == 2
    assert lx.metrics.counter_value("DestroyXlaTensor") == 1
    del x


def test_holds_device_data_is_false_while_pending_and_true_once_synced():
    x = torch.ones(4, 4).to(lx.device())
    y = x * 2
    assert not lx.holds_device_data(y)
    lx.sync()
    assert lx.holds_device_data(y) and lx.holds_device_data(y[1:])  # a view: its storage's
    with lx.eager_mode_context(True):
        assert lx.holds_device_data(torch.exp(y))  # eager ops run at once
    with pytest.raises(TypeError, match="takes a lazax tensor, but got a cpu tensor"):
        lx.holds_device_data(torch.ones(2))


def _slow_program(x):
    # A few large matmuls: a program the 2-core CPU runs for about a quarter of a
    # second, long after its dispatch returned.
    for _ in range(4):
        x = (x @ x) * 1e-3
    return x.sum()


def _timing_set_to(on: bool):
    before = lx.metrics.device_timing()
    lx.metrics.set_device_timing(on)
    yield
    lx.metrics.set_device_timing(before)


@pytest.fixture
def device_timing():
    yield from _timing_set_to(True)


@pytest.fixture
def dispatch_timing():
    # The default, set here because the test session imports torch_xla too, which
    # turns device timing on.
    yield from _timing_set_to(False)


def test_device_timing_is_off_unless_asked_for(monkeypatch):
    monkeypatch.delenv("LAZAX_DEVICE_TIMING", raising=False)
    assert not settings().device_timing
    monkeypatch.setenv("LAZAX_DEVICE_TIMING", "1")
    assert settings().device_timing


def test_execute_time_is_the_dispatch_unless_device_timing_is_on(dispatch_timing):
    x = torch.randn(768, 768).to(lx.device())
    _slow_program(x).cpu()
    lx.metrics.clear_all()
    start = time.perf_counter()
    total = _slow_program(x)
    lx.sync()
    dispatched = time.perf_counter() - start
    total.cpu()
    assert lx.metrics.metric_data("ExecuteTime")[1] <= dispatched


def test_execute_time_is_the_device_time_not_the_dispatch(device_timing):
    x = torch.randn(768, 768).to(lx.device())
    _slow_program(x).cpu()  # compiled: the timed run below is cached
    lx.metrics.clear_all()
    start = time.perf_counter()
    total = _slow_program(x)
    lx.sync()  # returns once dispatched
    dispatched = time.perf_counter() - start
    total.cpu()
    observed = time.perf_counter() - start
    count, seconds, _ = lx.metrics.metric_data("ExecuteTime")
    assert count == 1
    # The sample runs to the device's end, as the host saw it: far more than the
    # dispatch alone, most of what the host waited in all.
    assert seconds > dispatched and seconds > 0.5 * observed


def test_reading_a_metric_waits_for_executions_dispatched(device_timing):
    x = torch.randn(768, 768).to(lx.device())
    lx.sync()
    lx.metrics.clear_all()
    for _ in range(3):
        y = _slow_program(x)
        lx.sync()  # not waited on: the samples come when the device is done
    assert lx.metrics.metric_data("ExecuteTime")[0] == 3
    assert "TotalSamples: 3" in lx.metrics.metrics_report()
    del y


def test_clear_all_drops_the_samples_of_executions_still_running(device_timing):
    x = torch.randn(768, 768).to(lx.device())
    _slow_program(x).cpu()
    y = _slow_program(x)
    lx.sync()
    lx.metrics.clear_all()  # most likely before the device is done
    y.cpu()
    assert lx.metrics.metric_data("ExecuteTime") is None


def test_executions_whose_outputs_are_donated_or_freed_are_timed(device_timing):
    w = torch.zeros(512, 512).to(lx.device())
    lx.sync()
    lx.metrics.clear_all()
    for _ in range(5):  # each run donates the buffer the run before made
        w.add_(1.0)
        lx.sync()
    y = w @ w
    lx.sync()
    del y  # its output is freed before anyone waits on it
    assert lx.metrics.metric_data("ExecuteTime")[0] == 6
    assert lx.metrics.counter_value("DonatedBuffers") == 5  # each add_ run donated
    assert w[0, 0].item() == 5.0
