"""The programs lazax hands XLA, compared with what pure JAX hands it for the same
model (``benchmarks.programs``): the op-count tool itself, and lowerings pinned to
compile to JAX's program where the two should be the same."""

import jax
import jax.numpy as jnp
import pytest
import torch
import torch.nn.functional as F

import lazax.executor as lx_exec
import lazax.modes as lx
from benchmarks import programs
from benchmarks.workloads import make_workload

DEV = lx.device()

HLO = """HloModule jit_fn, entry_computation_layout={(f32[4]{0})->(f32[4]{0}, s32[4]{0})}

%fused_computation (param_0: f32[4]) -> f32[4] {
  %param_0 = f32[4]{0} parameter(0)
  %constant.1 = f32[] constant(1)
  %broadcast.1 = f32[4]{0} broadcast(%constant.1), dimensions={}
  ROOT %add.1 = f32[4]{0} add(%param_0, %broadcast.1)
}

ENTRY %main.5 (x.1: f32[4]) -> (f32[4], s32[4]) {
  %x.1 = f32[4]{0} parameter(0)
  %fusion = f32[4]{0} fusion(%x.1), kind=kLoop, calls=%fused_computation
  %pair = (f32[4]{0}, s32[4]{0}) custom-call(%fusion), custom_call_target="f"
  %gte = s32[4]{0} get-tuple-element(%pair), index=1
  ROOT %tuple = (f32[4]{0}, s32[4]{0}) tuple(%fusion, %gte)
}
"""


def test_op_counts_split_the_entry_from_the_fusions():
    counts = programs.op_counts(HLO)
    assert counts.entry == {
        "parameter": 1, "fusion": 1, "custom-call": 1, "get-tuple-element": 1, "tuple": 1,
    }  # fmt: skip
    assert counts.fused == {"parameter": 1, "constant": 1, "broadcast": 1, "add": 1}
    where, line = counts.lines["custom-call"][0]
    assert where == "entry" and line.startswith("%pair = (f32[4]{0}, s32[4]{0})")
    assert counts.lines["add"] == [("other", "ROOT %add.1 = f32[4]{0} add(%param_0, %broadcast.1)")]


def test_side_by_side_marks_only_the_rows_that_differ():
    rows = programs.side_by_side(
        programs.op_counts(HLO).entry, {"parameter": 1, "fusion": 2}, ("a", "b")
    )
    assert any(r.split() == ["fusion", "1", "2", "<"] for r in rows)
    assert any(r.split() == ["parameter", "1", "1"] for r in rows)
    assert rows[-1].split() == ["total", "5", "3"]


def _lazy_program(fn, *inputs):
    """The optimized HLO of ``fn``'s lazy graph, compiled alone."""
    lx.sync(wait=True)
    lx_exec.EXECUTOR.reset_cache()
    with torch.no_grad():
        out = fn(*(t.to(DEV) for t in inputs))
        lx.sync_tensors([out], wait=True)
    (key,) = list(lx_exec.EXECUTOR.cache.keys())
    return lx_exec.EXECUTOR.cache.peek(key).as_text(), out


def test_max_pool_whose_indices_nobody_reads_compiles_to_jaxs_max_window():
    # torch routes F.max_pool2d through max_pool2d_with_indices; when the indices are
    # dropped (inference), the program must be JAX's plain max window, not the
    # pairwise (value, index) reduction the backward needs.
    x = torch.randn(4, 3, 8, 8)
    text, out = _lazy_program(lambda t: F.max_pool2d(t, 2), x)
    torch.testing.assert_close(out.cpu(), F.max_pool2d(x, 2))

    def twin(a):
        return jax.lax.reduce_window(a, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")

    theirs = jax.jit(twin).lower(jnp.asarray(x.numpy())).compile().as_text()
    ours_counts, their_counts = programs.op_counts(text), programs.op_counts(theirs)
    assert ours_counts.fused == their_counts.fused
    assert ours_counts.entry == their_counts.entry


def test_max_pool_keeps_torchs_nan_padding_and_tie_rules():
    x = torch.randn(2, 2, 5, 5)
    x[0, 0, 1, 1] = float("nan")
    x[0, 1, 0, 0] = x[0, 1, 0, 2] = float("nan")  # two NaNs in one window: the last wins
    x[1, 1] = float("-inf")
    x[1, 0, :2, :3] = 0.0
    x[1, 0, 0, 0] = -0.0  # a tie of zeros: the first one's index
    for kwargs in ({"padding": 1}, {"ceil_mode": True}, {"dilation": 2}, {}):
        text, out = _lazy_program(lambda t, kw=kwargs: F.max_pool2d(t, 3, 2, **kw), x)
        torch.testing.assert_close(out.cpu(), F.max_pool2d(x, 3, 2, **kwargs), equal_nan=True)
        values, indices = F.max_pool2d(x.to(DEV), 3, 2, return_indices=True, **kwargs)
        expected = F.max_pool2d(x, 3, 2, return_indices=True, **kwargs)
        lx.sync()  # one graph reads both outputs: the values are torch's, to a zero's sign
        got = values.cpu()
        torch.testing.assert_close(got, expected[0], equal_nan=True)
        numbers = ~torch.isnan(expected[0])
        assert torch.equal(torch.signbit(got[numbers]), torch.signbit(expected[0][numbers]))
        assert torch.equal(indices.cpu(), expected[1]), kwargs


def test_the_tool_compares_a_cnn_in_both_phases(capsys):
    work = make_workload("cnn", {"image": 8, "width": 4, "batch": 2})
    for phase in programs.PHASES:
        programs.compare(work, phase, opcodes=("reduce-window",), calls=2)
    out = capsys.readouterr().out
    assert "== cnn training (lazy): lazax's 1 program(s), summed, vs pure JAX's one" in out
    assert "== cnn inference (lazy): lazax's 1 program(s), summed, vs pure JAX's one" in out
    assert out.count("run alone: lazax") == 2
    inference = out[out.index("== cnn inference") :]
    assert "-- reduce-window in lazax:" in inference
    assert "-- reduce-window in jax:" in inference
    rows = [r.split() for r in inference.splitlines()]
    assert ["opcode", "lazax", "jax"] in rows
    assert any(r[:1] == ["total"] and len(r) == 3 for r in rows)


def test_the_tool_sums_the_programs_of_a_dynamo_step(capsys):
    work = make_workload("cnn", {"image": 8, "width": 4, "batch": 2})
    programs.compare(work, "training", calls=2, mode="dynamo")
    out = capsys.readouterr().out
    # torch.compile(loss): forward, backward, the loss's gradient seed and the lazy
    # optimizer update.
    assert "== cnn training (dynamo): lazax's 4 program(s), summed" in out
    times = out[out.index("run alone: lazax") :].split("(")[1].split(")")[0]
    assert len(times.split(" + ")) == 4
    with pytest.raises(ValueError, match="inference runs in"):
        programs.lazax_programs(work, "inference", "compile")


def test_program_text_is_the_pending_program_and_runs_nothing():
    x = torch.randn(4, 5)
    xl = x.to(DEV)
    lx.sync()
    y = (xl * 2.5).relu().sum(0)
    compiles = lx.metrics.counter_value("UncachedCompile") or 0
    executions = (lx.metrics.metric_data("ExecuteTime") or (0,))[0]
    hlo = lx.program_text([y])
    assert hlo.startswith("HloModule") and "multiply(" in hlo and "maximum(" in hlo
    assert "f32[4,5]{1,0} parameter(0)" in hlo and "ROOT" in hlo
    assert "stablehlo.multiply" in lx.program_text([y], form="stablehlo")
    ir_text = lx.program_text([y], form="lazax")
    assert ir_text.startswith("# graph ") and "aten::relu" in ir_text
    assert ir_text.splitlines()[-1].startswith("return (")
    # a tensor that holds device data: a program that returns its input
    assert "f32[4,5]{1,0} parameter(0)" in lx.program_text([xl])
    assert (lx.metrics.counter_value("UncachedCompile") or 0) == compiles
    assert (lx.metrics.metric_data("ExecuteTime") or (0,))[0] == executions
    assert not lx.holds_device_data(y)
    torch.testing.assert_close(y.cpu(), (x * 2.5).relu().sum(0))
    with pytest.raises(ValueError, match="one of"):
        lx.program_text([y], form="optimized")
    with pytest.raises(TypeError, match="lazax tensors"):
        lx.program_text([x])


def test_program_text_of_a_view_leaves_the_base_free_to_donate():
    base = torch.arange(12.0).reshape(3, 4).to(DEV)
    view = base[1]
    lx.sync()
    base.mul_(2)
    assert "multiply(" in lx.program_text([view])
    donated = lx.metrics.counter_value("DonatedBuffers") or 0
    lx.sync()
    assert (lx.metrics.counter_value("DonatedBuffers") or 0) == donated + 1
    torch.testing.assert_close(view.cpu(), torch.arange(4.0, 8.0) * 2)
    with pytest.raises(TypeError, match="found float"):
        lx.program_text([1.0])
