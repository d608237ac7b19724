"""``torch_xla.runtime`` (xr), ``torch_xla.debug.metrics`` (met) and
``torch_xla.debug.profiler`` (xp) against torch_xla's documented behaviour."""

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import pytest
import torch
import torch_xla
import torch_xla.debug.metrics as met
import torch_xla.debug.profiler as xp
import torch_xla.runtime as xr
from jax.profiler import ProfileData

import lazax.modes as lx


def test_runtime_shape_of_one_process(monkeypatch):
    assert xr.device_type() == "CPU"
    assert xr.world_size() == 1 and xr.global_ordinal() == 0 and xr.local_ordinal() == 0
    assert xr.process_index() == 0 and xr.process_count() == 1 and xr.host_index() == 0
    assert xr.global_runtime_device_count() == lx.global_device_count()
    assert xr.addressable_device_count() == lx.device_count() == xr.local_device_count()
    # The runtime exists now (it reads PJRT_DEVICE once); the name follows the variable.
    monkeypatch.setenv("PJRT_DEVICE", "gpu")
    assert xr.device_type() == "CUDA"
    monkeypatch.setenv("PJRT_DEVICE", "TPU")
    assert xr.device_type() == "TPU"
    # Before the runtime starts, set_device_type sets the variable (started, it may only
    # name the platform it runs on: test_internals).
    monkeypatch.setattr(torch_xla._XLAC, "_xla_runtime_is_initialized", lambda: False)
    xr.set_device_type("CPU")
    assert os.environ["PJRT_DEVICE"] == "CPU" and xr.device_type() == "CPU"


def test_no_default_device_leaves_the_device_type_unchosen_until_a_device_is_used(
    monkeypatch,
):
    torch.ones(1, device=torch_xla.device()).cpu()  # the runtime has started: on the CPU
    monkeypatch.delenv("PJRT_DEVICE", raising=False)
    monkeypatch.setenv("PJRT_SELECT_DEFAULT_DEVICE", "0")
    assert xr.device_type() == "CPU"
    monkeypatch.setattr(torch_xla._XLAC, "_xla_runtime_is_initialized", lambda: False)
    assert xr.device_type() is None
    monkeypatch.setenv("PJRT_SELECT_DEFAULT_DEVICE", "1")
    assert xr.device_type() == "CPU"


def test_use_spmd_makes_world_size_one(monkeypatch):
    import torch_xla.runtime as runtime

    monkeypatch.setattr(runtime, "_SPMD", [False])
    # setenv first: delenv of an unset variable records nothing, so the "1" use_spmd
    # writes would outlive the test and reach every child process this worker starts
    # (tests/_mesh2d_worker.py then saw a world of one)
    monkeypatch.setenv("XLA_USE_SPMD", "0")
    monkeypatch.delenv("XLA_USE_SPMD")
    assert not xr.is_spmd()
    xr.use_spmd()
    assert xr.is_spmd() and xr.world_size() == 1
    assert os.environ["XLA_USE_SPMD"] == "1"  # as torch_xla, for child processes


def test_initialize_cache_keeps_compiled_programs_across_processes(tmp_path):
    script = textwrap.dedent(
        f"""
        import json, torch, torch_xla, torch_xla.runtime as xr, torch_xla.debug.metrics as met
        xr.initialize_cache({str(tmp_path / "cache")!r})
        x = torch.arange(64.0, device=torch_xla.device()).reshape(8, 8)
        value = ((x @ x).sin().sum()).item()
        names = ("PersistentCacheHit", "PersistentCacheMiss", "UncachedCompile")
        print(json.dumps({{"value": value, **{{n: met.counter_value(n) or 0 for n in names}}}}))
        """
    )
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert any((tmp_path / "cache").iterdir())
    # The first process compiles and writes every program; the second reads them all.
    assert first["PersistentCacheMiss"] == first["UncachedCompile"] > 0, first
    assert first["PersistentCacheHit"] == 0, first
    assert second["PersistentCacheMiss"] == 0, second
    assert second["PersistentCacheHit"] == first["UncachedCompile"], (first, second)
    assert second["value"] == first["value"]


def test_metrics_count_compiles_and_executions_under_torch_xla_names():
    met.clear_all()
    x = torch.randn(5, 5).to(torch_xla.device())
    (x * 3).sum().cpu()
    names = met.counter_names()
    assert "UncachedCompile" in names or "CachedCompile" in names
    assert "ExecuteTime" in met.metric_names() and "CompileTime" in met.metric_names()
    count, total, samples = met.metric_data("ExecuteTime")
    assert count >= 1 and total >= 0 and len(samples) >= 1
    assert met.counter_value("NoSuchCounter") is None and met.metric_data("NoSuch") is None
    assert "ExecuteTime" in met.metrics_report()
    assert isinstance(met.short_metrics_report(), str)
    assert isinstance(met.short_metrics_report(["CachedCompile"], ["ExecuteTime"]), str)
    met.clear_all()
    assert met.counter_value("UncachedCompile") is None


def test_transfers_report_their_bytes_and_tensor_to_data_its_time():
    met.clear_all()
    x = torch.ones(4, 8).to(torch_xla.device())  # 128 bytes in
    (x + 1).cpu()  # 128 bytes out
    assert met.metric_data("InboundData")[:2] == (1, 128)
    assert met.metric_data("OutboundData")[:2] == (1, 128)
    count, total_ns, _ = met.metric_data("TensorToData")
    assert (count, total_ns) == met.metric_data("TransferToDeviceTime")[:2]
    assert "TensorToData" in met.metric_names()
    report = met.metrics_report()
    assert "Metric: OutboundData\n  TotalSamples: 1\n  Accumulator: 128B" in report
    assert "Metric: TensorToData" in report
    assert met.counter_value("CreateCompileHandles") == 1  # the add
    assert met.counter_value("CreateDataHandles") == 2  # the upload, the add's result
    met.clear_metrics()
    assert "TensorToData" not in met.metrics_report() and met.metric_names() == []


def test_in_place_update_reports_its_alias_and_the_short_report_names_it():
    met.clear_all()
    x = torch.zeros(3).to(torch_xla.device())
    x += 2  # the program's output takes x's buffer
    torch_xla.sync()
    assert met.metric_data("InputOutputAliasCount")[:2] == (1, 1)
    short = met.short_metrics_report(["CreateCompileHandles"], ["InputOutputAliasCount"])
    assert "Counter: CreateCompileHandles" in short and "InputOutputAliasCount" in short
    assert "CompileTime" not in short


def test_a_read_of_one_element_counts_as_local_scalar_dense():
    met.clear_all()
    t = torch.tensor(3.0).to(torch_xla.device()) * 2
    if t:  # a host read, as .item()
        t += float(t)
    assert met.counter_value("aten::_local_scalar_dense") == 2
    assert met.executed_fallback_ops() == ["aten::_local_scalar_dense"]
    assert "Counter: aten::_local_scalar_dense\n  Value: 2" in met.short_metrics_report()


def test_batch_norm_counts_as_native_batch_norm():
    met.clear_all()
    bn = torch.nn.BatchNorm1d(4).to(torch_xla.device())
    bn(torch.randn(8, 4).to(torch_xla.device()))
    assert met.counter_value("xla::native_batch_norm") == 1


@torch.library.custom_op("torch_xla_compat_test::twice", mutates_args=())
def _twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@_twice.register_fake
def _(x):
    return torch.empty_like(x)


def test_executed_fallback_ops_lists_the_ops_that_ran_on_the_cpu():
    met.clear_all()
    assert met.executed_fallback_ops() == []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = _twice(torch.ones(3, device=torch_xla.device()))
    torch.testing.assert_close(out.cpu(), torch.full((3,), 2.0))
    assert met.executed_fallback_ops() == ["torch_xla_compat_test::twice"]
    assert met.counter_value("torch_xla_compat_test::twice") == 1


def _trace_events(directory) -> list:
    """The events of the one trace written under ``directory`` (its .xplane.pb, as
    tests/test_profiling.py reads lazax's own): (name, start_ns, end_ns, stats)."""
    (path,) = directory.rglob("*.xplane.pb")
    return [
        (e.name, e.start_ns, e.start_ns + e.duration_ns, dict(e.stats))
        for plane in ProfileData.from_file(str(path)).planes
        for line in plane.lines
        for e in line.events
    ]


def test_trace_and_step_trace_annotate_and_step_trace_marks_the_step(tmp_path):
    dev = torch_xla.device()
    before = (met.metric_data("ExecuteTime") or (0,))[0]
    xp.start_trace(str(tmp_path))
    try:
        with xp.StepTrace("train_step", step_num=3):
            with xp.Trace("forward"):
                y = torch.ones(4, device=dev) * 3

        @xp.trace_me("helper")
        def helper(v):
            return v + 1

        z = helper(y)
    finally:
        xp.stop_trace()
    assert met.metric_data("ExecuteTime")[0] == before + 1  # StepTrace synced
    torch.testing.assert_close(z.cpu(), torch.full((4,), 4.0))
    events = _trace_events(tmp_path)
    spans = {name: (start, end, stats) for name, start, end, stats in events}
    (step_start, step_end, step_stats) = spans["train_step"]
    assert step_stats.get("step_num") == 3
    forward_start, forward_end, _ = spans["forward"]
    assert step_start <= forward_start <= forward_end <= step_end  # nested in the step
    syncs = [(s, e) for name, s, e, _ in events if name.startswith("lazax::sync")]
    assert any(step_start <= s <= e <= step_end for s, e in syncs), syncs  # at its end
    assert spans["helper"][0] >= step_end


def test_trace_captures_this_process_for_a_duration(tmp_path):
    x = torch.ones(4, device=torch_xla.device())
    stop = threading.Event()

    def work():  # this process's activity while the capture runs
        while not stop.is_set():
            with xp.Trace("during_capture"):
                (x * 2).sum().item()
            time.sleep(0.005)

    worker = threading.Thread(target=work)
    worker.start()
    try:
        xp.trace("localhost:9012", str(tmp_path), duration_ms=200)
    finally:
        stop.set()
        worker.join()
    names = {name for name, *_ in _trace_events(tmp_path)}
    assert "during_capture" in names
    assert any(name.startswith("lazax::execute") for name in names), sorted(names)


def test_start_server_starts_jax_profiler_server():
    if sys.platform != "linux":
        pytest.skip("linux only")
    with socket.socket() as probe:  # a free port
        probe.bind(("localhost", 0))
        port = probe.getsockname()[1]
    server = xp.start_server(port)
    assert server is not None
