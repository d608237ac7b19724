"""Two threads tracing at once: each thread's results are right (no graph corrupted)."""

import threading

import pytest
import torch

import lazax.modes as lx

DEV = lx.device()


def _work(seed: int, results: dict, errors: list) -> None:
    try:
        g = torch.Generator().manual_seed(seed)
        a_cpu, b_cpu = torch.randn(16, 16, generator=g), torch.randn(16, 16, generator=g)
        a, b = a_cpu.to(DEV), b_cpu.to(DEV)
        expected = a_cpu
        for step in range(60):
            a = torch.tanh(a @ b) + float(seed)
            expected = torch.tanh(expected @ b_cpu) + float(seed)
            if step % 7 == 0:
                lx.sync()
        results[seed] = (a.cpu(), expected)
    except Exception as err:  # reported by the main thread
        errors.append(err)


@pytest.mark.xfail(
    strict=False,
    reason="a race: in 1 of 6 full CI runs (2026-11-29) one thread's result carried the "
    "other's scalar addend (off by exactly 1.0 everywhere); under investigation (issue 9)",
)
def test_two_threads_tracing_at_once_each_get_their_results():
    results, errors = {}, []
    threads = [threading.Thread(target=_work, args=(s, results, errors)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for got, expected in results.values():
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
