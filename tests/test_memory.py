"""The memory API (``lx.memory_allocated`` and friends, shaped as ``torch.cuda``'s):
exact byte counts of known tensors, the peak of a step, reset; and what a training step
holds with donation on and off. On the CPU the figures are lazax's count of its live
device buffers (``memory_stats()["source"] == "lazax"``), with each execution's scratch
memory in the peak.
"""

import gc

import pytest
import torch
import torch.nn.functional as F

import lazax.executor as lx_exec
import lazax.modes as lx

DEV = lx.device()


def _settle():
    lx.sync(wait=True)
    gc.collect()


def test_known_tensors_are_counted_to_the_byte():
    _settle()
    start = lx.memory_allocated()
    x = torch.randn(256, 256).to(DEV)
    assert lx.memory_allocated() - start == 256 * 256 * 4
    y = torch.zeros(100, dtype=torch.int64, device=DEV)
    lx.sync()
    assert lx.memory_allocated() - start == 256 * 256 * 4 + 800
    del x
    assert lx.memory_allocated() - start == 800
    del y
    assert lx.memory_allocated() == start


def test_the_peak_of_a_step_and_its_reset():
    _settle()
    x = torch.randn(128, 128).to(DEV)
    lx.sync()
    lx.reset_peak_memory_stats()
    base = lx.memory_allocated()
    assert lx.max_memory_allocated() == base
    y = x * 2
    lx.sync()
    assert lx.memory_allocated() == base + 128 * 128 * 4
    # An elementwise op needs no scratch: its peak is its output on top of what was held.
    assert lx.max_memory_allocated() == base + 128 * 128 * 4
    del y
    assert lx.max_memory_allocated() == base + 128 * 128 * 4  # a peak stays
    lx.reset_peak_memory_stats()
    assert lx.max_memory_allocated() == base


def test_stats_and_info_have_torch_and_torch_xla_names():
    stats = lx.memory_stats()
    assert stats["source"] in ("lazax", "pjrt")
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak", "num_alloc"):
        assert key in stats
    assert stats["allocated_bytes.all.current"] == lx.memory_allocated()
    info = lx.memory_info(DEV)
    assert info["bytes_used"] == lx.memory_allocated("lazax:0")
    assert info["peak_bytes_used"] >= info["bytes_used"]
    assert lx.memory_allocated(0) == info["bytes_used"]


def test_a_device_that_is_not_lazax_is_refused():
    with pytest.raises(ValueError, match="Expected a lazax device"):
        lx.memory_allocated("cpu")
    with pytest.raises(RuntimeError, match="out of range"):
        lx.memory_allocated(lx.device_count())


def _state_heavy_step(donation: bool) -> tuple[int, int, int]:
    """(training state bytes, bytes held after a steady step, peak of that step), all
    above what was held before the model was built."""
    policy = lx_exec.EXECUTOR.donation
    saved = policy.enabled
    policy.enabled = donation
    try:
        _settle()
        start = lx.memory_allocated()
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(256, 256, bias=False),
            torch.nn.ReLU(),
            torch.nn.Linear(256, 256, bias=False),
        ).to(DEV)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x, y = torch.randn(2, 256).to(DEV), torch.randn(2, 256).to(DEV)

        def step():
            opt.zero_grad(set_to_none=True)
            F.mse_loss(model(x), y).backward()
            opt.step()
            lx.sync(wait=True)

        step()
        step()
        gc.collect()
        lx.reset_peak_memory_stats()
        step()
        gc.collect()
        weights = 2 * 256 * 256 * 4
        state = 4 * weights  # parameters, gradients, exp_avg, exp_avg_sq
        return state, lx.memory_allocated() - start, lx.max_memory_allocated() - start
    finally:
        policy.enabled = saved


def test_a_training_step_holds_its_state_once_with_donation():
    state, held, peak = _state_heavy_step(donation=True)
    small = 64 * 1024  # the batch, the loss, AdamW's step counters, activations
    assert state <= held < state + small
    # Parameters and both moments are written over: the peak is the state, plus the
    # new gradients while the old ones are already gone, plus the program's scratch
    # (XLA's temporaries: here under one weight matrix) and activations.
    assert peak < 1.25 * state
    state, held_off, peak_off = _state_heavy_step(donation=False)
    assert held_off == held  # what a step leaves behind does not depend on donation
    # Without donation the step holds the old and the new parameters and moments.
    assert peak_off >= state + 3 * 2 * 256 * 256 * 4


def test_out_of_memory_raises_torchs_error_and_keeps_every_tensor():
    x = torch.ones(3, device=DEV)
    one = torch.ones(1, device=DEV)
    lx.sync()
    x.add_(1)  # pending, and its buffer would be donated
    huge = one.expand(2**38) * 2  # a 1 TiB output
    with pytest.raises(torch.OutOfMemoryError, match="out of memory") as raised:
        lx.sync()
    message = str(raised.value)
    assert "every tensor keeps its value" in message and "1.00 TiB new" in message
    del huge
    torch.testing.assert_close(x.cpu(), torch.full((3,), 2.0))  # the smaller step runs
    torch.testing.assert_close(one.cpu(), torch.ones(1))


def test_an_injected_out_of_memory_names_the_graph():
    x = torch.ones(4, device=DEV)
    lx.sync()
    x.mul_(3)
    lx_exec.EXECUTOR.runtime.fail_next(
        "execute", RuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 16 bytes.")
    )
    with pytest.raises(
        torch.OutOfMemoryError, match=r"reads 2 inputs .*largest inputs: float32\[4\]"
    ):
        lx.sync()
    torch.testing.assert_close(x.cpu(), torch.full((4,), 3.0))


def test_wait_device_ops_waits_for_every_step_not_only_the_last_sync():
    x = torch.randn(256, 256).to(DEV)
    outs = []
    for _ in range(4):
        y = x
        for _ in range(8):
            y = torch.tanh(y @ x)
        outs.append(y)
        lx.sync()  # dispatched, not waited for
    lx.wait_device_ops()
    buffers = [lx_exec.storage_of(t).value.data for t in outs]
    assert all(b.is_ready() for b in buffers)
    torch.testing.assert_close(outs[0].cpu(), outs[-1].cpu())
