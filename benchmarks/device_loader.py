"""A loader that needs 40 ms per batch, consumed by a ~40 ms training step: the plain
loop (load, move, step, one after another) against ``lx.DeviceLoader`` (the next
batches loaded and moved in a background thread while the step runs).

    python -m benchmarks.device_loader [--batches 24] [--load-ms 40] [--step-ms 40] [--decode]

The loader's work per batch is a sleep (I/O, or a decoder that releases the GIL), or
with ``--decode`` real host work (numpy decoding a compressed-looking buffer until the
time is spent). The step is an MLP's training step on lazax whose width is chosen so
that one steady step, read back with ``loss.item()``, takes about ``--step-ms``. Prints
both times and their ratio (the target is under 0.8: serial is load + step, the loader
hides most of the load).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import torch.nn as nn

import lazax.modes as lx

BATCH, FEATURES = 64, 256


class SlowBatches:
    """``batches`` (x, y) pairs, each taking ``load_s`` of the loader's time."""

    def __init__(self, batches: int, load_s: float, decode: bool) -> None:
        self.batches, self.load_s, self.decode = batches, load_s, decode

    def __len__(self) -> int:
        return self.batches

    def __iter__(self):
        g = torch.Generator().manual_seed(0)
        for _ in range(self.batches):
            start = time.perf_counter()
            if self.decode:
                raw = np.frombuffer(np.random.bytes(1 << 18), dtype=np.uint8)
                while time.perf_counter() - start < self.load_s:
                    raw = np.sort(raw ^ 0x5A)  # stands for decompressing and decoding
            else:
                time.sleep(self.load_s)
            x = torch.randn(BATCH, FEATURES, generator=g)
            yield x, x.sum(1, keepdim=True).tanh()


def _model(width: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(FEATURES, width),
        nn.ReLU(),
        nn.Linear(width, width),
        nn.ReLU(),
        nn.Linear(width, 1),
    ).to(lx.device())
    return model, torch.optim.SGD(model.parameters(), lr=1e-3)


def _step(model, opt, x, y) -> float:
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    lx.sync()
    return loss.item()  # waits for the step, as a loop that logs every loss does


def _step_seconds(width: int) -> float:
    model, opt = _model(width)
    x = torch.randn(BATCH, FEATURES).to(lx.device())
    y = torch.zeros(BATCH, 1).to(lx.device())
    for _ in range(3):  # compile, then steady
        _step(model, opt, x, y)
    start = time.perf_counter()
    for _ in range(5):
        _step(model, opt, x, y)
    return (time.perf_counter() - start) / 5


def calibrate(step_s: float) -> tuple[int, float]:
    """A width whose steady step takes about ``step_s`` (the step grows as width^2)."""
    width, took = 512, _step_seconds(512)
    for _ in range(3):
        width = max(64, int(width * (step_s / took) ** 0.5) // 64 * 64)
        took = _step_seconds(width)
        if abs(took - step_s) < 0.15 * step_s:
            break
    return width, took


def _train(batches, width: int, moved: bool) -> float:
    model, opt = _model(width)
    start = time.perf_counter()
    for x, y in batches:
        if not moved:
            x, y = x.to(lx.device()), y.to(lx.device())
        _step(model, opt, x, y)
    return time.perf_counter() - start


def measure(batches: int, load_s: float, step_s: float, decode: bool) -> dict:
    width, step = calibrate(step_s)
    _train(SlowBatches(3, 0.0, False), width, moved=False)  # both variants' graphs cached
    serial = _train(SlowBatches(batches, load_s, decode), width, moved=False)
    loader = lx.DeviceLoader(SlowBatches(batches, load_s, decode), prefetch=2)
    overlapped = _train(loader, width, moved=True)
    return {
        "width": width,
        "step_ms": 1e3 * step,
        "serial_s": serial,
        "device_loader_s": overlapped,
        "ratio": overlapped / serial,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=24)
    parser.add_argument("--load-ms", type=float, default=40.0)
    parser.add_argument("--step-ms", type=float, default=40.0)
    parser.add_argument("--decode", action="store_true", help="real host work, not a sleep")
    args = parser.parse_args()
    result = measure(args.batches, args.load_ms / 1e3, args.step_ms / 1e3, args.decode)
    print(
        f"loader {args.load_ms:.0f} ms/batch ({'decode' if args.decode else 'sleep'}), "
        f"step {result['step_ms']:.1f} ms (MLP width {result['width']}), "
        f"{args.batches} batches"
    )
    print(f"serial:        {result['serial_s']:.2f} s")
    print(f"DeviceLoader:  {result['device_loader_s']:.2f} s")
    print(f"ratio:         {result['ratio']:.2f}x (target < 0.8x)")


if __name__ == "__main__":
    main()
