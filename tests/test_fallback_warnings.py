"""No silent CPU work: an op that falls back to the CPU warns once per process, naming
the op, the user's line, its counter and the switch; ``LAZAX_FALLBACK=silent`` keeps the
old silence and ``LAZAX_FALLBACK=error`` raises at the call, before anything runs.

The op is a custom op made here (CPU kernel only, no lazax lowering): it falls back
whatever lowerings lazax gains.
"""

import inspect
import warnings

import pytest
import torch

import lazax.modes as lx
from lazax.executor.dispatch.fallback import forget_warnings

DEV = lx.device()
COUNTER = "lazax_fallback_test::twice"


@torch.library.custom_op("lazax_fallback_test::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@twice.register_fake
def _(x):
    return torch.empty_like(x)


def counter() -> int:
    return lx.metrics.counter_value(COUNTER) or 0


def lazax_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if "lazax: " in str(w.message)]


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.delenv("LAZAX_FALLBACK", raising=False)
    forget_warnings()
    yield
    forget_warnings()


def test_the_first_fallback_of_an_op_warns_once_naming_it_and_the_line():
    x = torch.arange(4.0, device=DEV)
    before = counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = twice(x)
    messages = lazax_warnings(caught)
    assert len(messages) == 1, messages
    (message,) = messages
    assert COUNTER in message and "ran on the CPU" in message
    assert "LAZAX_FALLBACK=error" in message and "LAZAX_FALLBACK=silent" in message
    assert f"counter_value({COUNTER!r})" in message
    (warning,) = [w for w in caught if "lazax: " in str(w.message)]
    assert warning.category is UserWarning
    assert warning.filename == __file__ and f"{__file__}:" in message
    assert "test_the_first_fallback_of_an_op_warns_once" in message
    assert out.cpu().tolist() == [0.0, 2.0, 4.0, 6.0]
    assert counter() == before + 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        twice(x).cpu()
        twice(x + 1).cpu()
    assert lazax_warnings(caught) == []  # once per op and process
    assert counter() == before + 3


def test_the_warning_names_the_users_line():
    x = torch.ones(2, device=DEV)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        expected_line = _call_twice(x)
    (warning,) = [w for w in caught if "lazax: " in str(w.message)]
    assert (warning.filename, warning.lineno) == (__file__, expected_line)
    assert f"{__file__}:{expected_line} (in _call_twice)" in str(warning.message)


def _call_twice(x):
    line = inspect.currentframe().f_lineno + 1
    twice(x)
    return line


def test_silent_only_counts(monkeypatch):
    monkeypatch.setenv("LAZAX_FALLBACK", "silent")
    x = torch.ones(3, device=DEV)
    before = counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert twice(x).cpu().tolist() == [2.0, 2.0, 2.0]
    assert lazax_warnings(caught) == []
    assert counter() == before + 1


def test_error_raises_at_the_call_before_anything_runs(monkeypatch):
    monkeypatch.setenv("LAZAX_FALLBACK", "error")
    x = torch.ones(3, device=DEV)
    before = counter()
    with pytest.raises(RuntimeError, match=r"lazax_fallback_test::twice has no lowering") as err:
        twice(x)
    assert "LAZAX_FALLBACK=error" in str(err.value) and f"{__file__}:" in str(err.value)
    assert counter() == before
    monkeypatch.setenv("LAZAX_FALLBACK", "warn")
    with pytest.warns(UserWarning, match="ran on the CPU"):
        assert twice(x).cpu().tolist() == [2.0, 2.0, 2.0]


def test_factories_built_on_the_host_by_design_are_not_refused(monkeypatch):
    monkeypatch.setenv("LAZAX_FALLBACK", "error")
    # Factories with no device input (lazax builds some on the host and uploads them):
    # nothing to sync, no warning, never refused.
    assert torch.full((2,), 1.5, device=DEV).cpu().tolist() == [1.5, 1.5]
    assert torch.eye(2, device=DEV).cpu().tolist() == [[1.0, 0.0], [0.0, 1.0]]


def test_an_unknown_mode_is_refused(monkeypatch):
    monkeypatch.setenv("LAZAX_FALLBACK", "loud")
    with pytest.raises(ValueError, match=r"LAZAX_FALLBACK='loud': expected one of warn"):
        twice(torch.ones(1, device=DEV))
