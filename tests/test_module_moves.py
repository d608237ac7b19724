"""Module moves keep what cuda keeps: a parameter shared by several modules stays one
``Parameter`` (the same object, the same storage) through ``.to()``, ``.cpu()``,
``.to(dtype)``, ``to_empty`` and ``load_state_dict(assign=True)``, and a tied language
model trains as on the CPU in every mode. torch on the CPU is the oracle.
"""

import copy
import weakref

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazax.modes as lx
from lazax.executor import storage_of

DEV = lx.device()


class TinyGPT(nn.Module):
    """GPT-2's ties (``lm_head.weight is wte.weight``) and BERT's (the MLM decoder's bias
    is a parameter of another module), with one attention block between."""

    def __init__(self, vocab=48, d=16, heads=2, seq=8) -> None:
        super().__init__()
        self.heads = heads
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.ln_1 = nn.LayerNorm(d)
        # no bias: a key bias gets a gradient of exactly zero in exact arithmetic, and
        # Adam turns the rounding noise there into full-size steps on any device
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.ln_f = nn.LayerNorm(d)
        self.cls = nn.Module()
        self.cls.bias = nn.Parameter(torch.zeros(vocab))
        self.lm_head = nn.Linear(d, vocab)
        self.lm_head.weight = self.wte.weight
        self.lm_head.bias = self.cls.bias
        self.register_buffer("positions", torch.arange(seq), persistent=False)

    def forward(self, tokens):
        b, t = tokens.shape
        x = self.wte(tokens) + self.wpe(self.positions[:t])
        q, k, v = self.qkv(self.ln_1(x)).split(x.shape[-1], dim=-1)
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, -1))
        x = x + self.mlp(self.ln_2(x))
        return self.lm_head(self.ln_f(x))


def assert_tied(model):
    assert model.lm_head.weight is model.wte.weight
    assert model.lm_head.bias is model.cls.bias
    assert isinstance(model.wte.weight, nn.Parameter) and model.wte.weight.requires_grad


def batches(n, vocab=48, seq=8, batch=4):
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, vocab, (batch, seq + 1), generator=g) for _ in range(n)]


def lm_step(forward, model, opt, tokens):
    opt.zero_grad(set_to_none=True)
    logits = forward(tokens[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
    loss.backward()
    opt.step()
    return loss


def train(model, data, mode, opt=None, opt_state=None):
    if opt is None:
        opt = torch.optim.AdamW(model.parameters(), lr=0.02)
        if opt_state is not None:
            opt.load_state_dict(opt_state)
    forward = model
    if mode == "dynamo":
        forward = torch.compile(model, backend="lazax")
    losses = []
    for tokens in data:
        if mode == "cpu":
            losses.append(lm_step(forward, model, opt, tokens).item())
            continue
        tokens = tokens.to(DEV)
        if mode == "eager":
            with lx.eager_mode_context(True):
                loss = lm_step(forward, model, opt, tokens)
        elif mode == "compile":
            loss = lx.compile(lm_step)(forward, model, opt, tokens)
        else:
            loss = lm_step(forward, model, opt, tokens)
            lx.sync()
        losses.append(loss.item())
    return losses, opt


@pytest.mark.parametrize("mode", ["lazy", "eager", "compile", "dynamo"])
def test_a_tied_language_model_trains_as_on_the_cpu(mode):
    torch.manual_seed(0)
    ref = TinyGPT()
    model = copy.deepcopy(ref).to(DEV)
    assert_tied(model)
    data = batches(5)
    ref_losses, _ = train(ref, data, "cpu")
    losses, opt = train(model, data, mode)
    assert_tied(model)
    # each shared parameter is one optimizer entry, with one state
    assert len(opt.param_groups[0]["params"]) == len(list(ref.parameters()))
    torch.testing.assert_close(losses, ref_losses, rtol=1e-4, atol=1e-5)
    for (name, p_ref), p in zip(ref.named_parameters(), model.parameters()):
        torch.testing.assert_close(p.cpu(), p_ref.detach(), rtol=1e-4, atol=1e-5, msg=name)


def test_parameters_keep_their_identity_through_every_move():
    model = TinyGPT()
    before = {name: p for name, p in model.named_parameters(remove_duplicate=False)}
    for move in (
        lambda m: m.to(DEV),
        lambda m: m.to(torch.float64),
        lambda m: m.half(),
        lambda m: m.float(),
        lambda m: m.cpu(),
        lambda m: m.to(DEV),
    ):
        move(model)
        assert_tied(model)
        for name, p in model.named_parameters(remove_duplicate=False):
            assert p is before[name], name
    assert model.wte.weight.device == DEV and model.wte.weight.dtype == torch.float32
    # the moved model computes what the CPU one computes
    ref = TinyGPT()
    ref.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    tokens = batches(1)[0][:, :-1]
    torch.testing.assert_close(model(tokens.to(DEV)).cpu(), ref(tokens), rtol=1e-5, atol=1e-5)


def test_a_dtype_change_on_the_device_changes_what_the_parameter_holds():
    layer = nn.Linear(3, 2).to(DEV)
    layer.to(torch.float64)
    assert layer.weight.dtype == torch.float64
    assert storage_of(layer.weight).spec.dtype == "float64"
    x = torch.randn(4, 3, dtype=torch.float64)
    ref = nn.Linear(3, 2).to(torch.float64)
    ref.load_state_dict({k: v.cpu() for k, v in layer.state_dict().items()})
    torch.testing.assert_close(layer(x.to(DEV)).cpu(), ref(x))


def test_an_optimizer_built_before_the_move_trains_the_moved_parameters():
    # On cuda ``.to()`` moves parameters in place, so an optimizer made first still holds
    # them; lazax keeps the objects too.
    torch.manual_seed(0)
    ref = TinyGPT()
    model = copy.deepcopy(ref)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    model.to(DEV)
    for tokens in batches(2):
        ref_loss = lm_step(ref, ref, ref_opt, tokens)
        loss = lm_step(model, model, opt, tokens.to(DEV))
        lx.sync()
        torch.testing.assert_close(loss.cpu(), ref_loss.detach(), rtol=1e-5, atol=1e-5)


def test_gradients_move_with_their_parameters():
    layer = nn.Linear(3, 2).to(DEV)
    layer(torch.randn(5, 3, device=DEV)).sum().backward()
    grad = layer.weight.grad.cpu()
    layer.cpu()
    assert layer.weight.grad.device.type == "cpu"
    torch.testing.assert_close(layer.weight.grad, grad)


def test_buffers_shared_by_two_modules_stay_shared():
    first, second = nn.BatchNorm1d(3), nn.BatchNorm1d(3)
    second.running_mean = first.running_mean
    model = nn.Sequential(first, second).to(DEV)
    assert model[1].running_mean is model[0].running_mean


def test_to_empty_keeps_ties_and_makes_one_device_tensor():
    model = TinyGPT().to_empty(device=DEV)
    assert_tied(model)
    assert model.wte.weight.device == DEV


def test_a_parameter_that_cannot_be_swapped_stays_tied():
    # A weak reference to the old parameter makes ``swap_tensors`` refuse; the modules
    # still end up sharing one new parameter.
    model = TinyGPT()
    old = model.wte.weight
    ref = weakref.ref(old)
    model.to(DEV)
    assert model.lm_head.weight is model.wte.weight
    assert model.wte.weight.device == DEV and ref() is old and old.device.type == "cpu"


def test_load_state_dict_with_assign_keeps_ties():
    model = TinyGPT().to(DEV)
    source = TinyGPT().to(DEV)
    model.load_state_dict(source.state_dict(), assign=True)
    assert_tied(model)
    torch.testing.assert_close(model.wte.weight.cpu(), source.wte.weight.cpu())


def test_modules_that_never_touch_lazax_move_as_torch_moves_them():
    model = TinyGPT()
    before = model.wte.weight
    model.to(torch.float64)
    assert model.wte.weight is before and before.dtype == torch.float64
    assert model.lm_head.weight is model.wte.weight
