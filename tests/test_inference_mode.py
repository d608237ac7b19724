"""torch.inference_mode on lazax: it skips torch's autograd keys, so composite ops
(linear, layer_norm, the aten::to of .cpu()) reach lazax undecomposed. They run as
torch's own decomposition into ops lazax lowers, as they would under autograd: nothing
on the CPU, values equal to the CPU's, and .cpu() / .to() land where they say."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

import lazax.modes as lx

DEV = lx.device()


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(16)
        self.qkv = torch.nn.Linear(16, 48)
        self.out = torch.nn.Linear(16, 16)

    def forward(self, x):
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        h = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + F.gelu(self.out(h))


def _fallbacks() -> dict:
    return {n: lx.metrics.counter_value(n) for n in lx.metrics.counter_names() if "::" in n}


def test_a_model_under_inference_mode_runs_on_the_device_as_on_the_cpu():
    torch.manual_seed(0)
    model = torch.nn.Sequential(Block(), Block())
    on_device = copy.deepcopy(model).to(DEV)
    x = torch.randn(2, 5, 16)
    lx.metrics.clear_all()
    with torch.inference_mode():
        y = on_device(x.to(DEV))
        host = y.cpu()
        assert y.device == DEV and y.is_inference()
        expected = model(x)
    assert _fallbacks() == {}
    assert type(host) is torch.Tensor and host.device.type == "cpu"
    torch.testing.assert_close(host, expected, rtol=1e-5, atol=1e-6)


def test_moves_and_casts_under_inference_mode_go_where_they_say():
    with torch.inference_mode():
        t = torch.arange(6.0).to(DEV) * 2
        assert t.to("cpu").device.type == "cpu"
        assert t.to(torch.float64).device == DEV
        assert t.to(torch.float64).dtype == torch.float64
        assert t.double().cpu().tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
        assert t.to("cpu", torch.int32).dtype == torch.int32
        assert t.sum().item() == 30.0
