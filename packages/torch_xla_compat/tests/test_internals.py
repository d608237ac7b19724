"""The parts of torch_xla's internals the package answers, against torch_xla's
documented behaviour: ``_XLAC``'s runtime, sync, counter and sharding-spec functions,
``MarkStep``, times in nanoseconds, ``xenv``, ``xu``, ``metrics_compare_utils``,
``xs.mark_sharding_with_gradients``."""

import os
import time

import pytest
import torch
import torch_xla
import torch_xla._XLAC as xlac
import torch_xla.core.xla_env_vars as xenv
import torch_xla.debug.metrics as met
import torch_xla.debug.metrics_compare_utils as mcu
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr
import torch_xla.utils.utils as xu

import lazax.modes as lx


def test_runtime_devices_and_default_device():
    torch.ones(1, device=torch_xla.device()).cpu()
    assert xlac._xla_runtime_is_initialized()
    assert xlac._xla_get_all_devices() == [f"CPU:{i}" for i in range(lx.global_device_count())]
    assert xlac._xla_get_default_device() == str(lx.device(0))
    with pytest.raises(IndexError):
        torch_xla.device(lx.device_count())


def test_set_device_type_after_start_raises_for_another_platform(monkeypatch):
    torch.ones(1, device=torch_xla.device()).cpu()
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    xr.set_device_type("cpu")  # the same platform: fine
    with pytest.raises(RuntimeError, match="after the runtime is initialized"):
        xr.set_device_type("TPU")
    assert os.environ["PJRT_DEVICE"] == "cpu"


def test_sync_multi_runs_the_pending_work():
    met.clear_all()
    t = torch.ones(3, device=torch_xla.device()) * 3
    xlac._xla_sync_multi([t], [])
    assert met.metric_data("ExecuteTime")[0] == 1
    assert t.cpu().tolist() == [3.0, 3.0, 3.0]


def test_mark_step_counter_and_own_counters_are_reported_and_cleared():
    met.clear_all()
    torch_xla.sync()
    with torch_xla.step():
        pass
    assert met.counter_value("MarkStep") == 3
    xlac._xla_increment_counter("MyCounter", 3)
    xlac._xla_increment_counter("MyCounter", 1)
    assert met.counter_value("MyCounter") == 4 and "MyCounter" in met.counter_names()
    assert "Counter: MyCounter\n  Value: 4" in met.metrics_report()
    met.clear_counters()
    assert met.counter_value("MyCounter") is None and met.counter_value("MarkStep") is None


def test_bumping_a_counter_lazax_keeps_adds_to_its_count():
    met.clear_all()
    kept = [torch.ones(2, device=torch_xla.device()) for _ in range(2)]
    made = met.counter_value("CreateXlaTensor")
    assert made >= 2
    xlac._xla_increment_counter("CreateXlaTensor", 5)
    assert met.counter_value("CreateXlaTensor") == made + 5
    assert met.counter_names().count("CreateXlaTensor") == 1
    report = met.metrics_report()
    assert report.count("Counter: CreateXlaTensor\n") == 1
    assert f"Counter: CreateXlaTensor\n  Value: {made + 5}\n" in report
    del kept


def test_each_traced_op_is_a_lazy_tracing_sample_in_nanoseconds():
    t = torch.ones(3, device=torch_xla.device())
    met.clear_all()
    u = (t + 1) * 2
    count, total, samples = met.metric_data("LazyTracing")
    assert count == 2 and total == pytest.approx(sum(samples)) and total > 0
    assert "LazyTracing" in met.metric_names()
    del u


def test_per_op_counters_count_traced_ops_under_xla_names():
    t = torch.tensor(100, device=torch_xla.device())
    met.clear_all()
    t += 2
    t = t * 3
    assert met.counter_value("xla::add") == 1 and met.counter_value("xla::mul") == 1
    assert {"xla::add", "xla::mul"} <= set(met.counter_names())
    assert "Counter: xla::add\n  Value: 1" in met.metrics_report()
    assert "xla::add" not in met.executed_fallback_ops()
    met.clear_counters()
    assert met.counter_value("xla::add") is None and met.counter_names() == []


def test_tensor_debug_info_says_pending_or_device_data_and_the_sharding():
    t = torch.ones(5, 3, device=torch_xla.device()) * 2
    pending = xlac._get_xla_tensor_debug_info(t)
    assert "XLA Shape: f32[5,3]" in pending and "XLAData: None" in pending
    torch_xla.sync()
    held = xlac._get_xla_tensor_debug_info(t)
    assert "XLAData: None" not in held and "IR: None" in held
    assert f"Data Device: {xr.device_type()}:0\n  Data Shape: f32[5,3]" in held
    assert "ShardingSpec: None" in held
    if lx.global_device_count() >= 2:
        n = lx.global_device_count()
        s = xs.mark_sharding(
            torch.ones(2, n, device=torch_xla.device()), xs.get_1d_mesh(), (None, 0)
        )
        torch_xla.sync()
        info = xlac._get_xla_tensor_debug_info(s)
        assert "XLAShardedData" in info and f"NumShards: {n}" in info
        assert f"OpSharding: {xlac._get_xla_sharding_spec(s)}" in info


def test_tensors_hlo_is_the_next_syncs_program_with_its_shardings():
    t = torch.arange(32.0).reshape(4, 8).to(torch_xla.device())
    y = t * 3
    hlo = xlac._get_xla_tensors_hlo([y])
    # named after this line, as a sync here would be, not after the package's frames
    assert hlo.startswith("HloModule jit_test_internals.py_") and "multiply(" in hlo
    assert "aten::mul" in xlac._get_xla_tensors_text([y])  # lazax's IR of it
    assert not lx.holds_device_data(y)  # nothing ran
    torch.testing.assert_close(y.cpu(), torch.arange(32.0).reshape(4, 8) * 3)
    if lx.global_device_count() >= 2:
        n = lx.global_device_count()
        s = xs.mark_sharding(
            torch.ones(2, n, device=torch_xla.device()), xs.get_1d_mesh(), (None, 0)
        )
        assert f"sharding={{devices=[1,{n}]" in xlac._get_xla_tensors_hlo([s])


def test_time_metrics_are_nanoseconds():
    met.clear_all()
    (torch.ones(4, device=torch_xla.device()) + 1).cpu()
    count, total_ns, samples = met.metric_data("CompileTime")
    assert count == 1 and total_ns > 1e5  # a compile takes more than 0.1 ms
    assert samples[-1] == pytest.approx(total_ns)


def _matmuls(x):
    for _ in range(4):
        x = (x @ x) * 1e-3
    return x


def test_execute_time_runs_to_the_devices_end_as_torch_xlas():
    assert lx.metrics.device_timing()  # importing torch_xla turned it on
    x = torch.randn(768, 768).to(torch_xla.device())
    for _ in range(2):  # the second run is cached
        met.clear_all()
        start = time.perf_counter_ns()
        y = _matmuls(x)
        torch_xla.sync()  # returns once dispatched
        y.cpu()
        wall_ns = time.perf_counter_ns() - start
    assert met.metric_data("CompileTime") is None
    count, total_ns, _ = met.metric_data("ExecuteTime")
    assert count == 1 and total_ns > 0.5 * wall_ns


def test_sharding_spec_in_xla_text():
    if lx.global_device_count() < 8:
        pytest.skip("needs 8 devices")
    mesh = xs.Mesh(range(8), (2, 4), ("a", "b"))
    dev = torch_xla.device()
    cases = {
        ("a", "b"): "{devices=[2,4]0,1,2,3,4,5,6,7}",
        ("b", "a"): "{devices=[4,2]0,4,1,5,2,6,3,7}",
        ("a", None): "{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}",
        (None, None): "{replicated}",
    }
    for spec, text in cases.items():
        t = torch.zeros(8, 8, device=dev)
        xs.mark_sharding(t, mesh, spec)
        assert xlac._get_xla_sharding_spec(t) == text, spec
    assert xlac._get_xla_sharding_spec(torch.zeros(2, device=dev)) == ""


def test_mark_sharding_with_gradients_shards_value_and_gradient():
    if lx.global_device_count() < 2:
        pytest.skip("needs 2 devices")
    n = lx.global_device_count()
    mesh = xs.Mesh(range(n), (n,), ("x",))
    w = torch.randn(2 * n, 3, device=torch_xla.device(), requires_grad=True)
    y = xs.mark_sharding_with_gradients(w, mesh, ("x", None))
    assert xlac._get_xla_sharding_spec(y).startswith(f"{{devices=[{n},1]")
    (y * 2).sum().backward()
    torch.testing.assert_close(w.grad.cpu(), torch.full((2 * n, 3), 2.0))
    assert xlac._get_xla_sharding_spec(w.grad).startswith(f"{{devices=[{n},1]")


def test_env_var_names_and_utils(monkeypatch):
    assert xenv.PJRT_DEVICE == "PJRT_DEVICE" and xenv.CPU_NUM_DEVICES == "CPU_NUM_DEVICES"
    monkeypatch.setenv("MY_N", "7")
    monkeypatch.setenv("MY_FLAG", "0")
    assert xu.getenv_as("MY_N", int) == 7 and xu.getenv_as("MISSING_X", int, 3) == 3
    assert xu.getenv_as("MY_FLAG", bool) is False
    assert xu.check_env_flag("MISSING_X") is False and xu.check_env_flag("MISSING_X", "1")
    assert xu.as_list((1, 2)) == [1, 2] and xu.as_list(5) == [5]
    gen = xu.SampleGenerator("batch", 3)
    assert len(gen) == 3 and list(gen) == ["batch"] * 3
    ports = xu.get_free_tcp_ports(2)
    assert len(set(ports)) == 2


def test_metrics_compare_utils_reads_reports():
    report = (
        "Metric: CompileTime\n  TotalSamples: 2\n  Accumulator: 1.5ms\n"
        "  Median: 0.7ms (over the last 2)\nCounter: UncachedCompile\n  Value: 2\n"
        "Metric: InboundData\n  TotalSamples: 1\n  Accumulator: 1.50KB\n"
    )
    points = mcu.get_data_points_from_metrics_reports([report, report])
    assert points["CompileTime__TotalSamples"] == [2.0, 2.0]
    assert points["CompileTime__Accumulator"] == [pytest.approx(1.5e-3)] * 2
    assert points["UncachedCompile__Value"] == [2.0, 2.0]
    assert points["InboundData__Accumulator"] == [pytest.approx(1.5 / 1024)] * 2  # MB


def test_short_metrics_report_keeps_the_named_entries():
    met.clear_all()
    t = torch.ones(2, device=torch_xla.device()) * 2
    torch_xla.sync()
    t.cpu()
    default = met.short_metrics_report()
    for name in ("CompileTime", "ExecuteTime", "TransferFromDeviceTime", "MarkStep"):
        assert f": {name}\n" in default
    assert "UncachedCompile" not in default  # not in torch_xla's default list
    chosen = met.short_metrics_report(counter_names=["UncachedCompile"], metric_names=[])
    assert chosen.startswith("Counter: UncachedCompile\n") and "CompileTime" not in chosen


@pytest.mark.parametrize("bias", [True, False])
def test_patched_linear_equals_f_linear_with_gradients(bias):
    torch.manual_seed(0)
    x0, w0 = torch.randn(2, 5, 3), torch.randn(4, 3)
    b0 = torch.randn(4) if bias else None

    def run(fn, device):
        leaves = [t.detach().to(device).requires_grad_() for t in (x0, w0, b0) if t is not None]
        y = fn(*leaves)
        (y * torch.arange(4.0, device=device)).sum().backward()
        return [y.detach().cpu()] + [t.grad.cpu() for t in leaves]

    want = run(torch.nn.functional.linear, "cpu")
    got = run(xs.XLAPatchedLinear.apply, torch_xla.device())
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_patched_linear_forward_of_a_module():
    m = torch.nn.Linear(3, 2)
    x = torch.randn(6, 3)
    want = m(x)
    m.to(torch_xla.device())
    got = xs.xla_patched_nn_linear_forward(m, x.to(torch_xla.device()))
    torch.testing.assert_close(got.cpu(), want.detach(), rtol=1e-5, atol=1e-5)
