"""torch.cond, while_loop and scan on lazax tensors: XLA's own cond, while and scan, equal
to the CPU in lazy mode, inside lx.compile(full_graph=True) (no host read of the
predicate) and under torch.compile(backend="lazax", fullgraph=True), with gradients where
torch has them."""

from __future__ import annotations

import pytest
import torch
from torch._higher_order_ops.scan import scan
from torch._higher_order_ops.while_loop import while_loop

import lazax.modes as lx
from lazax.executor import EXECUTOR

DEV = lx.device()


def counter(name: str) -> int:
    return lx.metrics.counter_value(name) or 0


def with_cond(x, w):
    def grow(x, w):
        return (x @ w).tanh(), x.sum()

    def shrink(x, w):
        return (x @ w).sigmoid() * 0.5, -x.sum()

    return torch.cond(x.sum() > 0, grow, shrink, (x, w))


def with_while(x):
    def keep_going(i, x):
        return i < 5

    def advance(i, x):
        return i + 1, x * 1.5 + 1

    return while_loop(keep_going, advance, (torch.zeros((), dtype=torch.int64, device=x.device), x))


def with_scan(x, w):
    def combine(carry, row):  # w: read from the enclosing scope, as torch allows
        carry = (carry + row) @ w
        return carry, carry.sum(-1)

    return scan(combine, torch.zeros(x.shape[1:], device=x.device), x)


def _run(where: str, fn, *args):
    """``fn(*args)`` on lazax, traced lazily, in lx.compile(full_graph=True), or under
    torch.compile; the outputs on the CPU."""
    moved = [a.detach().to(DEV).requires_grad_(a.requires_grad) for a in args]
    if where == "lazy":
        out = fn(*moved)
    elif where == "compile":
        out = lx.compile(fn, full_graph=True)(*moved)
    else:
        torch._dynamo.reset()
        out = torch.compile(fn, backend="lazax", fullgraph=True)(*moved)
    return out, moved


WHERE = ["lazy", "compile", "dynamo"]


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["true", "false"])
def test_cond_takes_the_branch_the_cpu_takes_and_its_gradient(where, sign):
    torch.manual_seed(0)
    x = (torch.rand(3, 4) * sign).requires_grad_()
    w = torch.randn(4, 4, requires_grad=True)
    expected = with_cond(x, w)
    (expected[0].sum() + expected[1]).backward()
    out, (xl, wl) = _run(where, with_cond, x, w)
    torch.testing.assert_close(out[0].detach().cpu(), expected[0].detach())
    torch.testing.assert_close(out[1].detach().cpu(), expected[1].detach())
    (out[0].sum() + out[1]).backward()
    torch.testing.assert_close(xl.grad.cpu(), x.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(wl.grad.cpu(), w.grad, rtol=1e-5, atol=1e-6)


def test_cond_is_one_program_for_both_predicates():
    w = torch.randn(4, 4).to(DEV)
    x = torch.rand(3, 4)
    signs = (1.0, -1.0, 1.0)
    inputs = [(x * sign).to(DEV) for sign in signs]
    lx.sync(wait=True)
    # Earlier tests compiled these shapes: with their programs kept, a cond that compiled
    # one program per branch would compile nothing here either.
    EXECUTOR.reset_cache()
    compiles = []
    for xl, sign in zip(inputs, signs):
        before = counter("UncachedCompile")
        out = with_cond(xl, w)[0]
        # Both branches in the program, chosen on the device: one case, two matmuls.
        program = lx.program_text([out], form="stablehlo")
        assert program.count('"stablehlo.case"') == 1, program
        assert program.count("stablehlo.dot_general") == 2, program
        out = out.cpu()
        compiles.append(counter("UncachedCompile") - before)
        torch.testing.assert_close(out, with_cond(x * sign, w.cpu())[0])
    assert compiles == [1, 0, 0], compiles


@pytest.mark.parametrize("where", WHERE)
def test_while_loop_equals_the_cpu(where):
    x = torch.randn(2, 3)
    i, expected = with_while(x)
    out, _ = _run(where, with_while, x)
    assert out[0].cpu().item() == i.item() == 5
    torch.testing.assert_close(out[1].cpu(), expected)


@pytest.mark.parametrize("where", WHERE)
def test_scan_equals_the_cpu_with_gradients(where):
    torch.manual_seed(1)
    x = torch.randn(5, 3, requires_grad=True)
    w = (torch.randn(3, 3) * 0.5).requires_grad_()
    carry, ys = with_scan(x, w)
    (carry.sum() + ys.square().sum()).backward()
    (carry_l, ys_l), (xl, wl) = _run(where, with_scan, x, w)
    torch.testing.assert_close(carry_l.detach().cpu(), carry.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ys_l.detach().cpu(), ys.detach(), rtol=1e-5, atol=1e-6)
    (carry_l.sum() + ys_l.square().sum()).backward()
    torch.testing.assert_close(xl.grad.cpu(), x.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(wl.grad.cpu(), w.grad, rtol=1e-4, atol=1e-5)


def test_each_operator_takes_new_shapes_in_lazy_mode():
    # torch runs the operators through dynamo, which traces a second shape with its sizes
    # as inputs (automatic dynamic shapes): they reach lazax as numbers among the tensors
    for rows, cols in ((4, 3), (2, 5), (6, 2)):
        x = torch.randn(rows, cols)
        w = torch.randn(cols, cols)
        for fn, args in (
            (with_cond, (x, w)),
            (lambda x: with_while(x)[1], (x,)),
            (lambda x: scan(lambda c, r: (c + r, c * r), x.new_zeros(x.shape[1]), x), (x,)),
        ):
            expected = fn(*args)
            got = fn(*(a.to(DEV) for a in args))
            torch.testing.assert_close(
                [g.cpu() for g in got] if isinstance(got, (tuple, list)) else got.cpu(), expected
            )
