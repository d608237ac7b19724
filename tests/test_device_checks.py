"""Value-dependent errors raise as on the CPU: device-side checks (issue 21).

An index out of range, a class target past the number of classes, a probability
outside [0, 1]: torch's CPU kernels raise, XLA clamps. lazax's programs compute a flag
beside their results and raise torch's exception, with torch's message, at the first
sync or read after the program ran (in eager mode: at the op), naming where the op was
traced. These tests pin the types and messages in every mode, what the tensors hold
afterwards, and that the checks cost no recompile and no host read inside a compiled
region or a dynamo replay.
"""

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

import lazax.dynamo  # noqa: F401  (the "lazax" backend)
import lazax.modes as lx
from lazax.executor import CHECKS

DEV = lx.device()
MODES = ("lazy", "eager", "compile", "dynamo")


@pytest.fixture(autouse=True)
def _no_checks_left_over():
    CHECKS.forget()
    yield
    CHECKS.forget()


def _ix(values):
    return torch.tensor(values)


# (name, function, arguments): each raises on the CPU because of a value.
BAD = [
    ("index", lambda x, i: x[i], (torch.arange(5.0), _ix([1, 7]))),
    ("index negative", lambda x, i: x[i], (torch.arange(5.0), _ix([-6]))),
    ("index second dim", lambda x, i: x[:, i], (torch.zeros(3, 4), _ix([4]))),
    ("index_put", lambda x, i: x.index_put((i,), x[0]), (torch.zeros(5), _ix([9]))),
    ("index_select", lambda x, i: x.index_select(0, i), (torch.arange(5.0), _ix([-1]))),
    ("embedding", lambda w, i: F.embedding(i, w), (torch.zeros(4, 3), _ix([[0, 10]]))),
    ("gather", lambda x, i: x.gather(1, i), (torch.zeros(2, 3), _ix([[0], [3]]))),
    ("scatter", lambda x, i: x.scatter(1, i, 1.0), (torch.zeros(2, 3), _ix([[5]]))),
    (
        "scatter_add",
        lambda x, i, s: x.scatter_add(0, i, s),
        (torch.zeros(3), _ix([-2]), torch.ones(1)),
    ),
    ("take", lambda x, i: x.take(i), (torch.arange(5.0), _ix([10]))),
    ("index_add", lambda x, i, s: x.index_add(0, i, s), (torch.zeros(5), _ix([5]), torch.ones(1))),
    (
        "index_copy",
        lambda x, i, s: x.index_copy(0, i, s),
        (torch.zeros(5), _ix([-1]), torch.ones(1)),
    ),
    ("index_fill", lambda x, i: x.index_fill(0, i, 2.0), (torch.zeros(5), _ix([-6]))),
    ("nll_loss", lambda x, t: F.nll_loss(x, t), (torch.zeros(2, 3), _ix([0, 3]))),
    (
        "cross_entropy",
        lambda x, t: F.cross_entropy(x, t),
        (torch.zeros(2, 3, 2, 2), torch.full((2, 2, 2), -3)),
    ),
    (
        "binary_cross_entropy",
        lambda x, t: F.binary_cross_entropy(x, t),
        (torch.tensor([0.5, 1.5]), torch.ones(2)),
    ),
    ("bernoulli", lambda p: torch.bernoulli(p), (torch.tensor([0.5, -0.5]),)),
    ("multinomial negative", lambda p: torch.multinomial(p, 1), (torch.tensor([0.5, -1.0]),)),
    ("multinomial zero row", lambda p: torch.multinomial(p, 1), (torch.zeros(2, 3),)),
    # torch.linalg's _linalg_check_errors: info read on the host by torch, on the device here.
    ("linalg.inv", lambda a: torch.linalg.inv(a), (torch.zeros(3, 3),)),
    (
        "linalg.inv batched",
        lambda a: torch.linalg.inv(a) * 2,
        (torch.stack([torch.eye(3), torch.diag(torch.tensor([1.0, 0, 1]))]),),
    ),
    ("linalg.solve", lambda a, b: torch.linalg.solve(a, b), (torch.zeros(3, 3), torch.ones(3))),
    (
        "linalg.cholesky batched",
        lambda a: torch.linalg.cholesky(a),
        (torch.stack([torch.eye(3), torch.diag(torch.tensor([1.0, 2, -1]))]),),
    ),
    ("linalg.lu_factor", lambda a: torch.linalg.lu_factor(a)[0], (torch.zeros(2, 2),)),
]

# The same ops with values torch accepts (negative indices where torch allows them).
GOOD = [
    ("index negative", lambda x, i: x[i], (torch.arange(5.0), _ix([-5, -1, 4]))),
    ("take negative", lambda x, i: x.take(i), (torch.arange(5.0), _ix([-1]))),
    ("index_fill negative", lambda x, i: x.index_fill(0, i, 2.0), (torch.zeros(5), _ix([-1]))),
    (
        "nll_loss ignore_index",
        lambda x, t: F.nll_loss(x, t),
        (torch.zeros(2, 3), _ix([0, -100])),
    ),
    ("embedding", lambda w, i: F.embedding(i, w), (torch.zeros(4, 3), _ix([[0, 3]]))),
    ("linalg.inv", lambda a: torch.linalg.inv(a), (torch.eye(3) * 2 + 0.5,)),
]


def _run(fn, args, mode):
    args = [a.to(DEV) for a in args]
    if mode == "eager":
        with lx.eager_mode_context(True):
            return fn(*args).cpu()
    if mode == "compile":
        return lx.compile(fn, name="checks")(*args).cpu()
    if mode == "dynamo":
        torch._dynamo.reset()
        return torch.compile(fn, backend="lazax", dynamic=False)(*args).cpu()
    return fn(*args).cpu()


def _cpu_error(fn, args):
    with pytest.raises(Exception) as cpu:
        fn(*args)
    return cpu.value


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("name", "fn", "args"), BAD, ids=[b[0] for b in BAD])
def test_a_bad_value_raises_torchs_error(name, fn, args, mode):
    expected = _cpu_error(fn, args)
    with pytest.raises(type(expected)) as got:
        _run(fn, args, mode)
    assert type(got.value) is type(expected)
    first_line = str(got.value).splitlines()[0]
    assert first_line == str(expected).splitlines()[0]
    assert "raised by a check on the device" in str(got.value)
    assert not CHECKS.unread


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("name", "fn", "args"), GOOD, ids=[g[0] for g in GOOD])
def test_values_torch_accepts_do_not_raise(name, fn, args, mode):
    torch.testing.assert_close(_run(fn, args, mode), fn(*args))


def test_a_linalg_check_nothing_reads_raises_at_the_next_sync_without_a_host_read():
    # torch.linalg.inv's check returns nothing: lazax holds it until a graph runs it.
    a = torch.zeros(3, 3).to(DEV)
    lx.sync()
    lx.metrics.clear_all()
    torch.linalg.inv(a)  # the result is dropped, and the check with it on the CPU
    assert lx.metrics.metric_data("ExecuteTime") is None  # nothing ran, nothing read
    assert lx.metrics.counter_value("aten::_linalg_check_errors") is None
    with pytest.raises(torch.linalg.LinAlgError, match="diagonal element 1 is zero"):
        lx.sync(wait=True)
    lx.sync(wait=True)  # raised once: the check is not held again


def test_a_read_of_another_tensor_runs_the_held_linalg_check():
    b = torch.ones(3).to(DEV)
    x = torch.linalg.solve(torch.zeros(3, 3).to(DEV), b)
    with pytest.raises(torch.linalg.LinAlgError, match="input matrix is singular"):
        (b * 2).cpu()
    assert x.cpu().shape == (3,)  # the solver's (non-finite) result stays readable


def test_the_error_names_the_op_and_the_line_that_traced_it():
    x = torch.arange(5.0).to(DEV)
    i = torch.tensor([7]).to(DEV)
    y = x[i]
    line = sys._getframe().f_lineno - 1
    with pytest.raises(IndexError) as err:
        y.cpu()
    text = str(err.value)
    assert "index 7 is out of bounds for dimension 0 with size 5" in text
    assert f"aten::index.Tensor traced at {__file__}:{line}" in text


def test_without_donation_the_bad_tensor_goes_back_and_the_rest_keeps_its_result():
    x = torch.arange(5.0).to(DEV)
    good_index, bad_index = torch.tensor([1]).to(DEV), torch.tensor([9]).to(DEV)
    good = x[good_index] * 2
    bad = x[bad_index]
    with pytest.raises(IndexError, match="donated nothing"):
        lx.sync(wait=True)  # waits for the graph, so reads its checks
    assert good.cpu().tolist() == [2.0]  # computed by the same graph, kept
    with pytest.raises(IndexError):  # still pending: raises again, as often as read
        bad.cpu()
    with pytest.raises(IndexError):  # and so does what is computed from it
        (bad + 1).cpu()
    lx.sync()  # a sync of everything leaves the bad tensor alone
    assert x.cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_a_donated_graph_keeps_its_results_and_says_so():
    w = torch.nn.Parameter(torch.zeros(4, 3).to(DEV))
    opt = torch.optim.SGD([w], lr=0.1)
    F.embedding(torch.tensor([0, 1]).to(DEV), w).sum().backward()
    opt.step()
    lx.sync()
    loss = F.embedding(torch.tensor([5]).to(DEV), w).sum()
    loss.backward()
    opt.step()
    del loss
    with pytest.raises(IndexError, match="inputs were donated") as err:
        lx.sync(wait=True)
    assert "index out of range in self" in str(err.value)
    assert w.detach().cpu().shape == (4, 3)  # readable: the step's result


def test_eager_raises_at_the_op():
    x = torch.arange(5.0).to(DEV)
    with lx.eager_mode_context(True):
        with pytest.raises(IndexError, match="Eager mode: the op raised"):
            x.index_select(0, torch.tensor([5]).to(DEV))
        assert x.index_select(0, torch.tensor([4]).to(DEV)).cpu().tolist() == [4.0]


def test_an_eager_in_place_write_out_of_range_leaves_its_target_as_it_was():
    x = torch.arange(5.0).to(DEV)
    view = x[1:]
    with lx.eager_mode_context(True):
        with pytest.raises(IndexError, match="index 9 is out of bounds"):
            x[torch.tensor([9]).to(DEV)] = 7.0
        with pytest.raises(IndexError, match="index 4 is out of bounds"):
            view.index_fill_(0, torch.tensor([4]).to(DEV), -1.0)
        x.add_(1)  # the tensors go on working
    assert x.cpu().tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert view.cpu().tolist() == [2.0, 3.0, 4.0, 5.0]


def test_checks_compile_once_and_read_nothing_inside_a_full_graph_region():
    w = torch.randn(6, 4).to(DEV)

    @lx.compile(full_graph=True, name="lookup")
    def lookup(i):
        return F.embedding(i, w).sum(0)

    compiles = lx.metrics.counter_value("UncachedCompile") or 0
    for k in range(4):
        lookup(torch.tensor([k, k + 1]).to(DEV))  # no host read inside: no error
    assert (lx.metrics.counter_value("UncachedCompile") or 0) - compiles == 1
    out = lookup(torch.tensor([2, 6]).to(DEV))  # bad: reported at the read
    with pytest.raises(IndexError, match="in graph 'lookup'"):
        out.cpu()


def test_a_dynamo_replay_checks_without_a_host_read():
    table = torch.randn(5, 2).to(DEV)
    fn = torch.compile(lambda i: table[i] + 1, backend="lazax")
    fn(torch.tensor([0]).to(DEV))
    reads = lx.metrics.metric_data("TransferFromDeviceTime")
    before = reads[0] if reads else 0
    for k in range(3):
        fn(torch.tensor([k]).to(DEV))
    reads = lx.metrics.metric_data("TransferFromDeviceTime")
    assert (reads[0] if reads else 0) == before
    out = fn(torch.tensor([8]).to(DEV))
    with pytest.raises(IndexError, match="replayed graph's results are kept"):
        out.cpu()


def test_unread_checks_stay_bounded():
    x = torch.arange(5.0).to(DEV)
    for k in range(20):
        y = x[torch.tensor([k % 5]).to(DEV)]
        lx.sync()
    assert len(CHECKS.unread) <= 5
    assert y.cpu().tolist() == [4.0]


def test_turning_checks_off_is_a_different_program():
    x = torch.arange(11.0).to(DEV)  # shapes no other test uses
    i = torch.tensor([1, 2, 3]).to(DEV)
    compiles = lx.metrics.counter_value("UncachedCompile") or 0
    (x[i] + 1).cpu()
    CHECKS.enabled = False
    try:
        (x[i] + 1).cpu()
        (x[i] + 1).cpu()
    finally:
        CHECKS.enabled = True
    (x[i] + 1).cpu()
    assert (lx.metrics.counter_value("UncachedCompile") or 0) - compiles == 2


def test_lazax_checks_0_turns_them_off():
    script = textwrap.dedent(
        """
        import torch, lazax.modes as lx
        x = torch.arange(5.0).to(lx.device())
        print(x[torch.tensor([7]).to(lx.device())].cpu().tolist())
        """
    )
    env = {**os.environ, "LAZAX_CHECKS": "0"}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[4.0]"  # XLA clamps: the last element


@pytest.mark.skipif(lx.device_count() < 8, reason="needs 8 devices (the root conftest sets them)")
def test_checks_in_a_sharded_program():
    mesh = lx.Mesh(range(8), (2, 4), ("data", "model"))
    weight = torch.randn(16, 8)
    w = weight.to(DEV)
    lx.mark_sharding(w, mesh, (None, "model"))
    tokens = torch.tensor([[1, 2], [3, 4]]).to(DEV)
    lx.mark_sharding(tokens, mesh, ("data", None))
    torch.testing.assert_close(F.embedding(tokens, w).cpu(), F.embedding(tokens.cpu(), weight))
    bad = torch.tensor([[1, 2], [3, 16]]).to(DEV)
    lx.mark_sharding(bad, mesh, ("data", None))
    with pytest.raises(IndexError, match="index out of range in self"):
        F.embedding(bad, w).cpu()
