"""Peak memory of a training run, every mode beside torch CPU and pure JAX.

``python -m benchmarks.memory`` (``--help`` for options) trains a state-heavy model for a
few steps in each mode, each in a process of its own, and prints the peak resident
memory above the process's footprint just before the model was built (torch, jax and
the device already initialised), as a multiple of the training state: parameters,
gradients and AdamW's two moments. On a device that reports its memory (GPU, TPU) the
device's peak bytes (``lx.max_memory_allocated()``, jax's ``peak_bytes_in_use``) are
shown too.

Models: ``mlp`` (6 bias-free 2048x2048 linears, batch 8: a 25M-parameter state of
384 MB, where the state dwarfs the activations) and ``decoder`` (the benchmark's
decoder). Modes: ``torch_cpu``, ``lazy`` (``sync()`` per step), ``eager``, ``compile``
(``lx.compile(step)``), ``dynamo`` (``torch.compile`` of the loss, optimizer lazy),
``jax_donate`` (``jax.jit(step, donate_argnums=0)``) and ``jax`` (no donation).
``run(model, mode)`` returns one row; ``table(rows)`` formats them.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

MODES = ("torch_cpu", "lazy", "eager", "compile", "dynamo", "jax_donate", "jax")
MODELS = ("mlp", "decoder")
MLP_WIDTH, MLP_LAYERS, MLP_BATCH = 2048, 6, 8
LR = 1e-3


def _peak_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _build(model_name: str):
    """(torch model on the CPU, loss(model, *batch), batches, jax twin or None)."""
    import torch

    torch.manual_seed(0)
    if model_name == "mlp":
        layers = []
        for i in range(MLP_LAYERS):
            layers.append(torch.nn.Linear(MLP_WIDTH, MLP_WIDTH, bias=False))
            if i < MLP_LAYERS - 1:
                layers.append(torch.nn.ReLU())
        model = torch.nn.Sequential(*layers)
        batches = [
            (torch.randn(MLP_BATCH, MLP_WIDTH), torch.randn(MLP_BATCH, MLP_WIDTH)) for _ in range(2)
        ]

        def loss(m, x, y):
            return torch.nn.functional.mse_loss(m(x), y)

        return model, loss, batches
    from .workloads import make_workload

    work = make_workload("decoder")
    return work.model, work.loss, work.batches


def _state_bytes(model) -> int:
    # parameters, gradients, exp_avg, exp_avg_sq
    return 4 * sum(p.numel() * p.element_size() for p in model.parameters())


def _jax_mlp_step(model, donate: bool):
    import jax
    import jax.numpy as jnp

    weights = [jnp.asarray(m.weight.detach().numpy()) for m in model if hasattr(m, "weight")]
    b1, b2, eps, wd = 0.9, 0.999, 1e-8, 1e-2

    def loss(ws, x, y):
        for i, w in enumerate(ws):
            x = x @ w.T
            if i < len(ws) - 1:
                x = jax.nn.relu(x)
        return jnp.mean((x - y) ** 2)

    def step(state, x, y):
        p, m, v, count = state
        value, grads = jax.value_and_grad(loss)(p, x, y)
        count = count + 1
        bc1, bc2 = 1 - b1**count, 1 - b2**count
        new_m = [b1 * a + (1 - b1) * g for a, g in zip(m, grads)]
        new_v = [b2 * a + (1 - b2) * g * g for a, g in zip(v, grads)]
        new_p = [
            w * (1 - LR * wd) - (LR / bc1) * a / (jnp.sqrt(s / bc2) + eps)
            for w, a, s in zip(p, new_m, new_v)
        ]
        return (new_p, new_m, new_v, count), value

    zeros = [jnp.zeros_like(w) for w in weights]
    state = (weights, zeros, [jnp.zeros_like(w) for w in weights], jnp.zeros((), jnp.float32))
    return jax.jit(step, donate_argnums=(0,) if donate else ()), state


def _run_jax(model_name, holder, batches, steps, donate):
    import jax

    model = holder.pop()  # the torch copy of the weights is freed once jax has its own
    if model_name == "mlp":
        step, state = _jax_mlp_step(model, donate)
    else:
        from .jax_decoder import make_jax_train_step

        plain, state = make_jax_train_step(model, lr=LR)
        step = jax.jit(plain.__wrapped__, donate_argnums=(0,) if donate else ())
        # Its two moments start as the same zero arrays: one buffer cannot be donated twice.
        state = jax.tree.map(lambda a: a.copy(), state)
    del model
    data = [tuple(jax.numpy.asarray(t.numpy()) for t in b) for b in batches]
    for i in range(steps):
        state, loss = step(state, *data[i % len(data)])
        loss.block_until_ready()
    return float(loss)


def _run_torch(holder, loss_fn, batches, steps, mode):
    import torch

    model = holder.pop()

    if mode == "torch_cpu":
        opt = torch.optim.AdamW(model.parameters(), lr=LR)
        for i in range(steps):
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model, *batches[i % len(batches)])
            loss.backward()
            opt.step()
        return float(loss)
    import lazax.modes as lx

    dev = lx.device()
    model.to(dev)
    data = [tuple(t.to(dev) for t in b) for b in batches]
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    if mode == "dynamo":
        loss_fn = torch.compile(loss_fn, backend="lazax")

    def step(*batch):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model, *batch)
        loss.backward()
        opt.step()
        return loss

    if mode == "compile":
        step = lx.compile(step)
    with lx.eager_mode_context(mode in ("eager", "compile")):
        for i in range(steps):
            loss = step(*data[i % len(data)])
            if mode in ("lazy", "dynamo"):
                lx.sync()
            loss.item()
    return float(loss.item())


def worker(model_name: str, mode: str, steps: int) -> dict:
    import jax
    import torch

    if mode not in ("torch_cpu", "jax", "jax_donate"):
        import lazax.modes as lx

        lx.device()
    torch.ones(1)
    jax.numpy.ones(1).block_until_ready()
    baseline = _peak_kb()
    model, loss_fn, batches = _build(model_name)
    state = _state_bytes(model)
    holder = [model]
    del model
    if mode.startswith("jax"):
        loss = _run_jax(model_name, holder, batches, steps, mode == "jax_donate")
    else:
        loss = _run_torch(holder, loss_fn, batches, steps, mode)
    row = {
        "model": model_name,
        "mode": mode,
        "state_mb": state / 2**20,
        "peak_mb": (_peak_kb() - baseline) / 1024,
        "loss": loss,
    }
    if "lazax.modes" in sys.modules:
        import lazax.modes as lx

        row["device_peak_mb"] = lx.max_memory_allocated() / 2**20
    else:
        stats = jax.devices()[0].memory_stats()
        if stats and "peak_bytes_in_use" in stats:
            row["device_peak_mb"] = stats["peak_bytes_in_use"] / 2**20
    return row


def run(model_name: str, mode: str, steps: int = 5) -> dict:
    """One (model, mode) in a fresh process; its row."""
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.memory", "--worker", model_name, mode, str(steps)],
        capture_output=True,
        text=True,
    )
    for line in out.stdout.splitlines():
        if line.startswith("row "):
            return json.loads(line[4:])
    return {"model": model_name, "mode": mode, "error": (out.stderr or out.stdout)[-2000:]}


def table(rows: list[dict]) -> str:
    lines = [
        f"{'model':<8} {'mode':<11} {'state MB':>9} {'peak MB':>8} {'x state':>8} {'device MB':>10}"
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['model']:<8} {r['mode']:<11} failed: {r['error'].splitlines()[-1]}")
            continue
        device = r.get("device_peak_mb")
        device = f"{device:>10.0f}" if device is not None else f"{'-':>10}"
        lines.append(
            f"{r['model']:<8} {r['mode']:<11} {r['state_mb']:>9.0f} {r['peak_mb']:>8.0f} "
            f"{r['peak_mb'] / r['state_mb']:>7.2f}x {device}"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.memory", description=__doc__)
    p.add_argument("--models", default="mlp", help="comma list of " + ",".join(MODELS))
    p.add_argument("--modes", default=",".join(MODES), help="comma list of " + ",".join(MODES))
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        model_name, mode, steps = args.worker
        print("row " + json.dumps(worker(model_name, mode, int(steps))), flush=True)
        return 0
    rows = []
    for model_name in args.models.split(","):
        for mode in args.modes.split(","):
            rows.append(run(model_name, mode, args.steps))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
