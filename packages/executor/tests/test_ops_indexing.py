"""Indexing/layout lowerings match torch's CPU kernels with no CPU fallback: cat/stack,
advanced indexing (index, index_put incl. accumulate and boolean masks), index_select,
take, index_add/copy/fill, gather, scatter (+ reductions), triu/tril, arange, flip,
roll, repeat, constant_pad_nd, sort, topk."""

import math

import pytest
import torch
import torch.nn.functional as F

import lazax.executor as lx
from lazax.executor.testing import check_against_cpu

DEV = "lazax"


torch.manual_seed(0)
X = torch.randn(3, 4)
X3 = torch.randn(2, 3, 4)
XI = torch.randint(-5, 6, (3, 4))
IDX = torch.tensor([2, 0, -1])
SRC = torch.randn(3, 4)
# Distinct positions along dim 1 per row, so scatter "set" has no ties.
SCATTER_IDX = torch.tensor([[1, 0, 3], [2, 3, 0]])
DUP_IDX = torch.tensor([[1, 1, 3], [0, 0, 0]])


def put(x, indices, values, accumulate=False):
    return x.clone().index_put_(indices, values, accumulate=accumulate)


def setitem(x, key, v):
    x = x.clone()
    x[key] = v
    return x


CASES = {
    "cat": (lambda a, b: torch.cat([a, b]), X, SRC),
    "cat_last_dim_transposed": (lambda a, b: torch.cat([a.t(), b.t()], -1), X, SRC),
    "cat_promotes": (lambda a, b: torch.cat([a, b], 1), XI, X),
    "cat_skips_legacy_empty": (lambda a, e: torch.cat([a, e, a]), X, torch.zeros(0)),
    "cat_bf16": (lambda a, b: torch.cat([a, b]), X.bfloat16(), SRC.bfloat16()),
    "stack": (lambda a, b: torch.stack([a, b]), X, SRC),
    "stack_last": (lambda a, b: torch.stack([a, b], -1), X, SRC),
    "index_first": (lambda x, i: x[i], X, IDX),
    "index_middle": (lambda x, i: x[:, i], X3, torch.tensor([[0, 2], [1, 1]])),
    "index_two_adjacent": (lambda x, i, j: x[:, i, j], X3, IDX, torch.tensor([3, 0, 1])),
    "index_two_separated": (lambda x, i, j: x[i, :, j], X3, torch.tensor([1, 0]), IDX[:2]),
    "index_broadcast_int32": (
        lambda x, i, j: x[i, j],
        X,
        torch.tensor([[0], [2]], dtype=torch.int32),
        torch.tensor([1, 3]),
    ),
    "index_bf16": (lambda x, i: x[i], X.bfloat16(), IDX),
    "index_put": (lambda x, i, v: put(x, (i,), v), X, torch.tensor([2, 0]), SRC[:2]),
    "setitem_broadcast_scalar": (lambda x, i: setitem(x, (slice(None), i), 7.0), X, IDX),
    "index_put_accumulate_duplicates": (
        lambda x, i, v: put(x, (i,), v, accumulate=True),
        X,
        torch.tensor([1, 1, 0, 1]),
        torch.randn(4, 4),
    ),
    "index_put_two": (
        lambda x, i, j, v: put(x, (i, j), v, accumulate=True),
        XI,
        torch.tensor([0, 2, 0]),
        torch.tensor([3, 3, 3]),
        torch.tensor([10, 20, 30]),
    ),
    "setitem_mask_scalar": (lambda x: setitem(x, x > 0, 0.0), X),
    "setitem_mask_values": (lambda x, v: setitem(x, x > 0, v), X, SRC[X > 0]),
    "setitem_mask_rows": (
        lambda x, m, v: setitem(x, m, v),
        X,
        torch.tensor([True, False, True]),
        SRC[:2],
    ),
    "setitem_mask_rows_broadcast": (
        lambda x, m, v: setitem(x, m, v),
        X,
        torch.tensor([True, False, True]),
        SRC[0],
    ),
    "setitem_mask_middle": (
        lambda x, m, v: setitem(x, (slice(None), m), v),
        X3,
        torch.tensor([[True, False, True, False], [False, False, True, True], [True] * 4]),
        torch.randn(2, 8),
    ),
    "index_put_mask_and_index": (
        lambda x, m, i, v: put(x, (m, i), v),
        X,
        torch.tensor([True, False, True]),
        torch.tensor([3, 0]),
        torch.tensor([10.0, 20.0]),
    ),
    "index_put_mask_accumulate": (
        lambda x, m, v: put(x, (m,), v, accumulate=True),
        X,
        torch.tensor([True, False, True]),
        SRC[1],
    ),
    "index_select": (lambda x, i: x.index_select(1, i), X, IDX.abs()),
    "index_select_0d": (lambda x, i: x.index_select(0, i), torch.tensor(3.0), torch.tensor([0])),
    "take": (lambda x, i: torch.take(x, i), X, torch.tensor([[0, 11], [5, -1]])),
    "index_add": (lambda x, i, s: x.index_add(1, i, s, alpha=2.0), X, DUP_IDX[0], SRC[:, :3]),
    "index_copy": (lambda x, i, s: x.index_copy(0, i, s), X, torch.tensor([2, 0]), SRC[:2]),
    "index_fill": (lambda x, i: x.index_fill(1, i, -2.5), X, IDX.abs()),
    "gather": (lambda x, i: x.gather(1, i), X, SCATTER_IDX),
    "gather_dim0_transposed": (lambda x, i: x.t().gather(0, i), X, torch.tensor([[2, 0, 1]])),
    "gather_0d": (lambda x, i: x.gather(0, i), torch.tensor(2.0), torch.tensor(0)),
    "scatter_src": (lambda x, i, s: x.scatter(1, i, s), X, SCATTER_IDX, SRC),
    "scatter_value": (lambda x, i: x.scatter(1, i, 5.0), X, SCATTER_IDX),
    "scatter_reduce_add": (lambda x, i, s: x.scatter(1, i, s, reduce="add"), X, DUP_IDX, SRC),
    "scatter_reduce_multiply": (
        lambda x, i, s: x.scatter(1, i, s, reduce="multiply"),
        X,
        DUP_IDX,
        SRC,
    ),
    "scatter_add": (lambda x, i, s: x.scatter_add(1, i, s), X, DUP_IDX, SRC),
}
for _reduce in ("sum", "prod", "mean", "amax", "amin"):
    for _self in (True, False):
        CASES[f"scatter_reduce_{_reduce}_{_self}"] = (
            lambda x, i, s, r=_reduce, inc=_self: x.scatter_reduce(1, i, s, r, include_self=inc),
            X,
            DUP_IDX,
            SRC,
        )
CASES.update(
    {
        "scatter_reduce_mean_int": (
            lambda x, i, s: x.scatter_reduce(1, i, s, "mean", include_self=True),
            XI,
            DUP_IDX,
            XI * 3,
        ),
        "scatter_reduce_amax_int_excl": (
            lambda x, i, s: x.scatter_reduce(1, i, s, "amax", include_self=False),
            XI,
            DUP_IDX,
            XI * 3,
        ),
        "triu": (lambda x: x.triu(), X),
        "tril_diag_batched": (lambda x: x.tril(-1), X3),
        "triu_bool_diag": (lambda x: torch.triu(x, 2), torch.ones(4, 4, dtype=torch.bool)),
        "arange": (lambda d: torch.arange(5, device=d.device), torch.zeros(1)),
        "arange_start_step": (lambda d: torch.arange(-3, 10, 3, device=d.device), torch.zeros(1)),
        "arange_float": (lambda d: torch.arange(0.5, 2.0, 0.25, device=d.device), torch.zeros(1)),
        "arange_dtype": (
            lambda d: torch.arange(7, dtype=torch.float32, device=d.device),
            torch.zeros(1),
        ),
        "arange_tenth": (lambda d: torch.arange(0, 3, 0.1, device=d.device), torch.zeros(1)),
        "arange_negative_step_bf16": (
            lambda d: torch.arange(4, -2, -0.5, dtype=torch.bfloat16, device=d.device),
            torch.zeros(1),
        ),
        "arange_int_float_args": (  # torch truncates start and step first: 2, 1, 0, -1
            lambda d: torch.arange(2.1, -2.9, -1.0, dtype=torch.int64, device=d.device),
            torch.zeros(1),
        ),
        "arange_int_fraction_step": (
            lambda d: torch.arange(0.5, 5, 1.5, dtype=torch.int64, device=d.device),
            torch.zeros(1),
        ),
        "full": (lambda d: torch.full((2, 3), -1.5, device=d.device), torch.zeros(1)),
        "full_int_bool_complex": (
            lambda d: [
                torch.full((3,), 7, device=d.device),
                torch.full((2,), True, device=d.device),
                torch.full((2,), 1 + 2j, device=d.device),
            ],
            torch.zeros(1),
        ),
        "linspace": (lambda d: torch.linspace(-2.0, 3.0, 11, device=d.device), torch.zeros(1)),
        "linspace_one_and_none": (
            lambda d: [
                torch.linspace(4.3, 9, 1, device=d.device),
                torch.linspace(0, 1, 0, device=d.device),
            ],
            torch.zeros(1),
        ),
        "linspace_int_wraps_uint8": (  # start converts to uint8 first (253), as torch's Scalar::to
            lambda d: torch.linspace(-3, 7, 11, dtype=torch.uint8, device=d.device),
            torch.zeros(1),
        ),
        "linspace_bf16": (
            lambda d: torch.linspace(0.3, 17.9, 9, dtype=torch.bfloat16, device=d.device),
            torch.zeros(1),
        ),
        "linspace_tensor_ends": (lambda d: torch.linspace(d[0], d[0] + 1, 5), torch.zeros(1)),
        "logspace": (lambda d: torch.logspace(-1, 2, 7, base=2.0, device=d.device), torch.zeros(1)),
        "tril_triu_indices": (
            lambda d: [
                f(r, c, o, device=d.device)
                for f in (torch.tril_indices, torch.triu_indices)
                for r, c, o in ((4, 4, 0), (3, 5, 1), (5, 3, -2), (0, 3, 0), (3, 3, 9), (3, 3, -9))
            ],
            torch.zeros(1),
        ),
        # XLA has no add or multiply on bool: torch's bool sum is "or", product "and".
        "scatter_add_bool": (
            lambda x, i, s: x.scatter_add(1, i, s),
            torch.tensor([[True, False, False, False], [False] * 4]),
            DUP_IDX,
            torch.tensor([[False, True, True], [True, False, False]]),
        ),
        "scatter_reduce_prod_bool": (
            lambda x, i, s: x.scatter_reduce(1, i, s, "prod", include_self=False),
            torch.ones(2, 4, dtype=torch.bool),
            DUP_IDX,
            torch.tensor([[False, True, True], [True, True, True]]),
        ),
        "index_add_bool": (
            lambda x, i, s: x.index_add(0, i, s),
            torch.zeros(3, 2, dtype=torch.bool),
            torch.tensor([0, 0, 2]),
            torch.tensor([[True, False], [False, False], [False, True]]),
        ),
        "index_put_accumulate_bool": (
            lambda x, i, v: put(x, (i,), v, accumulate=True),
            torch.zeros(3, dtype=torch.bool),
            torch.tensor([1, 1, 0]),
            torch.tensor([True, False, False]),
        ),
        "flip": (lambda x: x.flip(0, -1), X3),
        "roll": (lambda x: x.roll(2, 1), X),
        "roll_multi": (lambda x: x.roll((1, -1), (0, 2)), X3),
        "roll_flat": (lambda x: x.roll(5), X),
        "repeat": (lambda x: x.repeat(2, 1, 3), X),
        "pad": (lambda x: F.pad(x, (1, 2)), X3),
        "pad_value_two_dims": (lambda x: F.pad(x, (1, 0, 2, 1), value=-3.5), X3),
        "pad_negative_crops": (lambda x: F.pad(x, (-1, 1, 0, -1)), X),
        "pad_int": (lambda x: F.pad(x, (2, 2), value=7), XI),
        "sort": (lambda x: x.sort(), X),
        "sort_desc_dim0": (lambda x: x.sort(0, descending=True), X),
        "sort_stable_ties": (lambda x: torch.sort(x, stable=True), torch.tensor([3, 1, 3, 1, 2])),
        "sort_stable_ties_desc": (
            lambda x: torch.sort(x, stable=True, descending=True),
            torch.tensor([3, 1, 3, 1, 2]),
        ),
        "sort_nan": (lambda x: x.sort(), torch.tensor([1.0, math.nan, -1.0, math.inf])),
        "argsort": (lambda x: x.argsort(1), X),
        "topk": (lambda x: x.topk(2), X),
        "topk_smallest_dim0": (lambda x: x.topk(2, 0, largest=False), X),
        "topk_int": (lambda x: x.topk(3), torch.tensor([[5, 1, 9, 3], [0, 7, 2, 8]])),
        "topk_int_smallest": (lambda x: x.topk(1, largest=False), torch.tensor([[5, 1, 9, 3]])),
        "searchsorted": (
            lambda s, v: torch.searchsorted(s, v),
            torch.tensor([0.0, 1.0, 1.0, 3.0]),
            torch.tensor([[1.0, -1.0], [2.5, 9.0]]),
        ),
        "searchsorted_right_batched_int32": (
            lambda s, v: torch.searchsorted(s, v, right=True, out_int32=True),
            torch.tensor([[0.0, 1.0, 1.0], [2.0, 4.0, 6.0]]),
            torch.tensor([[1.0, 0.5], [4.0, 7.0]]),
        ),
        "searchsorted_sorter": (
            lambda s, v, o: torch.searchsorted(s, v, sorter=o, side="right"),
            torch.tensor([3.0, 1.0, 2.0]),
            torch.tensor([2.0, 0.0]),
            torch.tensor([1, 2, 0]),
        ),
        "bucketize": (
            lambda v, b: torch.bucketize(v, b),
            X,
            torch.tensor([-1.0, 0.0, 1.0]),
        ),
        "diag_embed": (lambda x: torch.diag_embed(x), X),
        "diag_embed_offset_dims": (lambda x: torch.diag_embed(x, 1, 0, 2), X),
        "diag_embed_negative_offset": (lambda x: torch.diag_embed(x, -2), X),
    }
)


@pytest.mark.parametrize("name", list(CASES))
def test_indexing(name, no_fallback):
    fn, *args = CASES[name]
    check_against_cpu(fn, *args)


def test_index_with_bool_mask_runs_through_the_fallback():
    # A data-dependent shape: no static spec, so the call takes the CPU fallback.
    x = X.to(DEV)
    before = lx.metrics.counter_value("aten::index") or 0
    torch.testing.assert_close(x[x > 0].cpu(), X[X > 0])
    torch.testing.assert_close(x[x > 0.5].cpu(), X[X > 0.5])
    assert lx.metrics.counter_value("aten::index") == before + 2


def test_factory_out_overloads_windows_and_narrow(no_fallback):
    # torch's window functions fill an out= arange and narrow the periodic ones, in
    # kernels below autograd: every step on the device.
    for window in (
        torch.hann_window,
        torch.hamming_window,
        torch.blackman_window,
        torch.bartlett_window,
    ):
        for periodic in (True, False):
            torch.testing.assert_close(window(9, periodic, device=DEV).cpu(), window(9, periodic))
    # kaiser_window fills through torch's DispatchStub, which has no lazax kernel: lowered.
    for args in ((9,), (9, False), (8, True, 5.0), (0,), (1,)):
        for dtype in (torch.float32, torch.float64, torch.bfloat16):
            got = torch.kaiser_window(*args, dtype=dtype, device=DEV)
            torch.testing.assert_close(got.cpu(), torch.kaiser_window(*args, dtype=dtype))
    with pytest.raises(RuntimeError, match="requires non-negative window_length"):
        torch.kaiser_window(-1, device=DEV)
    cases = [
        (lambda out: torch.arange(5, out=out), torch.empty(3)),  # resized, as torch
        (lambda out: torch.arange(1, 9, 2, out=out), torch.empty(0, dtype=torch.int32)),
        (lambda out: torch.linspace(0, 1, 5, out=out), torch.empty(5)),
        (lambda out: torch.full((2, 2), 3, out=out), torch.empty(4, dtype=torch.int64)),
    ]
    for fill, out in cases:
        expected = fill(out.clone())
        got = fill(out.to(DEV))
        assert got.dtype == expected.dtype and got.shape == expected.shape
        torch.testing.assert_close(got.cpu(), expected)
    x = torch.randn(5, 3)
    for args in ((0, -2, 2), (1, 0, 2), (0, 5, 0)):
        torch.testing.assert_close(torch.ops.aten.narrow(x.to(DEV), *args).cpu(), x.narrow(*args))
    with pytest.raises(
        IndexError, match=r"start out of range \(expected to be in range of \[-5, 5\], but got 6\)"
    ):
        torch.ops.aten.narrow(x.to(DEV), 0, 6, 0)
    with pytest.raises(
        RuntimeError, match=r"start \(3\) \+ length \(3\) exceeds dimension size \(5\)"
    ):
        torch.ops.aten.narrow(x.to(DEV), 0, 3, 3)
