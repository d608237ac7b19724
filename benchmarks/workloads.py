"""What the benchmark trains and serves: a model with its data, loss, optimizer and the
same thing written in pure JAX.

Contract: ``make_workload(name, sizes)`` builds a ``Workload`` deterministically (seeded
weights and data), so that every mode, each in its own process, measures the same model
from the same start. ``sizes`` overrides the model's configuration fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import torch
import torch.nn.functional as F

from .jax_cnn import make_jax_cnn_forward, make_jax_cnn_train_step
from .jax_decoder import make_jax_forward, make_jax_train_step
from .models import CNN, CNNConfig, Decoder, DecoderConfig, lm_loss, make_images, make_tokens

__all__ = ["WORKLOADS", "Workload", "make_workload"]

DECODER_LR = 1e-3
CNN_LR = 0.05


@dataclass
class Workload:
    name: str
    model: torch.nn.Module
    batches: list[tuple[torch.Tensor, ...]]  # CPU inputs, cycled through
    loss: Callable[..., torch.Tensor]  # loss(model, *batch)
    make_optimizer: Callable[[Any], torch.optim.Optimizer]
    jax_train_step: Callable[[], tuple[Callable, Any]]  # () -> (step(state, *batch), state)
    jax_forward: Callable[[], tuple[Callable, Any]]  # () -> (forward(params, x), params)
    items_per_step: int
    unit: str  # what items_per_step counts


def _decoder_loss(model, tokens):
    return lm_loss(model(tokens), tokens)


def _cnn_loss(model, images, labels):
    return F.cross_entropy(model(images), labels)


def _decoder(sizes: dict) -> Workload:
    cfg = DecoderConfig(**sizes)
    torch.manual_seed(0)
    model = Decoder(cfg)
    return Workload(
        name="decoder",
        model=model,
        batches=[(make_tokens(cfg, seed),) for seed in range(4)],
        loss=_decoder_loss,
        make_optimizer=lambda params: torch.optim.AdamW(params, lr=DECODER_LR),
        jax_train_step=lambda: make_jax_train_step(model, lr=DECODER_LR),
        jax_forward=lambda: make_jax_forward(model),
        items_per_step=cfg.batch * cfg.seq,
        unit="tokens",
    )


def _decoder_bf16_loss(model, tokens):
    with torch.autocast(tokens.device.type, dtype=torch.bfloat16):
        return lm_loss(model(tokens), tokens)


def _decoder_bf16(sizes: dict) -> Workload:
    """The decoder under ``torch.autocast(dtype=torch.bfloat16)`` (weights and AdamW in
    float32); its JAX twin casts as torch's CUDA autocast policy does."""
    work = _decoder(sizes)
    model = work.model
    work.name = "decoder_bf16"
    work.loss = _decoder_bf16_loss
    work.jax_train_step = lambda: make_jax_train_step(model, lr=DECODER_LR, low=jnp.bfloat16)
    return work


def _cnn(sizes: dict) -> Workload:
    cfg = CNNConfig(**sizes)
    torch.manual_seed(0)
    model = CNN(cfg)
    return Workload(
        name="cnn",
        model=model,
        batches=[make_images(cfg, seed) for seed in range(4)],
        loss=_cnn_loss,
        make_optimizer=lambda params: torch.optim.SGD(params, lr=CNN_LR, momentum=0.9),
        jax_train_step=lambda: make_jax_cnn_train_step(model, lr=CNN_LR, momentum=0.9),
        jax_forward=lambda: make_jax_cnn_forward(model),
        items_per_step=cfg.batch,
        unit="images",
    )


# The same decoder where the host is the speed (a GPU or TPU finishes a small model's
# step in well under a millisecond; here the compute is negligible too): issue 22's
# overhead-bound model, and a mid-sized deep one.
SMALL_DECODER = {"vocab": 128, "d_model": 32, "n_heads": 2, "n_layers": 2, "seq": 16, "batch": 2}
DEEP_DECODER = {"vocab": 1024, "d_model": 64, "n_heads": 4, "n_layers": 16, "seq": 32, "batch": 4}


def _decoder_sized(name: str, fixed: dict):
    def build(sizes: dict) -> Workload:
        work = _decoder({**fixed, **sizes})
        work.name = name
        return work

    return build


WORKLOADS = {
    "decoder": (_decoder, DecoderConfig),
    "decoder_small": (_decoder_sized("decoder_small", SMALL_DECODER), DecoderConfig),
    "decoder_deep": (_decoder_sized("decoder_deep", DEEP_DECODER), DecoderConfig),
    "decoder_bf16": (_decoder_bf16, DecoderConfig),
    "cnn": (_cnn, CNNConfig),
}


def make_workload(name: str, sizes: dict | None = None) -> Workload:
    build, config = WORKLOADS[name]
    known = {f.name for f in dataclasses.fields(config)}
    unknown = set(sizes or {}) - known
    if unknown:
        raise ValueError(f"{name} has no size {sorted(unknown)}; it has {sorted(known)}")
    return build(dict(sizes or {}))
