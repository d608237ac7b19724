"""torch's fused transformer inference ops on the device: ``nn.TransformerEncoderLayer``
and ``nn.MultiheadAttention`` in eval under ``no_grad`` take torch's fast path
(``_transformer_encoder_layer_fwd``, ``_native_multi_head_attention``), and lazax
computes it equal to the CPU with no CPU fallback: ReLU and GELU, post- and pre-norm,
causal, key-padding and merged masks, fully masked rows (NaN, as on the CPU), the
attention weights (averaged, per head, or None), cross attention through the aten op,
a stack of layers, bfloat16."""

import copy

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from lazax.executor.testing import no_cpu_fallback, to_device

DEV = "lazax"
TOL = {"rtol": 1e-5, "atol": 1e-5}
aten = torch.ops.aten

torch.manual_seed(0)
X = torch.randn(2, 5, 16)
PADDING = torch.tensor([[0, 0, 0, 1, 1], [0, 0, 0, 0, 0]], dtype=torch.bool)
CAUSAL = nn.Transformer.generate_square_subsequent_mask(5)
MASKS = {
    "none": {},
    "causal": {"src_mask": CAUSAL},
    "key_padding": {"src_key_padding_mask": PADDING},
    "both_bool": {"src_mask": CAUSAL != 0, "src_key_padding_mask": PADDING},
}


class OpsSeen(TorchDispatchMode):
    """The aten ops a block calls (a mode sees them before lazax does)."""

    def __init__(self):
        super().__init__()
        self.seen = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.add(func)
        return func(*args, **(kwargs or {}))


def on_both(module, x, call=None, **kwargs):
    """``module`` on ``x`` on the CPU and a copy on lazax (no fallback), through
    ``call(module, x, **kwargs)`` if given; the lazax ops seen."""
    call = call or (lambda m, x, **kw: m(x, **kw))
    with torch.no_grad():
        expected = call(module, x, **kwargs)
        moved = copy.deepcopy(module).to(DEV)
        with no_cpu_fallback(), OpsSeen() as ops:
            kwargs = {k: to_device(v, DEV) for k, v in kwargs.items()}
            got = to_device(call(moved, x.to(DEV), **kwargs), "cpu")
    return got, expected, ops.seen


@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize(
    "options",
    [{}, {"activation": "gelu"}, {"norm_first": True}],
    ids=["relu", "gelu", "norm_first"],
)
def test_encoder_layer_fast_path_matches_the_cpu(options, mask):
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True, **options)
    got, expected, seen = on_both(layer.eval(), X, **MASKS[mask])
    assert aten._transformer_encoder_layer_fwd.default in seen
    torch.testing.assert_close(got, expected, **TOL)


def test_a_fully_masked_query_is_nan_as_on_the_cpu():
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True).eval()
    everything = torch.ones(2, 5, dtype=torch.bool)
    got, expected, _ = on_both(layer, X, src_key_padding_mask=everything)
    assert expected.isnan().all()
    torch.testing.assert_close(got, expected, equal_nan=True)


def test_encoder_stack_fast_path_matches_the_cpu():
    """A stack without nested tensors (which lazax tensors cannot be: with a padding
    mask, ``enable_nested_tensor=True`` makes torch build one)."""
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
    stack = nn.TransformerEncoder(layer, 3, enable_nested_tensor=False).eval()
    got, expected, seen = on_both(stack, X, src_key_padding_mask=PADDING)
    assert aten._transformer_encoder_layer_fwd.default in seen
    torch.testing.assert_close(got, expected, **TOL)


def test_encoder_layer_in_bfloat16():
    """lazax rounds once at the end where the CPU kernel rounds each step."""
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
    got, expected, _ = on_both(layer.eval().bfloat16(), X.bfloat16())
    torch.testing.assert_close(got, expected, rtol=0.05, atol=0.05)


@pytest.mark.parametrize(
    ("need_weights", "average"),
    [(True, True), (True, False), (False, True)],
    ids=["averaged_weights", "per_head_weights", "no_weights"],
)
def test_multi_head_attention_fast_path_matches_the_cpu(need_weights, average):
    attention = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    got, expected, seen = on_both(
        attention,
        X,
        lambda m, x, **kw: m(x, x, x, **kw),  # the fast path is for self-attention
        key_padding_mask=PADDING,
        need_weights=need_weights,
        average_attn_weights=average,
    )
    assert aten._native_multi_head_attention.default in seen
    if not need_weights:
        assert got[1] is None and expected[1] is None
    torch.testing.assert_close(got, expected, **TOL)


def test_cross_attention_through_the_aten_op():
    """nn.MultiheadAttention takes the fast path for self-attention only; the op itself
    projects distinct query and key/value."""
    qkv_w, qkv_b = torch.randn(48, 16) * 0.3, torch.randn(48) * 0.1
    proj_w, proj_b = torch.randn(16, 16) * 0.3, torch.randn(16) * 0.1
    memory = torch.randn(2, 5, 16)
    mask = torch.rand(2, 4, 5, 5) > 0.7

    def cross(q, kv, qkv_w, qkv_b, proj_w, proj_b, mask):
        return aten._native_multi_head_attention(
            q, kv, kv, 16, 4, qkv_w, qkv_b, proj_w, proj_b, mask, True, False, 2
        )

    args = (X, memory, qkv_w, qkv_b, proj_w, proj_b, mask)
    expected = cross(*args)
    with no_cpu_fallback():
        got = to_device(cross(*to_device(args, DEV)), "cpu")
    torch.testing.assert_close(got, expected, equal_nan=True, **TOL)
