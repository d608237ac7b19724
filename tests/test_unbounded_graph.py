"""A loop that never syncs is told so once, instead of growing a graph without end."""

import warnings

import pytest
import torch

import lazax.executor as lx_exec
import lazax.modes as lx

DEV = lx.device()


def _grow(x, steps, sync):
    for _ in range(steps):
        x = torch.tanh(x) + 1.0
        if sync:
            lx.sync()
    return x


def test_a_loop_that_never_syncs_warns_once(monkeypatch):
    monkeypatch.setattr(lx_exec.EXECUTOR, "pending_depth_warning", 200)
    x = torch.zeros(3).to(DEV)
    with pytest.warns(RuntimeWarning, match=r"pending graph is now 201 ops deep") as caught:
        x = _grow(x, 300, sync=False)
    assert sum("pending graph" in str(w.message) for w in caught) == 1
    expected = _grow(torch.zeros(3), 300, sync=False)
    torch.testing.assert_close(x.cpu(), expected)


def test_a_loop_that_syncs_never_warns(monkeypatch):
    monkeypatch.setattr(lx_exec.EXECUTOR, "pending_depth_warning", 200)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        x = _grow(torch.zeros(3).to(DEV), 300, sync=True)
    torch.testing.assert_close(x.cpu(), _grow(torch.zeros(3), 300, sync=False))


def test_the_depth_is_the_longest_chain_of_pending_ops():
    x = torch.ones(2).to(DEV)
    lx.sync()
    y = (x * 2.0) + torch.exp(x)  # mul / exp are 1 deep, add 2
    assert lx_exec.ir_value(y).depth == 2
    lx.sync()
    assert lx_exec.ir_value(y).depth == 0  # synced: device data again
