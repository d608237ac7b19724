"""A Pallas attention kernel inside a torch model, through ``lx.call_jax``.

``attention(q, k, v)`` is causal attention written as a Pallas kernel (one program per
batch-and-head row, the whole sequence in one block), with a custom VJP: the forward
keeps the log-sum-exp of each row, and the backward recomputes the probabilities from it
(as flash attention does) instead of storing them. On the CPU the kernel runs in Pallas's
interpreter; on GPU and TPU it is compiled.

The model calls it with ``lx.call_jax(attention, q, k, v)``: one node of the step's
graph in every mode, with its gradient from the custom VJP. The same model with
``F.scaled_dot_product_attention`` on the CPU is the reference.

    python examples/pallas_attention.py --steps 20 [--mode lazy|eager|compile|dynamo]
"""

from __future__ import annotations

import argparse
import functools
import math

import jax
import jax.numpy as jnp
import torch
import torch.nn.functional as F
from jax.experimental import pallas as pl

import lazax.modes as lx


def _forward_kernel(q_ref, k_ref, v_ref, o_ref, lse_ref, *, scale: float):
    q, k, v = q_ref[0], k_ref[0], v_ref[0]
    s = jnp.dot(q, k.T, preferred_element_type=jnp.float32) * scale
    rows, cols = s.shape
    causal = jnp.arange(rows)[:, None] >= jnp.arange(cols)[None, :]
    s = jnp.where(causal, s, -jnp.inf)
    m = jnp.max(s, axis=-1, keepdims=True)
    p = jnp.exp(s - m)
    total = jnp.sum(p, axis=-1, keepdims=True)
    o_ref[0] = (jnp.dot(p, v.astype(jnp.float32)) / total).astype(o_ref.dtype)
    lse_ref[0] = (m + jnp.log(total))[:, 0]


def _forward(q, k, v):
    rows, seq, dim = q.shape
    block = pl.BlockSpec((1, seq, dim), lambda i: (i, 0, 0))
    return pl.pallas_call(
        functools.partial(_forward_kernel, scale=1.0 / math.sqrt(dim)),
        grid=(rows,),
        in_specs=[block, block, block],
        out_specs=[block, pl.BlockSpec((1, seq), lambda i: (i, 0))],
        out_shape=[
            jax.ShapeDtypeStruct(q.shape, q.dtype),
            jax.ShapeDtypeStruct((rows, seq), jnp.float32),
        ],
        interpret=jax.devices()[0].platform == "cpu",
    )(q, k, v)


@jax.custom_vjp
def attention(q, k, v):
    """Causal softmax attention over ``(batch * heads, seq, head_dim)``."""
    return _forward(q, k, v)[0]


def _attention_fwd(q, k, v):
    out, lse = _forward(q, k, v)
    return out, (q, k, v, out, lse)


def _attention_bwd(residuals, d_out):
    q, k, v, out, lse = residuals
    scale = 1.0 / math.sqrt(q.shape[-1])
    s = jnp.einsum("bqd,bkd->bqk", q, k) * scale
    seq = q.shape[1]
    causal = jnp.arange(seq)[:, None] >= jnp.arange(seq)[None, :]
    p = jnp.where(causal, jnp.exp(s - lse[..., None]), 0.0)  # recomputed, not stored
    d_v = jnp.einsum("bqk,bqd->bkd", p, d_out)
    d_p = jnp.einsum("bqd,bkd->bqk", d_out, v)
    d_s = p * (d_p - jnp.sum(d_out * out, axis=-1, keepdims=True))
    d_q = jnp.einsum("bqk,bkd->bqd", d_s, k) * scale
    d_k = jnp.einsum("bqk,bqd->bkd", d_s, q) * scale
    return d_q, d_k, d_v


attention.defvjp(_attention_fwd, _attention_bwd)


class Block(torch.nn.Module):
    def __init__(self, width: int, heads: int, pallas: bool):
        super().__init__()
        self.heads, self.pallas = heads, pallas
        self.norm1, self.norm2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width)
        )

    def forward(self, x):
        batch, seq, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q, k, v = (t.reshape(batch, seq, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        if self.pallas:
            rows = (batch * self.heads, seq, width // self.heads)
            h = lx.call_jax(attention, *(t.reshape(rows) for t in (q, k, v)))
            h = h.reshape(batch, self.heads, seq, -1)
        else:
            h = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(h.transpose(1, 2).reshape(batch, seq, width))
        return x + self.mlp(self.norm2(x))


class TinyLM(torch.nn.Module):
    def __init__(self, vocab=64, width=32, heads=4, layers=2, pallas=True):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.blocks = torch.nn.ModuleList(Block(width, heads, pallas) for _ in range(layers))
        self.head = torch.nn.Linear(width, vocab)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def lm_loss(logits, tokens):
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def batches(steps: int, batch: int = 4, seq: int = 16, vocab: int = 64):
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, vocab, (batch, seq), generator=g) for _ in range(steps)]


def train(model, data, mode: str = "lazy", device=None, make_optimizer=None) -> list[float]:
    """Steps over ``data`` in ``mode`` (AdamW unless ``make_optimizer(params)`` says
    otherwise); the losses."""
    make_optimizer = make_optimizer or (lambda params: torch.optim.AdamW(params, lr=3e-3))
    opt = make_optimizer(model.parameters())
    forward = model
    if mode == "dynamo":
        forward = torch.compile(model, backend="lazax", fullgraph=True)

    def step(tokens):
        opt.zero_grad(set_to_none=True)
        loss = lm_loss(forward(tokens), tokens)
        loss.backward()
        opt.step()
        return loss

    run = lx.compile(step) if mode == "compile" else step
    losses = []
    for tokens in data:
        tokens = tokens.to(device) if device is not None else tokens
        if mode == "eager":
            with lx.eager_mode_context(True):
                loss = step(tokens)
        else:
            loss = run(tokens)
            if device is not None:
                lx.sync()
        losses.append(loss.item())
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--mode", default="lazy", choices=["lazy", "eager", "compile", "dynamo"])
    args = parser.parse_args()
    torch.manual_seed(0)
    reference = TinyLM(pallas=False)
    model = TinyLM(pallas=True)
    model.load_state_dict(reference.state_dict())
    data = batches(args.steps)
    expected = train(reference, data)
    got = train(model.to(lx.device()), data, args.mode, lx.device())
    worst = max(abs(a - b) for a, b in zip(got, expected))
    print(f"loss {got[0]:.4f} -> {got[-1]:.4f} over {args.steps} steps ({args.mode} mode)")
    print(f"largest difference from torch's attention on the CPU: {worst:.2e}")


if __name__ == "__main__":
    main()
