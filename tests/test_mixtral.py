"""An unchanged Hugging Face ``MixtralForCausalLM`` (tiny config, random init, nothing
downloaded) trains with AdamW equal to the CPU in every mode, with no CPU fallback:
transformers' default experts path (top-k routing, ``sort``, ``histc`` on int32 ids as
on cuda, ``cumsum``, ``_grouped_mm`` forward and backward, or under ``torch.compile``
its own ``grouped_mm_fallback`` ops) and the router's auxiliary loss (``one_hot``,
``topk``). A step in steady state compiles nothing. transformers' older expert loop
(``experts_implementation="eager"``: ``nonzero``/``where`` per expert, ``index_add_``)
trains equal too, without the CPU fallback; its shapes follow the data, so it compiles
as the token counts change (docs: use the default ``grouped_mm`` path)."""

from __future__ import annotations

import copy

import pytest
import torch

import lazax.modes as lx
from lazax.executor.testing import no_cpu_fallback
from lazax.modes.testing import MODES

transformers = pytest.importorskip("transformers")

DEV = lx.device()
IDS = [torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(k)) for k in range(3)]


def compiles() -> int:
    return lx.metrics.counter_value("UncachedCompile") or 0


def mixtral(layers: int = 2, experts: str | None = None):
    torch.manual_seed(0)
    config = transformers.MixtralConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=64,
        use_cache=False,
        output_router_logits=True,  # the load-balancing loss joins the loss
    )
    if experts is not None:
        config._experts_implementation = experts
    return transformers.MixtralForCausalLM(config)


def train(model, batches, mode: str | None) -> tuple[list[float], list[int]]:
    """Losses of AdamW steps, and the compiles each step caused; ``mode=None``: the CPU."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    forward = model
    if mode == "dynamo":
        torch._dynamo.reset()
        forward = torch.compile(model, backend="lazax")

    def step(ids):
        optimizer.zero_grad(set_to_none=True)
        loss = forward(ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        return loss

    run = lx.compile(step) if mode == "compile" else step
    losses, compiled = [], []
    for ids in batches:
        if mode is None:
            losses.append(step(ids).item())
            continue
        before = compiles()
        ids = ids.to(DEV)
        if mode == "eager":
            with lx.eager_mode_context(True):
                loss = step(ids)
        else:
            loss = run(ids)
            lx.sync()
        losses.append(loss.item())
        compiled.append(compiles() - before)
    return losses, compiled


@pytest.fixture(scope="module")
def reference():
    model = mixtral()
    assert model.config._experts_implementation == "grouped_mm"  # transformers' default
    losses, _ = train(copy.deepcopy(model), IDS, None)
    return model, losses


@pytest.mark.parametrize("mode", MODES)
def test_mixtral_trains_as_on_the_cpu_without_fallback(reference, mode):
    model, expected = reference
    moved = copy.deepcopy(model).to(DEV)
    with no_cpu_fallback():
        got, compiled = train(moved, IDS, mode)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert compiled[-1] == 0, compiled  # the third step is the second's program again


def test_the_older_expert_loop_trains_as_on_the_cpu_without_fallback():
    model = mixtral(layers=1, experts="eager")
    batches = [ids[:1] for ids in IDS[:2]]
    expected, _ = train(copy.deepcopy(model), batches, None)
    with no_cpu_fallback():
        got, _ = train(copy.deepcopy(model).to(DEV), batches, "lazy")
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
