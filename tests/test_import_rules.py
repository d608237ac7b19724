"""The import rules tools/check_imports.py enforces inside a package: no import inside a
function, no circle, stages in order. Checked on every real package, and shown to catch
each kind of break on a small package made here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def check_imports():
    spec = importlib.util.spec_from_file_location(
        "check_imports", ROOT / "tools" / "check_imports.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_imports"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_every_package_keeps_its_imports_one_way(check_imports):
    for package in check_imports.load_workspace().values():
        assert check_imports.check_internal_imports(package) == [], package.name


def test_the_executor_declares_its_stages(check_imports):
    executor = check_imports.load_workspace()["executor"]
    assert executor.stages[:5] == ("_version", "config", "metrics", "profiling", "ops")
    assert executor.stages.index("barrier") < executor.stages.index("tensor")
    assert executor.stages.index("tensor") < executor.stages.index("dispatch")


def _package(check_imports, tmp_path: Path, files: dict[str, str], stages=()):
    src = tmp_path / "src"
    for name, text in files.items():
        path = src / "lazax" / "demo" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    package = check_imports.Package(
        "demo", tmp_path, "lazax-demo", "demo", frozenset(), tuple(stages)
    )
    return check_imports.check_internal_imports(package)


def test_an_import_inside_a_function_is_an_error(check_imports, tmp_path, monkeypatch):
    monkeypatch.setattr(check_imports, "ROOT", tmp_path)
    errors = _package(
        check_imports,
        tmp_path,
        {"__init__.py": "", "a.py": "def f():\n    from .b import g\n", "b.py": "g = 1\n"},
    )
    assert len(errors) == 1 and "a.py:2: imports lazax.demo.b inside a function" in errors[0]


def test_a_circle_is_an_error(check_imports, tmp_path, monkeypatch):
    monkeypatch.setattr(check_imports, "ROOT", tmp_path)
    errors = _package(
        check_imports,
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from . import b\n",
            "b.py": "from .c import x\n",
            "c.py": "from .a import y\nx = 1\n",
        },
    )
    assert errors == ["import circle among lazax.demo.a, lazax.demo.b, lazax.demo.c"]


def test_an_import_of_a_later_stage_is_an_error(check_imports, tmp_path, monkeypatch):
    monkeypatch.setattr(check_imports, "ROOT", tmp_path)
    files = {
        "__init__.py": "from .upper import mod\n",
        "lower/__init__.py": "",
        "lower/core.py": "from ..upper.mod import thing\n",
        "upper/__init__.py": "",
        "upper/mod.py": "thing = 1\n",
    }
    errors = _package(check_imports, tmp_path, files, stages=("lower", "upper"))
    assert len(errors) == 1
    assert "lower imports lazax.demo.upper.mod, a later stage (lower -> upper)" in errors[0]
    files["lower/core.py"] = "thing = 1\n"
    files["upper/mod.py"] = "from ..lower.core import thing\n"
    assert _package(check_imports, tmp_path, files, stages=("lower", "upper")) == []
