"""The oracles beyond assert_close pass only what they should."""

from types import SimpleNamespace

import torch

from .oracles import no_less_accurate, picker, same_picks

EXACT = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)


def reference():
    return EXACT


def test_lazax_as_close_as_torch_passes():
    torch_result = torch.tensor([1.0, 2.0, 3.004])
    assert no_less_accurate(torch.tensor([1.0, 2.006, 3.0]), torch_result, reference)
    assert no_less_accurate(torch.tensor([1.0, 2.0, 3.0]), torch_result, reference)


def test_lazax_further_than_twice_torch_fails():
    torch_result = torch.tensor([1.0, 2.0, 3.004])
    assert not no_less_accurate(torch.tensor([1.0, 2.0, 3.009]), torch_result, reference)


def test_untrusted_reference_fails():
    # torch far from the float64 run (a sign flip): the run says nothing about lazax.
    flipped = torch.tensor([-1.0, -2.0, -3.0])
    assert not no_less_accurate(torch.tensor([-1.0, -2.0, -3.1]), flipped, reference)


def test_nans_and_integer_outputs_must_agree():
    torch_result = torch.tensor([1.0, float("nan"), 3.0])
    with_nan = lambda: torch.tensor([1.0, float("nan"), 3.0], dtype=torch.float64)  # noqa: E731
    assert not no_less_accurate(torch.tensor([1.0, 2.0, 3.0]), torch_result, with_nan)
    index = torch.tensor([0, 1])
    got = (torch.tensor([1.0, 2.0, 3.0]), torch.tensor([0, 2]))
    assert not no_less_accurate(got, (EXACT.float(), index), lambda: (EXACT, index))
    assert no_less_accurate((EXACT.float(), index), (EXACT.float(), index), lambda: (EXACT, index))


def test_a_reference_torch_cannot_run_fails():
    def fails():
        raise RuntimeError("no float64 kernel")

    assert not no_less_accurate(EXACT.float(), EXACT.float(), fails)


def test_indices_among_ties_pass_only_when_they_pick_the_same_values():
    sample = SimpleNamespace(input=torch.tensor([[3, 1, 3, 2]]), args=(1,), kwargs={})
    pick = picker("sort", sample)
    torch_order = torch.tensor([[1, 3, 0, 2]])
    assert same_picks(pick, torch.tensor([[1, 3, 2, 0]]), torch_order)  # the tie swapped
    assert not same_picks(pick, torch.tensor([[1, 0, 3, 2]]), torch_order)
    reduced = SimpleNamespace(input=torch.tensor([[3, 1, 3, 2]]), args=(4, 1), kwargs={})
    kth = picker("kthvalue", reduced)  # the largest: index 0 or 2, dim reduced
    assert same_picks(kth, torch.tensor([2]), torch.tensor([0]))
    assert not same_picks(kth, torch.tensor([1]), torch.tensor([0]))
    assert picker("add", sample) is None


def test_lazax_matching_the_float64_run_passes_whatever_torch_gives():
    def close(g, e):
        return bool(torch.allclose(g, e, rtol=1e-4, atol=1e-5))

    zero = lambda: torch.zeros(2, dtype=torch.float64)  # noqa: E731
    noisy = torch.tensor([6e-5, 0.0])  # torch's rounding where the exact answer is 0
    assert no_less_accurate(torch.zeros(2), noisy, zero, close)
    assert not no_less_accurate(torch.tensor([1e-3, 0.0]), noisy, zero, close)
