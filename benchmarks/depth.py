"""Compile time against depth: unrolled layers, ``lx.scan_layers``, automatic loops, and
a pure-JAX ``lax.scan`` twin.

    python -m benchmarks.depth [--depths 2 8 24 48] [--steps 20] [--memory-depth 16]

A decoder block (d_model 64, 4 heads, seq 32, batch 4, vocab 256) stacked ``depth``
times, trained with AdamW under ``lx.compile``. Each (variant, depth) runs in a process
of its own (no shared compilation cache), and prints:
- ``first2_s``: the time to the first two steps (trace, compile, run: the first step
  compiles the step, the second the step with AdamW's state);
- ``steps_per_s``: steady steps per second over ``--steps`` more;
Variants: ``unrolled`` (the model's own loop), ``scan`` (``lx.scan_layers`` over the
blocks), ``auto`` (the model's own loop under ``lx.compile(scan_layers=True)``) and
``jax_scan`` (the same step in pure JAX, its blocks under ``lax.scan``: the ceiling).
Then the peak device memory (``lx.max_memory_allocated``) of one training step of a
scanned ``--memory-depth``-block stack, with and without ``checkpoint=True``.
``--llama 2 16``: the same two figures for an unchanged Hugging Face ``LlamaForCausalLM``
(hidden 64, 4 heads, 2 KV heads, seq 32, batch 4) at those depths, unrolled and as an
automatic loop (needs ``transformers``).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import torch

from .jax_decoder import _layer_norm
from .models import Decoder, DecoderConfig, lm_loss, make_tokens, tiny_llama

VARIANTS = ("unrolled", "scan", "auto", "jax_scan")


def config(depth: int) -> DecoderConfig:
    return DecoderConfig(vocab=256, d_model=64, n_heads=4, n_layers=depth, seq=32, batch=4)


class ScannedDecoder(Decoder):
    """The benchmark decoder with its blocks under ``lx.scan_layers``."""

    checkpoint = False

    def forward(self, tokens):
        import lazax.modes as lx  # noqa: PLC0415  (the benchmark's JAX runs never load lazax)

        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok(tokens) + self.pos(positions)
        x = lx.scan_layers(self.blocks, x, checkpoint=self.checkpoint)
        return self.head(self.ln_f(x))


def _lazax_run(variant: str, depth: int, steps: int) -> dict:
    import lazax.modes as lx  # noqa: PLC0415

    torch.manual_seed(0)
    cfg = config(depth)
    model = (ScannedDecoder if variant == "scan" else Decoder)(cfg).to(lx.device())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(tokens):
        opt.zero_grad(set_to_none=True)
        loss = lm_loss(model(tokens), tokens)
        loss.backward()
        opt.step()
        return loss

    run = lx.compile(step, scan_layers=variant == "auto")
    batches = [make_tokens(cfg, k).to(lx.device()) for k in range(4)]
    lx.sync(wait=True)
    out = _timed_steps(run, batches, steps)
    out["compiles"] = lx.metrics.counter_value("UncachedCompile")
    return out


def _timed_steps(run, batches: list, steps: int) -> dict:
    """The time to ``run``'s first two steps, then its steady steps per second (each
    figure ends with a read of the loss, which waits for the device)."""
    start = time.perf_counter()
    for k in range(2):
        loss = run(batches[k])
    loss.item()
    first2 = time.perf_counter() - start
    start = time.perf_counter()
    for k in range(steps):
        loss = run(batches[k % len(batches)])
    loss.item()
    return {"first2_s": first2, "steps_per_s": steps / (time.perf_counter() - start)}


def _jax_scan_step(model: Decoder, lr: float = 1e-3):
    """The decoder's AdamW step in pure JAX, its blocks stacked under ``lax.scan``."""
    cfg = model.cfg
    named = {k: jnp.asarray(v.detach().numpy()) for k, v in model.named_parameters()}
    blocks = {}
    for name in [k[len("blocks.0.") :] for k in named if k.startswith("blocks.0.")]:
        blocks[name] = jnp.stack([named[f"blocks.{i}.{name}"] for i in range(cfg.n_layers)])
    params = {k: v for k, v in named.items() if not k.startswith("blocks.")}
    params["blocks"] = blocks
    mask = jnp.asarray(np.triu(np.ones((cfg.seq, cfg.seq), dtype=bool), 1))
    heads, b1, b2, eps, wd = cfg.n_heads, 0.9, 0.999, 1e-8, 1e-2

    def block(x, p):
        b, t, d = x.shape
        hd = d // heads
        h = _layer_norm(x, p["ln1.weight"], p["ln1.bias"])
        qkv = h @ p["attn.qkv.weight"].T + p["attn.qkv.bias"]
        q, k, v = (z.reshape(b, t, heads, hd).transpose(0, 2, 1, 3) for z in jnp.split(qkv, 3, -1))
        scores = jnp.where(mask[:t, :t], -jnp.inf, q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd))
        out = (jax.nn.softmax(scores, -1) @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
        x = x + out @ p["attn.proj.weight"].T + p["attn.proj.bias"]
        h = _layer_norm(x, p["ln2.weight"], p["ln2.bias"])
        h = jax.nn.gelu(h @ p["mlp.0.weight"].T + p["mlp.0.bias"], approximate=False)
        return x + h @ p["mlp.2.weight"].T + p["mlp.2.bias"], None

    def loss_fn(p, tokens):
        x = p["tok.weight"][tokens] + p["pos.weight"][jnp.arange(tokens.shape[1])]
        x, _ = jax.lax.scan(block, x, p["blocks"])
        x = _layer_norm(x, p["ln_f.weight"], p["ln_f.bias"])
        logp = jax.nn.log_softmax((x @ p["head.weight"].T)[:, :-1], -1)
        return -jnp.take_along_axis(logp, tokens[:, 1:, None], -1).mean()

    def step(state, tokens):
        p, m, v, count = state
        loss, grads = jax.value_and_grad(loss_fn)(p, tokens)
        count = count + 1

        def update(p, g, m, v):
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            p = p * (1 - lr * wd) - (lr / (1 - b1**count)) * m / (
                jnp.sqrt(v / (1 - b2**count)) + eps
            )
            return p, m, v

        new = jax.tree.map(update, p, grads, m, v)
        is_leaf = lambda x: isinstance(x, tuple)  # noqa: E731
        pick = lambda i: jax.tree.map(lambda t: t[i], new, is_leaf=is_leaf)  # noqa: E731
        return (pick(0), pick(1), pick(2), count), loss

    zeros = jax.tree.map(jnp.zeros_like, params)
    return jax.jit(step), (params, zeros, zeros, jnp.zeros((), jnp.float32))


def _jax_run(depth: int, steps: int) -> dict:
    torch.manual_seed(0)
    cfg = config(depth)
    step, state = _jax_scan_step(Decoder(cfg))
    batches = [jnp.asarray(make_tokens(cfg, k).numpy()) for k in range(4)]
    start = time.perf_counter()
    for k in range(2):
        state, loss = step(state, batches[k])
    loss.block_until_ready()
    first2 = time.perf_counter() - start
    start = time.perf_counter()
    for k in range(steps):
        state, loss = step(state, batches[k % 4])
    loss.block_until_ready()
    return {"first2_s": first2, "steps_per_s": steps / (time.perf_counter() - start)}


def _memory_run(depth: int, checkpoint: bool) -> dict:
    import lazax.modes as lx  # noqa: PLC0415

    torch.manual_seed(0)
    cfg = config(depth)
    model = ScannedDecoder(cfg).to(lx.device())
    model.checkpoint = checkpoint
    tokens = make_tokens(cfg, 0).to(lx.device())
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    lx.sync(wait=True)
    lx.reset_peak_memory_stats()
    opt.zero_grad()
    lm_loss(model(tokens), tokens).backward()
    opt.step()
    lx.sync(wait=True)
    return {"peak_mb": lx.max_memory_allocated() / 2**20}


def _llama_run(depth: int, scan: bool, steps: int = 10) -> dict:

    import lazax.modes as lx  # noqa: PLC0415

    torch.manual_seed(0)
    model = tiny_llama(depth, hidden=64).to(lx.device())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(ids):
        opt.zero_grad(set_to_none=True)
        loss = model(ids, labels=ids).loss
        loss.backward()
        opt.step()
        return loss

    run = lx.compile(step, scan_layers=scan)
    g = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, 256, (4, 32), generator=g).to(lx.device()) for _ in range(4)]
    lx.sync(wait=True)
    return _timed_steps(run, batches, steps)


def _worker(kind: str, a: int, b: int) -> dict:
    if kind == "llama":
        return _llama_run(a, bool(b))
    if kind == "jax_scan":
        return _jax_run(a, b)
    if kind == "memory":
        return _memory_run(a, bool(b))
    return _lazax_run(kind, a, b)


def _spawn(kind: str, a: int, b: int) -> dict:
    command = [sys.executable, "-m", "benchmarks.depth", "--worker", kind, str(a), str(b)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr else "failed"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", type=int, nargs="+", default=[2, 8, 24, 48])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--memory-depth", type=int, default=16)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS))
    parser.add_argument("--llama", type=int, nargs="*", help="Llama depths (e.g. 2 16)")
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        kind, a, b = args.worker
        print(json.dumps(_worker(kind, int(a), int(b))))
        return
    if args.llama:
        for scan in (0, 1):
            for depth in args.llama:
                row = _spawn("llama", depth, scan)
                label = "llama auto" if scan else "llama unrolled"
                print(f"{label:<15} {depth:>3} layers: {row}")
        return
    print(f"{'variant':<10} {'depth':>5} {'first 2 steps (s)':>18} {'steps/s':>9}")
    rows = {}
    for variant in args.variants:
        for depth in args.depths:
            row = rows[(variant, depth)] = _spawn(variant, depth, args.steps)
            if "error" in row:
                print(f"{variant:<10} {depth:>5}  {row['error']}")
                continue
            print(f"{variant:<10} {depth:>5} {row['first2_s']:>18.2f} {row['steps_per_s']:>9.1f}")
    lo, hi = min(args.depths), max(args.depths)
    for variant in args.variants:
        a, b = rows.get((variant, lo), {}), rows.get((variant, hi), {})
        if "first2_s" in a and "first2_s" in b:
            print(
                f"{variant}: first two steps at {hi} layers / at {lo}: "
                f"{b['first2_s'] / a['first2_s']:.2f}x"
            )
    for depth in args.depths:
        u, s = rows.get(("unrolled", depth), {}), rows.get(("scan", depth), {})
        if "steps_per_s" in u and "steps_per_s" in s:
            print(
                f"scan / unrolled steady steps/s at {depth} layers: "
                f"{s['steps_per_s'] / u['steps_per_s']:.2f}"
            )
    plain = _spawn("memory", args.memory_depth, 0)
    recomputed = _spawn("memory", args.memory_depth, 1)
    if "peak_mb" in plain and "peak_mb" in recomputed:
        print(
            f"peak memory, {args.memory_depth} scanned blocks: {plain['peak_mb']:.2f} MiB, "
            f"checkpoint=True {recomputed['peak_mb']:.2f} MiB "
            f"({recomputed['peak_mb'] / plain['peak_mb']:.2f}x)"
        )
    else:
        print(f"peak memory: {plain} {recomputed}")


if __name__ == "__main__":
    main()
