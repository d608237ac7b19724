"""Fault injection: a failed compile, execution or transfer reaches the user at the call
that waits on it, loses nothing, and the next step runs normally; the same for a
Python exception raised by the user inside compile() or a dynamo-compiled function."""

import copy

import pytest
import torch

import lazax.dynamo  # noqa: F401
import lazax.executor as lx_exec
import lazax.modes as lx
from benchmarks.models import MLP, make_batch

from .test_training import _mlp_step

DEV = lx.device()
RUNTIME = lx_exec.EXECUTOR.runtime


def _state():
    ex = lx_exec.EXECUTOR
    return ex.eager, ex.allow_execution, ex.graph_name, ex.graph_count_session, ex.capture_guard


@pytest.mark.parametrize("stage", ["compile", "execute"])
def test_a_failed_training_sync_loses_no_step(stage):
    torch.manual_seed(0)
    ref = MLP(8, 16, 3)
    model = copy.deepcopy(ref).to(DEV)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(4):
        x, y = make_batch(16, 8, 3, step)
        _mlp_step(ref, ref_opt, x, y)
        _mlp_step(model, opt, x.to(DEV), y.to(DEV))
        if step == 1:
            lx_exec.EXECUTOR.reset_cache()  # so that this sync compiles as well as executes
            RUNTIME.fail_next(stage, RuntimeError(f"injected {stage} failure"))
            with pytest.raises(RuntimeError, match=f"injected {stage} failure"):
                lx.sync()
            # Every parameter still reads back (the failed step's work is still pending).
            for p in model.parameters():
                assert torch.isfinite(p.cpu()).all()
        lx.sync()
    for p_ref, p in zip(ref.parameters(), model.parameters()):
        torch.testing.assert_close(p.cpu(), p_ref.detach(), rtol=1e-5, atol=1e-6)


def test_failed_transfers_raise_at_the_call_and_change_nothing():
    x_cpu = torch.randn(5)
    RUNTIME.fail_next("to_device", RuntimeError("injected to_device failure"))
    with pytest.raises(RuntimeError, match="injected to_device failure"):
        x_cpu.to(DEV)
    x = x_cpu.to(DEV)
    y = x * 3.0
    RUNTIME.fail_next("to_host", RuntimeError("injected to_host failure"))
    with pytest.raises(RuntimeError, match="injected to_host failure"):
        y.cpu()
    torch.testing.assert_close(y.cpu(), x_cpu * 3.0)
    torch.testing.assert_close(x.cpu(), x_cpu)


def test_a_failed_dynamo_execution_leaves_buffers_and_runs_next_time():
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(4, 3, bias=False), torch.nn.BatchNorm1d(3))
    model = copy.deepcopy(ref).to(DEV)
    compiled = torch.compile(model, backend="lazax")
    x0 = torch.randn(8, 4)
    compiled(x0.to(DEV))  # traced and compiled
    ref(x0)
    stats = model[1].running_mean.cpu()
    x1 = torch.randn(8, 4)
    RUNTIME.fail_next("execute", RuntimeError("injected execute failure"))
    with pytest.raises(RuntimeError, match="injected execute failure"):
        compiled(x1.to(DEV))
    torch.testing.assert_close(model[1].running_mean.cpu(), stats)
    out = compiled(x1.to(DEV))
    torch.testing.assert_close(out.cpu(), ref(x1).detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(model[1].running_mean.cpu(), ref[1].running_mean)
    assert _state()[4] is None


def test_a_user_exception_inside_compile_restores_state_and_keeps_pending_work():
    before = _state()
    x = torch.randn(4).to(DEV)
    pending = x * 2.0  # work queued before the region

    @lx.compile(name="failing_step")
    def step(t):
        t = t + 1.0
        raise ValueError("user error inside the region")

    with lx.eager_mode_context(True):
        with pytest.raises(ValueError, match="user error inside the region"):
            step(x)
        assert lx.is_eager_mode()
    assert _state() == before
    torch.testing.assert_close(pending.cpu(), x.cpu() * 2.0)


def test_a_user_exception_inside_a_dynamo_function_restores_state():
    torch._dynamo.reset()

    def fn(t):
        t = torch.relu(t) * 2.0
        if t.shape[0] == 3:
            raise ValueError("user error inside torch.compile")
        return t

    compiled = torch.compile(fn, backend="lazax")
    before = _state()
    with lx.eager_mode_context(True):
        with pytest.raises(ValueError, match="user error inside torch.compile"):
            compiled(torch.randn(3).to(DEV))
        assert lx.is_eager_mode()
        ok = compiled(torch.ones(4).to(DEV))
    assert _state() == before
    torch.testing.assert_close(ok.cpu(), torch.full((4,), 2.0))
