"""Seeing what lazax does: its syncs, compiles, executions and reads are named spans in
jax's profiler and in torch.profiler; every compiled graph can be dumped (IR, StableHLO,
optimized HLO, and why it compiled); every compile after the first of a name is
explained, and compiles are counted by name; a wait that never ends is reported by the
watchdog. (Program names themselves: test_program_names.py.)"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import textwrap

import jax
import pytest
import torch
from jax.profiler import ProfileData

import lazax.modes as lx
from lazax.executor import EXECUTOR
from lazax.executor.profiling import profiling, span
from lazax.modes.testing import recompile_mark, recompile_reports_since

DEV = lx.device()
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _trace_events(directory) -> set[str]:
    (path,) = glob.glob(os.path.join(directory, "**", "*.xplane.pb"), recursive=True)
    names = set()
    for plane in ProfileData.from_file(path).planes:
        for line in plane.lines:
            names.update(event.name for event in line.events)
    return names


def _named_step():
    w = torch.randn(8, 8, device=DEV)

    def step(x):
        return (x @ w).relu().sum()

    return lx.compile(step, name="prof_step")


def test_a_jax_trace_names_the_step_and_its_phases(tmp_path):
    step = _named_step()
    x = torch.randn(4, 8).to(DEV)
    step(x)  # compiled before the trace: the trace shows steady steps
    lx.sync(wait=True)
    y = torch.randn(4, 8).to(DEV)
    lx.sync()
    with jax.profiler.trace(str(tmp_path)):
        for _ in range(3):
            step(x).item()
        (y * 2).sum().item()  # a lazy step: named where it synced
    names = _trace_events(tmp_path)
    assert {"lazax::sync prof_step", "lazax::execute prof_step"} <= names
    assert "PjitFunction(jit(prof_step))" in names  # the program itself, by name
    assert any(n.startswith("lazax::to_host () float32") for n in names)
    here = [n for n in names if n.startswith("lazax::execute test_profiling.py:")]
    assert here and here[0].endswith("test_a_jax_trace_names_the_step_and_its_phases")


def test_torch_profiler_shows_lazax_events_by_program():
    step = _named_step()
    x = torch.randn(4, 8).to(DEV)
    EXECUTOR.reset_cache()
    with torch.profiler.profile() as prof:
        step(x).item()  # a compile, then an execution
        step(x).item()
    keys = {e.key: e.count for e in prof.key_averages()}
    assert keys.get("lazax::compile prof_step") == 1
    assert keys.get("lazax::execute prof_step") == 2
    assert keys.get("lazax::sync prof_step") == 2


def test_with_no_profiler_a_span_is_one_shared_null_context():
    assert not profiling()
    assert span("execute", "a") is span("sync", lambda: pytest.fail("named for nothing"))


def test_graphs_compiled_in_a_block_are_dumped_with_why(tmp_path):
    @lx.compile(name="dumped")
    def step(x):
        return (x.sin() * 3.0).sum()

    with lx.dump_graphs(tmp_path):
        step(torch.randn(4).to(DEV))
        step(torch.randn(4).to(DEV))  # cached: nothing written
        step(torch.randn(6).to(DEV))
    step(torch.randn(7).to(DEV))  # after the block: not dumped
    records = [
        json.loads(line) for line in (tmp_path / "summary.jsonl").read_text().split("\n")[:-1]
    ]
    mine = [r for r in records if r["name"] == "dumped"]
    assert [r["seq"] for r in mine] == [records.index(r) for r in mine]
    assert len(mine) == 2
    assert mine[0]["why"] == "first compile of dumped"
    assert mine[1]["why"].startswith("recompile of dumped: input")
    assert "(4,) to (6,)" in mine[1]["why"]
    assert set(mine[0]["key"]) >= {"graph", "inputs", "device", "options", "versions"}
    files = mine[1]["files"]
    ir_text = (tmp_path / files["lazax"]).read_text()
    assert "aten::sin" in ir_text and "float32[6]" in ir_text
    assert "@jit_dumped" in (tmp_path / files["stablehlo"]).read_text()
    assert "HloModule jit_dumped" in (tmp_path / files["hlo"]).read_text()
    assert files["hlo"].startswith(f"{mine[1]['seq']:04d}-dumped")


def test_lazax_dump_dir_dumps_a_whole_run_named_by_where_it_synced(tmp_path):
    script = tmp_path / "train_script.py"
    script.write_text(
        textwrap.dedent(
            """
            import torch
            import lazax.modes as lx
            x = torch.ones(3).to(lx.device())
            print((x * 2 + 1).sum().item())
            """
        )
    )
    dumps = tmp_path / "dumps"
    env = {**os.environ, "LAZAX_DUMP_DIR": str(dumps), "PYTHONPATH": ROOT}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "9.0"
    names = [
        json.loads(line)["name"] for line in (dumps / "summary.jsonl").read_text().splitlines()
    ]
    assert any(n.startswith("train_script.py:5:") for n in names), names
    assert glob.glob(str(dumps / "*-train_script.py_5_*.hlo.txt"))


def test_eager_ops_and_replays_explain_their_recompiles():
    EXECUTOR.reset_cache()  # earlier tests may have compiled these op shapes already
    start = recompile_mark()
    with lx.eager_mode_context(True):
        torch.randn(3).to(DEV).cos()
        torch.randn(5).to(DEV).cos()
    reports = recompile_reports_since(start)
    assert any(r.startswith("recompile of aten::cos:") and "(3,) to (5,)" in r for r in reports)


def test_a_replay_compiled_again_after_an_eviction_says_why():
    fn = torch.compile(lambda t: (t.exp() + 1).sum(), backend="lazax", dynamic=False)
    x = torch.randn(3).to(DEV)
    EXECUTOR.reset_cache()  # so that this graph compiles here, not in an earlier test
    fn(x).item()
    EXECUTOR.reset_cache()
    start = recompile_mark()
    fn(x).item()
    reports = recompile_reports_since(start)
    assert len(reports) == 1 and reports[0].startswith("recompile of dynamo_"), reports
    assert "the same graph compiled again (the cache had evicted it" in reports[0]


def test_metrics_report_groups_compiles_by_name():
    @lx.compile(name="grouped_step")
    def step(x):
        return x.tanh().sum()

    step(torch.randn(2).to(DEV))
    step(torch.randn(3).to(DEV))
    count, seconds = lx.metrics.compiles_by_name()["grouped_step"]
    assert count >= 2 and seconds > 0
    report = lx.metrics.metrics_report()
    assert "Compiles by program name:" in report
    assert "  grouped_step: " in report.split("Compiles by program name:")[1]


def test_a_wait_past_the_watchdog_limit_is_reported_once_and_goes_on(tmp_path):
    script = tmp_path / "stuck.py"
    script.write_text(
        textwrap.dedent(
            """
            import time
            import jax, jax.numpy as jnp, numpy as np, torch
            import lazax.modes as lx

            def slow(x):
                def host(v):
                    time.sleep(2.5)
                    return np.asarray(v)
                return jax.pure_callback(host, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

            x = torch.ones(3).to(lx.device())
            step = lx.compile(lambda t: lx.call_jax(slow, t).sum(), name="slow_step")
            print(step(x).item())
            """
        )
    )
    env = {**os.environ, "LAZAX_WATCHDOG_S": "0.5", "PYTHONPATH": ROOT}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "3.0"
    told = [line for line in done.stderr.splitlines() if line.startswith("lazax watchdog:")]
    assert len(told) == 1, done.stderr
    assert "MainThread has waited" in told[0]
    assert "a program's dispatch" in told[0] or "a () float32 value to reach the host" in told[0]
    assert "the last program dispatched: slow_step" in told[0]


def test_a_bad_watchdog_setting_is_named():
    env = {**os.environ, "LAZAX_WATCHDOG_S": "ten minutes"}
    done = subprocess.run(
        [sys.executable, "-c", "import lazax.pjrt"], env=env, capture_output=True, text=True
    )
    assert done.returncode != 0
    assert "LAZAX_WATCHDOG_S must be a number of seconds" in done.stderr
