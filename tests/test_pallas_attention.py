"""A Pallas kernel with a custom VJP inside a torch model (``examples/pallas_attention.py``):
forward and backward equal torch's attention on the CPU, and the model trains as the
same model with ``F.scaled_dot_product_attention`` does, in every mode."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import lazax.dynamo  # noqa: F401
import lazax.modes as lx

_PATH = Path(__file__).resolve().parents[1] / "examples" / "pallas_attention.py"
_SPEC = importlib.util.spec_from_file_location("pallas_attention", _PATH)
example = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(example)

DEV = lx.device()


def test_the_kernel_equals_torch_attention_forward_and_backward():
    torch.manual_seed(0)
    q, k, v = (torch.randn(6, 16, 8, requires_grad=True) for _ in range(3))
    d_out = torch.randn(6, 16, 8)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    ref.backward(d_out)
    ql, kl, vl = (t.detach().to(DEV).requires_grad_() for t in (q, k, v))
    out = lx.call_jax(example.attention, ql, kl, vl)
    out.backward(d_out.to(DEV))
    torch.testing.assert_close(out.detach().cpu(), ref.detach(), rtol=1e-5, atol=1e-5)
    for got, want in ((ql, q), (kl, k), (vl, v)):
        torch.testing.assert_close(got.grad.cpu(), want.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["lazy", "eager", "compile", "dynamo"])
def test_a_model_with_the_kernel_trains_as_with_torch_attention(mode):
    torch.manual_seed(0)
    reference = example.TinyLM(layers=1, pallas=False)
    model = example.TinyLM(layers=1, pallas=True)
    model.load_state_dict(reference.state_dict())
    data = example.batches(3)
    # SGD: the key projection's bias has a gradient of rounding noise only (softmax
    # ignores a shift shared by a row), which Adam would scale up to a full step.
    sgd = lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9)  # noqa: E731
    expected = example.train(reference, data, make_optimizer=sgd)
    if mode == "dynamo":
        torch._dynamo.reset()
    got = example.train(model.to(DEV), data, mode, DEV, make_optimizer=sgd)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    for p_ref, p in zip(reference.parameters(), model.parameters()):
        torch.testing.assert_close(p.detach().cpu(), p_ref.detach(), rtol=1e-4, atol=1e-5)
