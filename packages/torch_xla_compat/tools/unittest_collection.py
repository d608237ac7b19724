"""A pytest plugin for ``run_upstream_tests.py``: collect what unittest would run.

torch_xla's CI runs each test file as ``python3 <file>`` (``unittest.main``), which runs
the ``test*`` methods of ``TestCase`` classes and nothing else. pytest also collects a
module-level ``test_*`` function, and one that takes ``self`` (a method indented one
level too little, as in ``eager/test_eager_with_torch_compile.py``) errors at setup
("fixture 'self' not found"): a test torch_xla never runs would count as a failure
here. Such functions are deselected, and pytest's summary says how many.
"""

from __future__ import annotations

import inspect

import pytest


def _not_a_unittest(item) -> bool:
    if not isinstance(item, pytest.Function) or item.cls is not None:
        return False
    params = list(inspect.signature(item.function).parameters)
    return bool(params) and params[0] == "self"


def pytest_collection_modifyitems(config, items):
    dropped = [item for item in items if _not_a_unittest(item)]
    if dropped:
        items[:] = [item for item in items if item not in dropped]
        config.hook.pytest_deselected(items=dropped)
