"""Foreach ops over the rows of stacked storages run once on the storages
(``dispatch.foreach_rows``): values equal to the CPU's, one op per storage in the graph,
and the cases that must run row by row."""

from __future__ import annotations

import torch

import lazax.executor as lx_exec

DEV = lx_exec.device()


def _stack(rows: int = 5, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    cpu = torch.randn(rows, 3, 4, generator=g)
    whole = cpu.to(DEV)
    return cpu, whole, [whole[i] for i in range(rows)]


def _graph(tensors) -> str:
    return lx_exec.program_text(list(tensors), form="lazax")


def test_in_place_ops_over_every_row_run_once_on_the_storage():
    cpu, whole, rows = _stack()
    g_cpu, g_whole, g_rows = _stack(seed=1)
    lone_cpu = torch.randn(7)
    lone = lone_cpu.to(DEV)
    torch._foreach_mul_(rows + [lone], 0.5)
    torch._foreach_add_(rows + [lone], g_rows + [lone], alpha=2.0)
    torch._foreach_lerp_(rows, g_rows, 0.25)
    torch._foreach_div_(rows, [3.0] * len(rows))
    text = _graph([whole, lone])
    assert "select" not in text  # no op reads or writes a row on its own
    assert text.count("_foreach_mul.Scalar") == 1
    expected = torch.lerp(cpu * 0.5 + 2.0 * g_cpu, g_cpu, 0.25) / 3.0
    torch.testing.assert_close(whole.cpu(), expected)
    torch.testing.assert_close(lone.cpu(), lone_cpu * 0.5 + 2.0 * lone_cpu * 0.5)
    torch.testing.assert_close(rows[2].cpu(), expected[2])


def test_out_of_place_results_are_rows_of_one_result():
    cpu, whole, rows = _stack()
    roots = torch._foreach_sqrt(torch._foreach_abs(rows))
    text = _graph(roots)
    assert text.count("_foreach_abs") == 1 and text.count("_foreach_sqrt") == 1
    # Each result is a row of the one result: the op after it runs once too.
    torch._foreach_add_(roots, 1.0)
    for k, r in enumerate(roots):
        torch.testing.assert_close(r.cpu(), cpu[k].abs().sqrt() + 1.0)


def test_rows_that_do_not_cover_their_storage_run_row_by_row():
    cpu, whole, rows = _stack()
    part = rows[:3]  # not every row
    swapped = [rows[1], rows[0], *rows[2:]]  # out of order
    torch._foreach_mul_(part, 2.0)
    torch._foreach_add_(swapped, [float(k) for k in range(len(rows))])  # scalars differ
    expected = cpu.clone()
    expected[:3] *= 2.0
    for k, r in enumerate([1, 0, 2, 3, 4]):
        expected[r] += float(k)
    torch.testing.assert_close(whole.cpu(), expected)


def test_lists_whose_rows_differ_in_index_run_row_by_row():
    cpu, whole, rows = _stack()
    g_cpu, _, g_rows = _stack(seed=1)
    shifted = g_rows[1:] + g_rows[:1]  # row k of one storage against row k+1 of another
    torch._foreach_add_(rows, shifted)
    torch.testing.assert_close(whole.cpu(), cpu + g_cpu.roll(-1, 0))


def test_norms_stay_per_row():
    cpu, _, rows = _stack()
    norms = torch._foreach_norm(rows)
    for k, n in enumerate(norms):
        torch.testing.assert_close(n.cpu(), cpu[k].norm())
