"""The models lazax is tested and measured on: plain torch, nothing lazax-specific.

- ``MLP``: a 3-layer perceptron classifier.
- ``Decoder``: a decoder-only transformer LM (token + position embedding, pre-norm
  blocks of causal self-attention and a GELU MLP, final LayerNorm, LM head). The
  standard benchmark configuration is ``DecoderConfig()``: vocab 1024, d_model 256,
  4 heads, 2 layers, seq 128, batch 8.
- ``CNN``: a small ResNet-style image classifier (conv, batch norm, ReLU, max pooling,
  residual adds, a strided downsampling conv, global average pooling, a linear head):
  the kind of model where per-op eager execution is at its worst. ``CNNConfig()``:
  3x32x32 images, widths 16 and 32, 10 classes, batch 32.
- ``make_batch`` / ``make_tokens`` / ``make_images``: deterministic fake data from a seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "CNN",
    "MLP",
    "CNNConfig",
    "Decoder",
    "DecoderConfig",
    "lm_loss",
    "make_batch",
    "make_images",
    "make_tokens",
]


class MLP(nn.Module):
    def __init__(self, d_in: int = 32, hidden: int = 64, n_classes: int = 10) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


@dataclass(frozen=True)
class DecoderConfig:
    vocab: int = 1024
    d_model: int = 256
    n_heads: int = 4
    n_layers: int = 2
    seq: int = 128
    batch: int = 8
    dropout: float = 0.0


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        mask = torch.triu(torch.ones(cfg.seq, cfg.seq, dtype=torch.bool), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.n_heads
        q, k, v = self.qkv(x).split(d, dim=-1)
        q = q.view(b, t, h, d // h).transpose(1, 2)
        k = k.view(b, t, h, d // h).transpose(1, 2)
        v = v.view(b, t, h, d // h).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // h)
        scores = scores.masked_fill(self.mask[:t, :t], float("-inf"))
        attn = self.drop(torch.softmax(scores, dim=-1))
        out = (attn @ v).transpose(1, 2).reshape(b, t, d)
        return self.proj(out)


class Block(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, 4 * cfg.d_model),
            nn.GELU(),
            nn.Linear(4 * cfg.d_model, cfg.d_model),
            nn.Dropout(cfg.dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Decoder(nn.Module):
    def __init__(self, cfg: DecoderConfig | None = None) -> None:
        super().__init__()
        cfg = cfg or DecoderConfig()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.seq, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[1]
        positions = torch.arange(t, device=tokens.device)
        x = self.tok(tokens) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def lm_loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Next-token cross entropy."""
    vocab = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1].reshape(-1, vocab), tokens[:, 1:].reshape(-1))


def make_tokens(cfg: DecoderConfig, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq), generator=g)


def make_batch(n: int, d_in: int, n_classes: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d_in, generator=g)
    y = torch.randint(0, n_classes, (n,), generator=g)
    return x, y


def classifier_step(model: nn.Module, opt, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """One training step of a classifier: gradients dropped (``set_to_none``), cross
    entropy, backward, the optimizer's step; the loss."""
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


@dataclass(frozen=True)
class CNNConfig:
    image: int = 32
    width: int = 16
    classes: int = 10
    batch: int = 32


def _conv_bn(c_in: int, c_out: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(c_out)
    )


class ResidualBlock(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.a = _conv_bn(width, width)
        self.b = _conv_bn(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x + self.b(F.relu(self.a(x))))


class CNN(nn.Module):
    def __init__(self, cfg: CNNConfig | None = None) -> None:
        super().__init__()
        cfg = cfg or CNNConfig()
        self.cfg = cfg
        w = cfg.width
        self.stem = _conv_bn(3, w)
        self.block1 = ResidualBlock(w)
        self.down = _conv_bn(w, 2 * w, stride=2)
        self.block2 = ResidualBlock(2 * w)
        self.head = nn.Linear(2 * w, cfg.classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.stem(images)), 2)
        x = self.block1(x)
        x = self.block2(F.relu(self.down(x)))
        return self.head(x.mean(dim=(2, 3)))


def make_images(cfg: CNNConfig, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    images = torch.randn(cfg.batch, 3, cfg.image, cfg.image, generator=g)
    labels = torch.randint(0, cfg.classes, (cfg.batch,), generator=g)
    return images, labels


def tiny_llama(layers: int, hidden: int = 32):
    """An unchanged Hugging Face ``LlamaForCausalLM``, small (vocab 256 at hidden 64,
    else 64; 4 heads, 2 KV heads), random-init, without a KV cache (training). Needs
    ``transformers``, imported here only."""
    import transformers  # noqa: PLC0415  (an optional dependency of the benchmarks)

    config = transformers.LlamaConfig(
        vocab_size=256 if hidden >= 64 else 64,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        use_cache=False,  # a KV cache is per-layer state: a layer loop cannot carry it
    )
    return transformers.LlamaForCausalLM(config)
