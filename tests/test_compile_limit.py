"""``lx.compile_limit(n)``: after warm-up, a new program raises at the call that would
compile it, in every mode, naming what changed; cached programs run freely, nothing
runs when it raises, and the limit ends with its block."""

from __future__ import annotations

import pytest
import torch

import lazax.modes as lx

DEV = lx.device()


def _counter(name: str) -> int:
    return lx.metrics.counter_value(name) or 0


def _step(x, w):
    return (x @ w).tanh().sum(-1)


@pytest.mark.parametrize("mode", ["lazy", "eager", "compile", "dynamo"])
def test_after_warm_up_a_new_shape_raises_naming_it_and_nothing_runs(mode):
    torch.manual_seed(0)
    # Shapes of this mode's own: the modes make the same programs, which stay cached.
    base = {"lazy": 3, "eager": 13, "compile": 23, "dynamo": 33}[mode]
    w = torch.randn(5, 7).to(DEV)
    if mode == "compile":
        run = lx.compile(_step, name=f"limited_{mode}")
    elif mode == "dynamo":
        torch._dynamo.reset()
        run = torch.compile(_step, backend="lazax", dynamic=False)
    else:
        run = _step

    def call(rows: int):
        x = torch.randn(rows, 5)
        out = run(x.to(DEV), w)
        return out.cpu(), _step(x, w.cpu())

    with lx.eager_mode_context(mode == "eager"):
        for rows in (base, base + 1):  # warm-up: both shapes compile
            call(rows)
        with lx.compile_limit(0):
            for rows in (base, base + 1, base):  # served from the cache
                got, expected = call(rows)
                torch.testing.assert_close(got, expected)
            kept = torch.arange(6.0).to(DEV)
            pending = kept * 2  # pending work, to be kept through the refusal
            before = _counter("CompileLimitExceeded")
            with pytest.raises(Exception) as raised:
                call(base + 3)
            # dynamo reports a backend's error inside its own (the text is kept)
            text = str(raised.value)
            assert "compile_limit(0)" in text and "keeps its value" in text, text
            assert _counter("CompileLimitExceeded") == before + 1
        torch.testing.assert_close(pending.cpu(), torch.arange(6.0) * 2)
        # The block is over: the new shape compiles and is right.
        got, expected = call(base + 3)
        torch.testing.assert_close(got, expected)


def test_the_error_names_the_input_that_changed():
    w = torch.randn(5, 7).to(DEV)
    step = lx.compile(_step, name="limited_named")

    def serve(rows):  # one call site, as a serving loop has
        return step(torch.randn(rows, 5).to(DEV), w).cpu()

    serve(41)
    with lx.compile_limit(0), pytest.raises(lx.CompileLimitExceeded) as raised:
        serve(48)
    text = str(raised.value)
    assert "limited_named" in text and "(41, 5)" in text and "(48, 5)" in text, text
    # The refused compile recorded nothing: outside the block the same change is reported
    # against the program compiled before it.
    serve(48)
    last = lx.metrics.recompile_reports()[-1]
    assert "limited_named" in last and "(41, 5)" in last and "(48, 5)" in last, last


def test_a_limit_counts_the_programs_it_lets_compile_and_blocks_nest():
    x = torch.ones(3).to(DEV)
    with lx.compile_limit(2) as _:
        (x * 2 + torch.ones(11, 1, device=DEV)).cpu()
        (x * 2 + torch.ones(12, 1, device=DEV)).cpu()
        with pytest.raises(lx.CompileLimitExceeded, match=r"compile_limit\(2\), and 2"):
            (x * 2 + torch.ones(13, 1, device=DEV)).cpu()
        with lx.compile_limit(5):  # the outer block still counts what compiles here
            with pytest.raises(lx.CompileLimitExceeded, match=r"compile_limit\(2\)"):
                (x * 2 + torch.ones(14, 1, device=DEV)).cpu()
    (x * 2 + torch.ones(13, 1, device=DEV)).cpu()  # outside: compiles


@pytest.mark.parametrize("bad", [-1, 1.5, True, None])
def test_a_limit_is_a_count(bad):
    with pytest.raises(ValueError, match="count of programs"):
        with lx.compile_limit(bad):
            pass
