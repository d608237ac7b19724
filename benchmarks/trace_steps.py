"""Where a lazy training step's time goes, read from a jax profiler trace.

    python -m benchmarks.trace_steps [--model decoder_small|decoder] [--steps 5]

Trains the model in lazy mode for two warm-up steps, then traces ``--steps`` steps with
``jax.profiler.trace`` (Python tracing off, so the trace costs little) and reads the
trace back: per step, the wall time, lazax's spans (``lazax::sync``, of which
``lazax::execute`` is the program's dispatch; ``lazax::to_host``, the wait for the
loss), the rest of the host's time (tracing the step: torch, autograd, lazax's
dispatch) and the time XLA's threads were busy. A step is host-bound when the tracing
dominates and XLA sits idle between programs; device-bound when the host waits in
``lazax::to_host`` while XLA is busy. docs/profiling.md quotes its output.
"""

from __future__ import annotations

import argparse
import glob
import os
import tempfile
import time

import jax
import torch
from jax.profiler import ProfileData, ProfileOptions

import lazax.modes as lx

from .models import Decoder, DecoderConfig, lm_loss, make_tokens

_SIZES = {
    "decoder_small": DecoderConfig(vocab=256, d_model=64, n_heads=2, seq=32, batch=4),
    "decoder": DecoderConfig(),
}


def _union_ns(intervals: list[tuple[int, int]]) -> int:
    busy, end = 0, -1
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        busy += stop - max(start, end)
        end = stop
    return busy


def summarize(path: str, steps: int) -> dict[str, float]:
    """Milliseconds per step of each part (see the module docstring)."""
    spans = {"sync": 0, "execute": 0, "to_host": 0, "compile": 0}
    xla: list[tuple[int, int]] = []
    for plane in ProfileData.from_file(path).planes:
        for line in plane.lines:
            on_xla = line.name.startswith("tf_XLA")
            for event in line.events:
                if on_xla and event.duration_ns > 0:
                    start = int(event.start_ns)
                    xla.append((start, start + int(event.duration_ns)))
                elif event.name.startswith("lazax::"):
                    kind = event.name.split()[0].removeprefix("lazax::")
                    if kind in spans:
                        spans[kind] += event.duration_ns
    per_step = {kind: ns / 1e6 / steps for kind, ns in spans.items()}
    per_step["xla_busy"] = _union_ns(xla) / 1e6 / steps
    return per_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(_SIZES), default="decoder_small")
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    cfg = _SIZES[args.model]
    torch.manual_seed(0)
    dev = lx.device()
    model = Decoder(cfg).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = make_tokens(cfg, 0).to(dev)

    def step() -> float:
        opt.zero_grad(set_to_none=True)
        loss = lm_loss(model(tokens), tokens)
        loss.backward()
        opt.step()
        lx.sync()
        return loss.item()

    for _ in range(2):
        step()
    options = ProfileOptions()
    options.python_tracer_level = 0
    with tempfile.TemporaryDirectory() as where:
        start = time.perf_counter()
        with jax.profiler.trace(where, profiler_options=options):
            for _ in range(args.steps):
                step()
        wall = (time.perf_counter() - start) * 1e3 / args.steps
        (path,) = glob.glob(os.path.join(where, "**", "*.xplane.pb"), recursive=True)
        parts = summarize(path, args.steps)
    host = wall - parts["sync"] - parts["to_host"]
    print(f"{args.model}, lazy, {args.steps} traced steps, ms per step:")
    print(f"  wall {wall:.2f}")
    print(f"  tracing the step (host, outside lazax's spans) {host:.2f}")
    print(f"  lazax::sync {parts['sync']:.2f} (of which execute {parts['execute']:.2f})")
    print(f"  lazax::to_host (waiting for the loss) {parts['to_host']:.2f}")
    print(f"  lazax::compile {parts['compile']:.2f}")
    print(f"  XLA threads busy {parts['xla_busy']:.2f}")


if __name__ == "__main__":
    main()
