"""histc, bincount and nonzero on the device, against torch on the CPU, with no CPU
fallback.

histc: floating inputs match the CPU kernel bin for bin (float32, float64, bfloat16; a
given range, the data's range, a constant input; elements outside the range and NaN
not counted); integer inputs, which only CUDA's kernel takes, match the CPU's float64
histogram of the same values; a range that is not finite raises torch's error; the
whole op stays in one program (``compile(full_graph=True)``). bincount: counts and
weighted sums in torch's dtypes, ``minlength``, empty inputs and torch's errors; its
length is read from the device once, so a full-graph region refuses it. nonzero (and
``torch.where(cond)``, ``argwhere``): one program per input shape computes the count and
the positions, whatever the count."""

import pytest
import torch

import lazax.modes as lx
from lazax.executor.testing import check_against_cpu, deferred_check, no_cpu_fallback

DEV = "lazax"

torch.manual_seed(0)
X = torch.randn(1000)
WITH_NAN = torch.tensor([0.5, float("nan"), 1.5, -3.0, 9.0, 2.0])

FLOAT_CASES = {
    "data_range": (lambda x: torch.histc(x, bins=10), X),
    "given_range": (lambda x: torch.histc(x, bins=7, min=-1, max=1), X),
    "one_bin": (lambda x: torch.histc(x, bins=1, min=-0.5, max=0.5), X),
    "many_bins": (lambda x: torch.histc(x, bins=333), X),
    "float64": (lambda x: torch.histc(x, bins=13, min=-2, max=3), X.double()),
    # Under 256 per bin: bfloat16 counts are exact (see the lowering's contract).
    "bfloat16": (lambda x: torch.histc(x, bins=10), X[:250].bfloat16()),
    "bfloat16_range": (lambda x: torch.histc(x, bins=9, min=-1.3, max=2.1), X[:250].bfloat16()),
    "constant_input": (lambda x: torch.histc(x, bins=4), torch.full((5,), 2.0)),
    "nan_and_outliers_dropped": (lambda x: torch.histc(x, bins=4, min=0, max=2), WITH_NAN),
    "edges_exactly": (lambda x: torch.histc(x, bins=4, min=0, max=4), torch.arange(5.0)),
    "matrix_input": (lambda x: torch.histc(x, bins=6), X[:60].reshape(6, 10)),
    "empty": (lambda x: torch.histc(x, bins=3), torch.zeros(0)),
}


def test_histc_floating_inputs_match_the_cpu():
    with no_cpu_fallback():
        for fn, x in FLOAT_CASES.values():
            deferred_check(fn, x)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8])
def test_histc_integer_inputs_count_as_cuda_does(dtype):
    """torch's CPU kernel has no integer version (CUDA's has): the oracle is the CPU
    histogram of the same values in float64."""
    ids = torch.randint(0, 8, (100,)).to(dtype)
    spread = torch.randint(0, 200, (300,)).to(dtype)
    cases = [
        (ids, dict(bins=8, min=0, max=7)),  # transformers' tokens per expert
        (ids, dict(bins=5, min=2, max=6)),
        (spread, dict(bins=7)),  # the data's range
        (spread, dict(bins=30, min=10, max=100)),
        (torch.full((3,), 4).to(dtype), dict(bins=4)),
    ]
    with no_cpu_fallback():
        got = [torch.histc(x.to(DEV), **kw) for x, kw in cases]
        got = [g.cpu() for g in got]
    for (x, kw), counts in zip(cases, got):
        assert counts.dtype == dtype
        expected = torch.histc(x.double(), **kw).to(dtype)
        torch.testing.assert_close(counts, expected)


def test_histc_refuses_a_range_that_is_not_finite():
    x = torch.tensor([1.0, float("inf")]).to(DEV)
    with pytest.raises(RuntimeError, match="torch.histc: range of .* is not finite"):
        torch.histc(x, bins=4).cpu()


def test_histc_refuses_bool_as_the_cpu_does():
    with pytest.raises(RuntimeError, match="not implemented for 'Bool'"):
        torch.histc(torch.ones(3, dtype=torch.bool).to(DEV), bins=2)


def test_histc_stays_in_one_compiled_program():
    def tokens_per_expert(ids):
        return torch.cumsum(torch.histc(ids, bins=4, min=0, max=3), 0, dtype=torch.int32)

    ids = torch.tensor([3, 0, 0, 2, 3, 3], dtype=torch.int32)
    with no_cpu_fallback():
        got = lx.compile(tokens_per_expert, full_graph=True)(ids.to(DEV)).cpu()
    expected = torch.cumsum(torch.histc(ids.float(), bins=4, min=0, max=3), 0).int()
    torch.testing.assert_close(got, expected)


INDICES = torch.randint(0, 9, (50,))

BINCOUNT_CASES = {
    "counts": (lambda x: torch.bincount(x), INDICES),
    "minlength_longer": (lambda x: torch.bincount(x, minlength=20), INDICES),
    "minlength_shorter": (lambda x: torch.bincount(x, minlength=2), INDICES),
    "float32_weights": (lambda x, w: torch.bincount(x, w), INDICES, torch.randn(50)),
    "float64_weights": (
        lambda x, w: torch.bincount(x, w, 3),
        INDICES.int(),
        torch.randn(50).double(),
    ),
    "half_weights_sum_in_float64": (
        lambda x, w: torch.bincount(x, w),
        INDICES.to(torch.uint8),
        torch.randn(50).half(),
    ),
    "int_weights_sum_in_float64": (
        lambda x, w: torch.bincount(x, w),
        INDICES,
        torch.randint(-3, 3, (50,)),
    ),
    "empty": (lambda x: torch.bincount(x, minlength=4), torch.tensor([], dtype=torch.long)),
    "empty_weighted": (
        lambda x, w: torch.bincount(x, w, minlength=3),
        torch.tensor([], dtype=torch.long),
        torch.zeros(0),
    ),
}


@pytest.mark.parametrize("name", list(BINCOUNT_CASES))
def test_bincount_matches_the_cpu(name):
    fn, *args = BINCOUNT_CASES[name]
    check_against_cpu(fn, *args)


@pytest.mark.parametrize(
    ("x", "kwargs", "message"),
    [
        (torch.tensor([1, -1]), {}, "1-d non-negative integral"),
        (torch.tensor([[1]]), {}, "1-d non-negative integral"),
        (torch.tensor([1.0]), {}, "not implemented for 'Float'"),
        (torch.tensor([1, 2]), {"weights": torch.ones(3)}, "same length as input"),
        (torch.tensor([1, 2]), {"minlength": -1}, "minlength should be >= 0"),
    ],
)
def test_bincount_raises_torch_errors(x, kwargs, message):
    with pytest.raises(RuntimeError, match=message):
        torch.bincount(x, **kwargs)
    kwargs = {k: v.to(DEV) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    with pytest.raises(RuntimeError, match=message):
        torch.bincount(x.to(DEV), **kwargs)


def test_bincount_in_a_full_graph_region_names_the_host_read():
    with pytest.raises(RuntimeError, match="execution is not allowed"):
        lx.compile(lambda x: torch.bincount(x), full_graph=True)(INDICES.to(DEV))


NONZERO_CASES = {
    "matrix": (torch.nonzero, torch.tensor([[0, 1, 0], [1, 1, 0]])),
    "where": (lambda x: torch.where(x), torch.tensor([[0, 1, 0], [1, 1, 0]])),
    "argwhere_float": (torch.argwhere, torch.tensor([0.0, -1.5, float("nan"), 0.0])),
    "bool": (torch.nonzero, torch.tensor([True, False, True])),
    "none_set": (torch.nonzero, torch.zeros(2, 3)),
    "scalar_true": (torch.nonzero, torch.tensor(3)),
    "scalar_false": (torch.nonzero, torch.tensor(0)),
    "empty": (torch.nonzero, torch.zeros(3, 0)),
}


@pytest.mark.parametrize("name", list(NONZERO_CASES))
def test_nonzero_matches_the_cpu(name):
    fn, x = NONZERO_CASES[name]
    check_against_cpu(fn, x)


def test_nonzero_compiles_once_per_input_shape():
    """Masks of one shape with different counts reuse the program of the first."""
    masks = [torch.rand(4, 6, generator=torch.Generator().manual_seed(k)) > 0.5 for k in range(4)]
    assert len({int(m.sum()) for m in masks}) > 1
    torch.nonzero(masks[0].to(DEV))  # compiles
    before = lx.metrics.counter_value("UncachedCompile") or 0
    with no_cpu_fallback():
        got = [torch.nonzero(m.to(DEV)).cpu() for m in masks[1:]]
    assert (lx.metrics.counter_value("UncachedCompile") or 0) == before
    for m, positions in zip(masks[1:], got):
        torch.testing.assert_close(positions, torch.nonzero(m))
