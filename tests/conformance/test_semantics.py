"""torch semantics beside the OpInfo run, in every mode: views and in-place writes,
tensor metadata, type promotion, empty / 0-dim / non-contiguous inputs, broadcasting,
errors, and data-dependent output shapes.

Each case is a function of CPU tensors; it runs on the CPU and on lazax (its tensor
arguments moved there) in each mode, and the results must match exactly in dtype and
shape, and in value within the dtype's tolerance.
"""

import math
import re

import pytest
import torch
from torch.utils._pytree import tree_flatten

import lazax.modes as lx

from .harness import _in_mode

MODES = ("lazy", "eager", "compile", "dynamo")


def same(fn, *args, mode: str, exact: bool = False):
    expected = fn(*args)
    moved = [a.to(lx.device()) if isinstance(a, torch.Tensor) else a for a in args]
    got = _in_mode(fn, mode)(*moved)
    flat_got, got_spec = tree_flatten(got)
    flat_expected, expected_spec = tree_flatten(expected)
    assert got_spec == expected_spec
    for g, e in zip(flat_got, flat_expected):
        if not isinstance(e, torch.Tensor):
            assert g == e or (math.isnan(g) and math.isnan(e)), (g, e)
            continue
        assert g.device.type == "lazax"
        g = g.cpu()
        assert (g.dtype, g.shape) == (e.dtype, e.shape)
        tol = {"rtol": 0, "atol": 0} if exact else {}
        torch.testing.assert_close(g, e, equal_nan=True, **tol)


@pytest.fixture(params=MODES)
def mode(request):
    return request.param


# -- views and in-place writes ---------------------------------------------------------


def write_through_index(x, y):
    base = x.clone()
    row = base[1]  # a sibling view, made before the write
    base[torch.tensor([0, 2])] = y
    base[:, 0] = -1.0
    return base, row


def transpose_in_place(x):
    base = x.clone()
    view = base[0]
    base.t_()
    base[0, 1] = 7.0  # written through the transposed base: reaches ``view``
    return base, view, base.contiguous()


def add_through_column(x):
    base = x.clone()
    row = base[2]
    base[:, 1].add_(1)
    return base, row


def zero_through_flat_view(x):
    base = x.clone()
    sibling = base[1:, 1:]
    base.view(-1).zero_()
    return base, sibling


@pytest.mark.parametrize(
    "case",
    [write_through_index, transpose_in_place, add_through_column, zero_through_flat_view],
)
def test_writes_through_views_reach_the_base_and_its_other_views(case, mode):
    x = torch.arange(12.0).reshape(3, 4)
    args = (x, torch.full((2, 4), 5.0)) if case is write_through_index else (x,)
    same(case, *args, mode=mode, exact=True)


VIEWS = {
    "transpose": lambda x: x.transpose(0, 2),
    "t": lambda x: x[0].t(),
    "strided_slice": lambda x: x[1:, ::2],
    "expand": lambda x: x[:1].expand(3, 4, 5),
    "permute": lambda x: x.permute(2, 0, 1),
    "narrow": lambda x: x.narrow(2, 1, 3),
    "diagonal": lambda x: x.diagonal(0, 1, 2),
    "unsqueeze": lambda x: x[:, 0].unsqueeze(1),
    "as_strided": lambda x: x.as_strided((2, 2), (7, 2), 3),
    "select_then_view": lambda x: x[2].view(20),
}


@pytest.mark.parametrize("name", list(VIEWS))
def test_view_metadata_is_torchs(name):
    x = torch.randn(3, 4, 5)
    expected = VIEWS[name](x)
    got = VIEWS[name](x.to(lx.device()))
    assert got.shape == expected.shape
    assert got.stride() == expected.stride()
    assert got.storage_offset() == expected.storage_offset()
    assert got.is_contiguous() == expected.is_contiguous()
    torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0)


# -- type promotion ----------------------------------------------------------------------

BIG = torch.tensor([2**40 + 1, -(2**62) + 3, 7])
PROMOTION = {
    "int64_stays_int64": (lambda a: a * 3 + 1, BIG),
    "int64_sum_exact": (lambda a: a.sum(), BIG),
    "float64_stays_float64": (
        lambda a: a + 1e-12,
        torch.tensor([1.0, 2.0], dtype=torch.float64),
    ),
    "int_plus_float_tensor": (lambda a, b: a + b, torch.tensor([1, 2]), torch.tensor([0.5, 1.5])),
    "int_plus_python_float": (lambda a: a + 2.5, torch.tensor([1, 2])),
    "int_true_division": (lambda a: a / 2, torch.tensor([3, -3])),
    "int32_plus_int64": (
        lambda a, b: a + b,
        torch.tensor([1], dtype=torch.int32),
        torch.tensor([2**33]),
    ),
    "bool_plus_bool": (lambda a, b: a + b, torch.tensor([True, False]), torch.tensor([True, True])),
    "bool_times_int": (lambda a: a * 3, torch.tensor([True, False])),
    "bool_sum": (lambda a: a.sum(), torch.tensor([True, False, True])),
    "bf16_with_python_float": (lambda a: a * 0.1, torch.tensor([3.0], dtype=torch.bfloat16)),
    "floor_divide_signs": (
        lambda a, b: (a // b, torch.div(a, b, rounding_mode="trunc")),
        torch.tensor([7, -7, 7, -7]),
        torch.tensor([2, 2, -2, -2]),
    ),
    "remainder_and_fmod_signs": (
        lambda a, b: (a % b, torch.remainder(a, b), torch.fmod(a, b)),
        torch.tensor([7, -7, 7, -7]),
        torch.tensor([3, 3, -3, -3]),
    ),
    "float_remainder_signs": (
        lambda a, b: (a % b, torch.fmod(a, b)),
        torch.tensor([5.5, -5.5, 5.5, -5.5]),
        torch.tensor([2.0, 2.0, -2.0, -2.0]),
    ),
    "nan_and_inf": (
        lambda a: (a.max(), a.min(), a.sum(), torch.maximum(a, a.flip(0)), a * 0, a.clamp(0, 1)),
        torch.tensor([1.0, math.nan, math.inf, -math.inf]),
    ),
    "inf_arithmetic": (
        lambda a: (a - a, a / a, 1 / (a * 0), a.exp(), (-a).exp()),
        torch.tensor([math.inf, 1.0]),
    ),
}


@pytest.mark.parametrize("name", list(PROMOTION))
def test_type_promotion_is_torchs(name, mode):
    fn, *args = PROMOTION[name]
    same(fn, *args, mode=mode, exact=args[0].dtype != torch.bfloat16)


# -- empty, 0-dim, non-contiguous, broadcasting ------------------------------------------

SHAPES = {
    "empty_reductions": (
        lambda a: (a.sum(), a.prod(), a.mean(), a.sum(0), a.amax(1)),
        torch.empty(0, 3),
    ),
    "empty_matmul_and_cat": (
        lambda a, b: (a @ b, torch.cat([a, a]), a.t() @ a),
        torch.empty(0, 3),
        torch.randn(3, 2),
    ),
    "zero_dim": (
        lambda a, b: (a + b, a * 2, (a + b).sum(0), torch.stack([a, a])),
        torch.tensor(2.5),
        torch.randn(4),
    ),
    "non_contiguous_inputs": (
        lambda a, b: (a.t() @ b[::2], a.t().softmax(1), a[:, ::2] + b[::2, :2]),
        torch.randn(6, 4),
        torch.randn(12, 5),
    ),
    "broadcasting": (
        lambda a, b: (a + b, torch.where(a > 0, a, b), a * b.sum(0)),
        torch.randn(3, 1),
        torch.randn(1, 4),
    ),
}


@pytest.mark.parametrize("name", list(SHAPES))
def test_shapes_torch_accepts(name, mode):
    fn, *args = SHAPES[name]
    same(fn, *args, mode=mode)


ERRORS = {
    "broadcast_mismatch": (
        lambda a, b: a + b,
        (torch.randn(3, 4), torch.randn(3, 5)),
        RuntimeError,
        "The size of tensor a (4) must match the size of tensor b (5) at non-singleton dimension 1",
    ),
    "matmul_shapes": (
        lambda a, b: a @ b,
        (torch.randn(3, 4), torch.randn(5, 2)),
        RuntimeError,
        "mat1 and mat2 shapes cannot be multiplied (3x4 and 5x2)",
    ),
    "reduce_empty_without_identity": (
        lambda a: a.amax(0),
        (torch.empty(0, 3),),
        IndexError,
        "amax(): Expected reduction dim 0 to have non-zero size.",
    ),
    "view_of_incompatible_strides": (
        lambda a: a.t().view(-1),
        (torch.randn(3, 4),),
        RuntimeError,
        "view size is not compatible with input tensor's size and stride",
    ),
    "in_place_broadcast_to_smaller": (
        lambda a, b: a.add_(b),
        (torch.randn(1, 4), torch.randn(3, 4)),
        RuntimeError,
        "output with shape [1, 4] doesn't match the broadcast shape [3, 4]",
    ),
}


@pytest.mark.parametrize("name", list(ERRORS))
def test_errors_are_torchs(name):
    fn, args, kind, message = ERRORS[name]
    with pytest.raises(kind, match=re.escape(message)):
        fn(*[a.clone() for a in args])  # torch's own error, to keep the test honest
    with pytest.raises(kind, match=re.escape(message)):
        fn(*[a.to(lx.device()) for a in args])


# -- data-dependent output shapes --------------------------------------------------------

DATA_DEPENDENT = {
    "nonzero": (
        lambda a: (a.nonzero(), torch.nonzero(a, as_tuple=True)),
        torch.tensor([[0, 3, 0], [2, 0, 1]]),
    ),
    "masked_select": (lambda a: a.masked_select(a > 0), torch.randn(4, 5)),
    "unique": (
        lambda a: torch.unique(a, sorted=True, return_inverse=True, return_counts=True),
        torch.tensor([3, 1, 3, 2, 1, 3]),
    ),
    "unique_dim": (lambda a: torch.unique(a, dim=0), torch.tensor([[1, 2], [0, 1], [1, 2]])),
    "boolean_mask_read": (lambda a: (a[a > 0], a[a.sum(1) > 0]), torch.randn(5, 3)),
    "boolean_mask_write": (
        lambda a: a.clone().index_put_((a < 0,), torch.tensor(0.0)),
        torch.randn(5, 3),
    ),
    "where_one_argument": (lambda a: torch.where(a > 0), torch.randn(3, 3)),
}


@pytest.mark.parametrize("name", list(DATA_DEPENDENT))
def test_data_dependent_shapes_give_the_right_answer(name, mode):
    fn, *args = DATA_DEPENDENT[name]
    same(fn, *args, mode=mode, exact=True)
