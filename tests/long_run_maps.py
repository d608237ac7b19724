"""Large programs against the OS's limit on memory mappings, in one process (JSON out).

    python tests/long_run_maps.py --tokens 64

A random Llama of ``--layers`` tiny layers makes ``--tokens`` tokens with
``generate()`` in lazy mode, compiling a program for every token on purpose (the graph
is cut at each token, where the mapping count is read, and the dynamic cache grows, so
no two tokens share a program), then as many again with its forward under
``torch.compile(backend="lazax")``. On the CPU, with 32 layers, each token's program
keeps about 1,000 memory mappings: the two runs pass Linux's default
``vm.max_map_count`` (65,530) twice over, so the process lives only if the map guard
evicts in time. Reported: the largest count read, the limit, the evictions, and whether
both runs gave the CPU's tokens.
"""

from __future__ import annotations

import argparse
import json

import torch
from transformers import LlamaConfig, LlamaForCausalLM, LogitsProcessor, LogitsProcessorList

import lazax.executor as lx_exec
import lazax.modes as lx


def tiny_llama(layers: int) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    return LlamaForCausalLM(config).eval()


def greedy(model, ids: torch.Tensor, tokens: int, per_token) -> torch.Tensor:
    """``generate()``'s greedy tokens, with a read of the mapping count after each."""

    class EachToken(LogitsProcessor):
        def __call__(self, input_ids, scores):
            per_token()
            return scores

    return model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=tokens,
        min_new_tokens=tokens,
        do_sample=False,
        logits_processor=LogitsProcessorList([EachToken()]),
        pad_token_id=0,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--layers", type=int, default=32)
    args = parser.parse_args()
    runtime = lx_exec.EXECUTOR.runtime
    peak = {"count": 0}

    def per_token() -> None:
        lx.sync(wait=True)
        reading = runtime.memory_maps()
        if reading is not None:
            peak["count"] = max(peak["count"], reading[0])

    model = tiny_llama(args.layers)
    prompt = torch.randint(0, 128, (1, 5), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = greedy(model, prompt, args.tokens, lambda: None)
        device_model = model.to(lx.device())
        lazy = greedy(device_model, prompt.to(lx.device()), args.tokens, per_token).cpu()
        device_model.forward = torch.compile(device_model.forward, backend="lazax")
        compiled = greedy(device_model, prompt.to(lx.device()), args.tokens, per_token).cpu()
    print(
        json.dumps(
            {
                "tokens": args.tokens,
                "peak_maps": peak["count"],
                "limit": runtime.memory_maps()[1] if runtime.memory_maps() else None,
                "evictions": lx.metrics.counter_value("MemoryMapEvictions") or 0,
                "held_elsewhere": lx.metrics.counter_value("MemoryMapsHeldElsewhere") or 0,
                "compiles": lx.metrics.counter_value("UncachedCompile") or 0,
                "lazy_equal": bool(torch.equal(lazy, expected)),
                "dynamo_equal": bool(torch.equal(compiled, expected)),
            }
        )
    )


if __name__ == "__main__":
    main()
