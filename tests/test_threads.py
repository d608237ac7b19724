"""Several threads tracing at once: each thread's results are right (no graph corrupted).

The race these pin (found 2026-11-29, one CI run in six): ``t.to(device)`` first makes
an empty lazax tensor (pending IR) and then writes the upload into it. A ``sync()`` in
another thread could take that storage between the two steps, run the ``empty`` graph,
and hand its result back after the upload was written, so the tensor read as zeros.
A sync now keeps a result only if the storage still holds the IR it ran.
"""

import sys
import threading

import pytest
import torch

import lazax.executor as lx_exec
import lazax.modes as lx

DEV = lx.device()


@pytest.fixture
def frequent_thread_switches():
    """Switch threads every microsecond (CPython's default is 5 ms), so that the
    interleavings a real program meets once a day happen within the test."""
    saved = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(saved)


def _work(seed: int, results: dict, errors: list) -> None:
    try:
        g = torch.Generator().manual_seed(seed)
        a_cpu, b_cpu = torch.randn(16, 16, generator=g), torch.randn(16, 16, generator=g)
        a, b = a_cpu.to(DEV), b_cpu.to(DEV)
        expected = a_cpu
        for step in range(40):
            a = torch.tanh(a @ b) + float(seed)
            expected = torch.tanh(expected @ b_cpu) + float(seed)
            if step % 7 == 0:
                lx.sync()
        results[seed] = (a.cpu(), expected)
    except Exception as err:  # reported by the main thread
        errors.append(err)


@pytest.mark.parametrize("eager", [False, True], ids=["lazy", "eager"])
def test_threads_tracing_at_once_each_get_their_results(eager, frequent_thread_switches):
    with lx.eager_mode_context(eager):
        for _ in range(4):
            results, errors = {}, []
            threads = [threading.Thread(target=_work, args=(s, results, errors)) for s in (1, 2, 3)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert errors == []
            assert sorted(results) == [1, 2, 3]
            for got, expected in results.values():
                torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


def test_a_sync_never_overwrites_a_write_made_while_its_graph_ran():
    """The race above, made deterministic: the write lands from a graph hook, i.e.
    after the sync collected the storage and before it hands the result back."""
    x = torch.empty(4, 4, device=DEV)  # pending IR until something writes it
    y = torch.ones(3, device=DEV) * 2.0  # something else for the sync to run
    values = torch.arange(16.0).reshape(4, 4)
    written = []

    def write_meanwhile(name, graph):
        if not written:
            written.append(True)
            x.copy_(values)

    lx_exec.EXECUTOR.graph_hooks.append(write_meanwhile)
    try:
        lx.sync()
    finally:
        lx_exec.EXECUTOR.graph_hooks.remove(write_meanwhile)
    assert written == [True]
    torch.testing.assert_close(x.cpu(), values)
    torch.testing.assert_close(y.cpu(), torch.full((3,), 2.0))


def test_a_sync_never_overwrites_an_in_place_write_through_a_view():
    """Same, for a pending tensor written in place through a view mid-sync: the write's
    IR reads the value the sync computed, so both the sync's work and the write stay."""
    base = torch.zeros(2, 3, device=DEV) + 1.0
    values = torch.tensor([7.0, 8.0, 9.0])

    def write_meanwhile(name, graph):
        lx_exec.EXECUTOR.graph_hooks.remove(write_meanwhile)
        base[1].copy_(values.to(DEV))

    lx_exec.EXECUTOR.graph_hooks.append(write_meanwhile)
    try:
        lx.sync()
    finally:
        if write_meanwhile in lx_exec.EXECUTOR.graph_hooks:
            lx_exec.EXECUTOR.graph_hooks.remove(write_meanwhile)
    torch.testing.assert_close(base.cpu(), torch.tensor([[1.0, 1.0, 1.0], [7.0, 8.0, 9.0]]))


def test_backward_is_traced_on_the_thread_that_calls_it(monkeypatch):
    """torch runs an accelerator's backward in a worker thread of its own; lazax turns
    that off for the thread that imported it, so that no backward op hands the GIL to
    another thread (a quarter of a small model's step). Another thread keeps torch's
    default and is still right."""
    seen = []
    dispatch = lx_exec.LazyTensor.__dict__["__torch_dispatch__"].__func__

    def recording(cls, func, types, args=(), kwargs=None):
        seen.append(threading.get_ident())
        return dispatch(cls, func, types, args, kwargs)

    def grad_of_square(out):
        x = torch.arange(4.0).to(DEV).requires_grad_()
        (x * x).sum().backward()
        out.append(x.grad.cpu())

    monkeypatch.setattr(lx_exec.LazyTensor, "__torch_dispatch__", classmethod(recording))
    results = []
    grad_of_square(results)
    assert set(seen) == {threading.get_ident()}
    other = threading.Thread(target=grad_of_square, args=(results,))
    other.start()
    other.join()
    monkeypatch.undo()
    expected = 2 * torch.arange(4.0)
    torch.testing.assert_close(results[0], expected)
    torch.testing.assert_close(results[1], expected)
