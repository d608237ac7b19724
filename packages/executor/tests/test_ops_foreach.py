"""``_foreach_*`` lowerings (``ops/foreach.py``) and the optimizers that use them.

Contract: torch.optim's SGD (momentum, nesterov, weight decay, dampening, maximize) and
Adam/AdamW (foreach path, amsgrad too) step a lazax model exactly as they step its CPU
twin (parameters equal to rtol 1e-5, atol 1e-6 after 3 steps) without a CPU fallback in
``step()``; each ``_foreach_*`` overload family, functional and in place, matches the
CPU kernel (``torch.testing.assert_close`` defaults, dtype included) without falling
back.
"""

from __future__ import annotations

import copy

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from lazax.executor.ops import LoweringContext, get_lowering
from lazax.executor.testing import deferred_check as check
from lazax.executor.testing import fallback_counts

aten = torch.ops.aten
INF = float("inf")


def _grown(before: dict) -> dict:
    """Fallback counters that grew since ``before`` (a ``fallback_counts()``), by how much."""
    return {n: v - before.get(n, 0) for n, v in fallback_counts().items() if v != before.get(n, 0)}


def tensors(seed=0, positive=False):
    """A list of mixed shapes and dtypes (bf16 with 64 elements: torch's vector path)."""
    g = torch.Generator().manual_seed(seed)
    out = [
        torch.randn(3, 4, generator=g),
        torch.randn(5, generator=g),
        torch.randn(()),
        torch.randn(64, generator=g).to(torch.bfloat16),
    ]
    return [t.abs() + 0.5 if positive else t for t in out]


# -- per overload ------------------------------------------------------------------------

# One family per case, all its overloads in one graph (one compile).
_CASES = {
    "add": lambda a, b, c: [
        torch._foreach_add(a, 2.5),
        torch._foreach_add(a, b, alpha=-0.5),
        torch._foreach_add(a, [0.5, 1, -2.5, 3.0]),
        torch._foreach_add(a, torch.tensor(0.3), alpha=2.0),
    ],
    "sub": lambda a, b, c: [
        torch._foreach_sub(a, 1.5),
        torch._foreach_sub(a, b, alpha=3),
        torch._foreach_sub(a, [0.5, 0, -1, 2.5]),
    ],
    "mul": lambda a, b, c: [
        torch._foreach_mul(a, 0.9),
        torch._foreach_mul(a, b),
        torch._foreach_mul(a, [0.1, 2, -1, 0.3]),
        torch._foreach_mul(a, torch.tensor(0.7)),
    ],
    "div": lambda a, b, c: [
        torch._foreach_div(a, 3.0),
        torch._foreach_div(a, c),
        torch._foreach_div(a, [0.9, 2.0, -4.0, 0.5]),
        torch._foreach_div(a, torch.tensor(1.7)),
    ],
    "pow": lambda a, b, c: [
        torch._foreach_pow(c, b),
        torch._foreach_pow(a, 2),
        torch._foreach_pow(c, [0.5, 3, 1.5, -1]),
        torch._foreach_pow(2.0, a),
    ],
    "maximum_minimum_clamp": lambda a, b, c: [
        torch._foreach_maximum(a, b),
        torch._foreach_maximum(a, 0.1),
        torch._foreach_maximum(a, [0.1, -0.2, 0, 0.5]),
        torch._foreach_minimum(a, b),
        torch._foreach_minimum(a, 0.1),
        torch._foreach_clamp_min(a, b),
        torch._foreach_clamp_max(a, [0.1, -0.2, 0, 0.5]),
    ],
    "lerp": lambda a, b, c: [
        torch._foreach_lerp(a, b, 0.1),
        torch._foreach_lerp(a, b, c),
        torch._foreach_lerp(a, b, [0.1, 0.9, 1, 0.5]),
    ],
    "addcmul_addcdiv": lambda a, b, c: [
        torch._foreach_addcmul(a, b, c, 0.001),
        torch._foreach_addcmul(a, b, c, [0.5, 1, 2, -3]),
        torch._foreach_addcdiv(a, b, c),
        torch._foreach_addcdiv(a, b, c, [-0.01, 1, 2, 0.3]),
    ],
    "copy_zero_clone": lambda a, b, c: [
        aten._foreach_copy(a, b),
        aten._foreach_zero(a),
        aten._foreach_clone(a),
    ],
    "unary": lambda a, b, c: [
        torch._foreach_sqrt(c),
        torch._foreach_neg(a),
        torch._foreach_abs(a),
        torch._foreach_exp(a),
        torch._foreach_reciprocal(c),
        torch._foreach_sign(a),
        torch._foreach_sigmoid(a),
        torch._foreach_log(c),
        torch._foreach_round(a),
        torch._foreach_frac(a),
    ],
}


@pytest.mark.parametrize("case", list(_CASES))
def test_foreach(case, no_fallback):
    """Every overload of one ``_foreach_*`` family, functional."""
    check(_CASES[case], tensors(0), tensors(1), tensors(2, positive=True))


@pytest.mark.parametrize("name", ["_foreach_addcmul", "_foreach_addcdiv"])
def test_foreach_tensor_scalars_rule(name):
    """The ``.Tensor`` addcmul/addcdiv rules, called directly."""
    # torch wants the per-item scalars of the .Tensor overloads on the CPU, which the
    # tensor layer does not pass through yet; so call the rule itself.
    op = getattr(aten, name)
    a, b, c = tensors(0), tensors(1), tensors(2, positive=True)
    scalars = torch.tensor([0.5, 1.0, 2.0, -3.0], dtype=torch.float64)
    expected = op.ScalarList(a, b, c, scalars.tolist())

    def jax(t):
        return jnp.asarray(t.double().numpy()).astype(str(t.dtype).removeprefix("torch."))

    ctx = LoweringContext(out=tuple((tuple(t.shape), np.dtype(jax(t).dtype)) for t in a))
    rule = get_lowering(op.Tensor).fn
    got = rule(ctx, *([jax(t) for t in ts] for ts in (a, b, c)), jax(scalars))
    for g, e in zip(got, expected, strict=True):
        # The rule computes bf16 items in float32; the lowering's output cast rounds.
        torch.testing.assert_close(torch.from_numpy(np.asarray(g, np.float64)).to(e.dtype), e)


def test_foreach_in_place(no_fallback):
    """The in-place forms, as an optimizer chains them."""

    def step(a, b, c):
        torch._foreach_add_(a, b, alpha=0.5)
        # 0.75: torch's in-place CPU kernel rounds the scalar to bf16, its functional
        # one (and lazax, for both) does not; pick a scalar where that cannot matter.
        torch._foreach_mul_(a, 0.75)
        torch._foreach_addcdiv_(a, b, c, [-0.01, 0.02, 0.5, 1])
        torch._foreach_lerp_(b, a, 0.1)
        torch._foreach_maximum_(c, b)
        torch._foreach_copy_(a[:1], c[:1])
        torch._foreach_zero_(b[2:3])
        torch._foreach_sqrt_(c)
        return a, b, c

    check(step, tensors(0), tensors(1), tensors(2, positive=True))


def test_foreach_through_views(no_fallback):
    """In-place foreach ops on views write into the base."""

    def step(base):
        rows = list(base.unbind(0))
        torch._foreach_mul_(rows, [2.0, 3.0, 4.0])  # writes back into base
        torch._foreach_add_(rows, 1)
        return base

    check(step, torch.randn(3, 5))


@pytest.mark.parametrize("ord", [2, 1, INF, 3.0, 0])
def test_foreach_norm(ord, no_fallback):
    """``_foreach_norm`` for static (Python) and lifted orders."""
    xs = tensors(0)
    xs[0][0, 0] = 0.0
    check(lambda a: torch._foreach_norm(a, ord), xs)


def test_foreach_norm_dtype(no_fallback):
    """``_foreach_norm`` with an output dtype."""
    check(lambda a: torch._foreach_norm(a, 2, dtype=torch.float64), tensors(0)[:2])


# -- optimizers ---------------------------------------------------------------------------

_OPTIMIZERS = {
    "sgd_nesterov_wd": (
        torch.optim.SGD,
        dict(lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True),
    ),
    "sgd_dampening_maximize": (
        torch.optim.SGD,
        dict(lr=0.1, momentum=0.9, dampening=0.1, maximize=True),
    ),
    "adam_wd": (torch.optim.Adam, dict(lr=0.01, weight_decay=0.1)),
    "adamw": (torch.optim.AdamW, dict()),
    "adamw_amsgrad": (torch.optim.AdamW, dict(amsgrad=True)),
}


def _train(model, opt, device, steps=3):
    """3 steps on fixed data; returns the fallbacks ``opt.step()`` caused."""
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(8, 4, generator=g), torch.randn(8, 3, generator=g)) for _ in range(steps)]
    during_step: dict = {}
    for x, y in data:
        x, y = x.to(device), y.to(device)
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        before = fallback_counts()
        opt.step()
        for n, v in _grown(before).items():
            during_step[n] = during_step.get(n, 0) + v
        opt.zero_grad()
    return during_step


# foreach=None: the default, which on lazax is the per-tensor path (torch.optim only
# defaults to foreach for plain torch.Tensor parameters).
_OPTIMIZER_CASES = [(name, True) for name in _OPTIMIZERS]
_OPTIMIZER_CASES += [(name, None) for name in ("adamw", "adamw_amsgrad")]


@pytest.mark.parametrize(("name", "foreach"), _OPTIMIZER_CASES)
def test_optimizer(name, foreach):
    """3 optimizer steps on lazax equal the CPU's, with no fallback in ``step()``."""
    cls, kwargs = _OPTIMIZERS[name]
    torch.manual_seed(0)
    cpu_model = torch.nn.Linear(4, 3)
    lazax_model = copy.deepcopy(cpu_model).to("lazax")
    cpu_opt = cls(cpu_model.parameters(), foreach=foreach, **kwargs)
    lazax_opt = cls(lazax_model.parameters(), foreach=foreach, **kwargs)
    before = fallback_counts()
    _train(cpu_model, cpu_opt, "cpu")
    step_fallbacks = _train(lazax_model, lazax_opt, "lazax")
    for p_cpu, p_lazax in zip(cpu_model.parameters(), lazax_model.parameters(), strict=True):
        torch.testing.assert_close(p_lazax.detach().cpu(), p_cpu.detach(), rtol=1e-5, atol=1e-6)
    foreach_fallbacks = {n: v for n, v in _grown(before).items() if n.startswith("aten::_foreach")}
    assert not foreach_fallbacks
    if name == "adamw_amsgrad" and foreach is None:
        # The per-tensor path calls torch.maximum(..., out=...); out= ops always fall back.
        step_fallbacks.pop("aten::maximum", None)
    assert not step_fallbacks, f"optimizer step fell back to the CPU: {step_fallbacks}"


def test_clip_grad_norm_foreach():
    """clip_grad_norm_(foreach=True) uses the foreach rules."""
    params = [torch.randn(3, 4), torch.randn(5)]
    grads = [torch.randn(3, 4) * 3, torch.randn(5) * 3]

    def clip(ps, gs):
        ps = [p.clone().requires_grad_() for p in ps]
        for p, g in zip(ps, gs, strict=True):
            p.grad = g.clone()
        norm = torch.nn.utils.clip_grad_norm_(ps, max_norm=1.0, foreach=True)
        return [norm] + [p.grad for p in ps]

    before = fallback_counts()
    check(clip, params, grads)
    assert not [n for n in _grown(before) if n.startswith("aten::_foreach")]


# -- equal numbers of a list --------------------------------------------------------------


def test_equal_numbers_of_a_list_share_one_parameter():
    """A foreach op's number list (AdamW's bias corrections: one per tensor, all equal)
    takes one scalar parameter per distinct value, so each tensor's update is the same
    computation (XLA compiles identical kernels once); values stay exact, and a list
    whose numbers stop being equal is one more compile, after which changing them
    compiles nothing."""
    from lazax import executor as lx_exec  # noqa: PLC0415
    from lazax import ir  # noqa: PLC0415

    g = torch.Generator().manual_seed(0)
    cpu = [torch.randn(4, 3, generator=g) for _ in range(6)]
    dev = [t.to("lazax") for t in cpu]
    lx_exec.sync()
    graphs = []

    def step(numbers):
        torch._foreach_mul_(cpu, numbers)
        torch._foreach_mul_(dev, numbers)
        before = lx_exec.metrics.counter_value("UncachedCompile") or 0
        lx_exec.sync()
        for c, d in zip(cpu, dev, strict=True):
            torch.testing.assert_close(d.cpu(), c, rtol=0, atol=0)
        scalars = [p for p in graphs[-1].parameters if p.op == ir.SCALAR]
        return len(scalars), (lx_exec.metrics.counter_value("UncachedCompile") or 0) - before

    lx_exec.EXECUTOR.graph_hooks.append(lambda name, graph: graphs.append(graph))
    try:
        assert step([0.5] * 6)[0] == 1
        assert step([0.25] * 6) == (1, 0)  # another value, the same program
        assert step([0.5, 0.25, 0.5, 0.5, 2.0, 0.25]) == (3, 1)  # no longer all equal
        assert step([0.75, 1.5, 0.75, 0.75, 3.0, 1.5]) == (3, 0)
    finally:
        lx_exec.EXECUTOR.graph_hooks.pop()
