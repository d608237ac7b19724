"""``nox -s demo``: train the small decoder on the lazax CPU device in lazy mode.

Shows the whole loop a user writes: model and data to ``lx.device()``, a plain torch
training step, ``lx.sync()`` to cut the graph. Prints loss and steps/s, and how many
graphs were compiled (the step graph settles after two steps).
"""

from __future__ import annotations

import argparse
import time

import torch
from tqdm import tqdm

import lazax.modes as lx

from .models import Decoder, DecoderConfig, lm_loss, make_tokens


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.demo")
    p.add_argument("--steps", type=int, default=30)
    args = p.parse_args(argv)
    cfg = DecoderConfig(vocab=256, d_model=128, n_heads=4, n_layers=2, seq=64, batch=8)
    torch.manual_seed(0)
    dev = lx.device()
    model = Decoder(cfg).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    # A fixed small corpus, so the loss visibly falls.
    data = [make_tokens(cfg, seed).to(dev) for seed in range(4)]
    start = time.perf_counter()
    settled = None  # when the step graph is compiled and cached (after two steps)
    with tqdm(range(args.steps), desc="training (lazy mode)", unit="step") as bar:
        for step in bar:
            tokens = data[step % len(data)]
            opt.zero_grad()
            loss = lm_loss(model(tokens), tokens)
            loss.backward()
            opt.step()
            lx.sync()
            if step == 1:
                loss.item()
                settled = time.perf_counter()
            if step % 5 == 0 or step == args.steps - 1:
                bar.set_postfix(loss=f"{loss.item():.4f}")
    final = loss.item()
    end = time.perf_counter()
    steady = (args.steps - 2) / (end - settled) if settled and args.steps > 2 else float("nan")
    print(
        f"final loss {final:.4f}; {steady:.2f} steps/s once compiled "
        f"({end - start:.1f} s in all for {args.steps} steps, compilation included); "
        f"graphs compiled: {lx.metrics.counter_value('UncachedCompile')}"
    )


if __name__ == "__main__":
    main()
