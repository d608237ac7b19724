"""The fast tier: what the executor decides, checked on a runtime that compiles and
computes nothing (``lazax.pjrt.NullRuntime``; see ``lazax.executor.testing.null_runtime``).

Values are zeros here, so these tests check decisions only: how many programs are
compiled and run, under which names, what is donated, what is reported. XLA's compiler
is made to fail for the whole module: nothing here may reach it.
"""

from __future__ import annotations

import jax
import pytest
import torch
import torch.nn.functional as F

import lazax.modes as lx
from benchmarks.models import MLP, make_batch
from benchmarks.models import classifier_step as _step
from lazax import pjrt
from lazax.executor.testing import null_runtime
from lazax.modes.testing import recompile_mark, recompile_reports_since

DEV = lx.device()


@pytest.fixture
def null(monkeypatch):
    def no_xla(*args, **kwargs):
        raise AssertionError("a test of the null tier reached XLA's compiler")

    with null_runtime() as runtime:
        monkeypatch.setattr(jax.stages.Lowered, "compile", no_xla)
        yield runtime


def counter(name: str) -> int:
    return lx.metrics.counter_value(name) or 0


def _training(batch: int = 16):
    torch.manual_seed(0)
    model = MLP(8, 16, 8).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    x, y = make_batch(batch, 8, 8, 0)
    return model, opt, x.to(DEV), y.to(DEV)


def test_both_runtimes_provide_the_interface():
    assert isinstance(pjrt.runtime(), pjrt.Runtime)
    assert isinstance(pjrt.NullRuntime(), pjrt.Runtime)


def test_a_lazy_training_step_is_one_program_compiled_once(null):
    model, opt, x, y = _training()
    for _ in range(2):  # the first step makes the moments; the second donates them
        _step(model, opt, x, y)
        lx.sync()
    compiled, executed = len(null.programs), null.executions
    for _ in range(3):
        _step(model, opt, x, y)
        lx.sync()
    assert len(null.programs) == compiled  # no new program
    assert null.executions == executed + 3  # one per step
    # The steady step writes over every parameter and both moments of each.
    assert len(null.programs[-1].donate) == 3 * len(list(model.parameters()))


def test_eager_mode_compiles_once_per_op_shape(null):
    x = torch.ones(4, device=DEV)
    lx.sync()
    start = len(null.programs)
    with lx.eager_mode_context(True):
        (x * 3 + 2).sigmoid()
        per_shape = len(null.programs) - start
        (x * 5 + 4).sigmoid()  # same shapes, new numbers (lifted, not baked): no compile
        assert len(null.programs) - start == per_shape
        y = torch.ones(6, device=DEV)  # the factory runs: one more program
        (y * 3 + 2).sigmoid()  # a new shape: one compile per op
        assert len(null.programs) - start == 2 * per_shape + 1
    names = [p.name for p in null.programs[start : start + per_shape]]
    assert names == ["aten::mul.Tensor", "aten::add.Tensor", "aten::sigmoid"]


def test_a_compiled_region_names_its_program(null):
    model, opt, x, y = _training()
    step = lx.compile(lambda: _step(model, opt, x, y), name="train_step")
    for _ in range(3):
        step()
    names = [p.name for p in null.programs]
    # One program: AdamW's moments, made in the first step, are made on the device as
    # inputs (dispatch.optimizer_state), so the first step is the steady step.
    assert names.count("train_step") == 1
    assert set(names) == {"train_step"}


def test_a_new_batch_size_recompiles_once_and_says_why(null):
    model, opt, x, y = _training(batch=16)
    small_x, small_y = x[:4].clone(), y[:4].clone()
    lx.sync()

    def train_twice(x, y):  # one place that syncs: the reports are per code location
        for _ in range(2):
            _step(model, opt, x, y)
            lx.sync()

    train_twice(x, y)  # the second step differs from the first (it has moments)
    mark = recompile_mark()
    train_twice(small_x, small_y)
    # The log is shared (other sites report too): this test's reports, by where.
    reports = [r for r in recompile_reports_since(mark) if "(in train_twice)" in r]
    assert len(reports) == 1, reports
    assert "changed from" in reports[0]
    assert "(16, 16)" in reports[0] and "(4, 16)" in reports[0]  # the first layer's output


def test_dynamo_traces_forward_and_backward_once(null):
    import lazax.dynamo  # noqa: F401  (the backend)

    torch._dynamo.reset()
    model, opt, x, y = _training()
    compiled = torch.compile(model, backend="lazax")
    before = counter("DynamoExtractCompiledGraph")
    for _ in range(3):
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(compiled(x), y).backward()
        lx.sync()
    assert counter("DynamoExtractCompiledGraph") - before == 2
    names = [p.name for p in null.programs if p.name.startswith("dynamo_")]
    assert len(names) == 2
    assert names[0].endswith("_forward") and names[1].endswith("_backward")
    torch._dynamo.reset()
