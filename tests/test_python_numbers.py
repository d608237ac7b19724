"""Python numbers in traced graphs: lifted out of the program (a changed value never
recompiles) and packed into one argument per dtype (a program with thousands of
numbers compiles as fast as one without: XLA is slow with thousands of parameters).
torch on the CPU is the oracle for every value."""

from __future__ import annotations

import torch

import lazax.modes as lx
from lazax.executor.testing import null_runtime

DEV = lx.device()


def counter(name: str) -> int:
    return lx.metrics.counter_value(name) or 0


def _chain(y, numbers):
    for k in range(0, len(numbers), 2):
        y = y * numbers[k] + numbers[k + 1]
    return y


def test_a_long_chain_of_numbers_is_one_packed_argument_per_dtype():
    numbers = [1.0 + (k + 1) / 1000 for k in range(400)]
    with null_runtime() as runtime:
        x = torch.ones(8, 8, device=DEV)
        i = torch.arange(8, device=DEV)
        lx.sync()
        kept = [_chain(x, numbers), (i * 3 + 7).sum()]  # kept: pending until the sync
        lx.sync()
        (program,) = runtime.programs[-1:]
        # The two tensors, then one float32 pack of 400 numbers and one int64 pack.
        assert sorted(program.arg_specs) == sorted(
            [((8, 8), "float32"), ((8,), "int64"), ((400,), "float32"), ((2,), "int64")]
        )
        compiled = len(runtime.programs)
        kept = [_chain(x, [v + 0.5 for v in numbers]), (i * 5 + 9).sum()]
        lx.sync()
        assert len(runtime.programs) == compiled  # new numbers, same program
        del kept


def test_packed_numbers_of_every_dtype_give_torchs_values():
    torch.manual_seed(0)
    f32, f64 = torch.randn(5), torch.randn(5, dtype=torch.float64)
    i64, bf16 = torch.arange(5), torch.randn(5, dtype=torch.bfloat16)
    b = torch.tensor([True, False, True, False, True])

    def program(f32, f64, i64, bf16, b, k):
        return (
            f32 * (2.5 + k) - 3.25,
            f64 * (0.125 * k) + 7.5,
            i64 * (3 + k) + 11,
            bf16 * 1.5 + k,
            b & (k % 2 == 0),
            torch.where(b, f32, 4.5 + k),
        )

    before = counter("UncachedCompile")
    for k in (3, 5, 7):  # never 0 or +-1 (those stay in the program), the same bool
        cpu = program(f32, f64, i64, bf16, b, k)
        args = [t.to(DEV) for t in (f32, f64, i64, bf16, b)]
        lazy = program(*args, k)
        lx.sync()
        for got, want in zip(lazy, cpu):
            torch.testing.assert_close(got.cpu(), want)
    assert counter("UncachedCompile") - before == 1  # the calls differ only in numbers


def test_a_changed_learning_rate_reuses_the_program_and_trains_as_on_cpu():
    torch.manual_seed(0)
    ref = torch.nn.Linear(4, 3)
    model = torch.nn.Linear(4, 3)
    model.load_state_dict(ref.state_dict())
    model = model.to(DEV)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(6, 4), torch.randn(6, 3)
    compiles = []
    for step in range(5):
        for group in (*ref_opt.param_groups, *opt.param_groups):
            group["lr"] = 0.1 / (step + 1)
        before = counter("UncachedCompile")
        for m, o, xx, yy in ((ref, ref_opt, x, y), (model, opt, x.to(DEV), y.to(DEV))):
            o.zero_grad()
            torch.nn.functional.mse_loss(m(xx), yy).backward()
            o.step()
        lx.sync()
        compiles.append(counter("UncachedCompile") - before)
    assert compiles[3:] == [0, 0]
    for p_ref, p in zip(ref.parameters(), model.parameters()):
        torch.testing.assert_close(p.cpu(), p_ref.detach(), rtol=1e-6, atol=1e-7)
