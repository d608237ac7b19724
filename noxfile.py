"""Developer and CI sessions for the lazax monorepo.

    python -m nox -l                                # list sessions
    python -m nox -s tests -- -k cache              # root pytest config, args forwarded
    python -m nox -s "isolation(package='ir')"      # one package alone, non-editable
    python -m nox -s lint
    python -m nox -s "conformance(mode='lazy')"
    python -m nox -s fuzz                           # long differential fuzzing run
    python -m nox -s soak                           # 10,000-step memory runs

Sessions use the interpreter nox runs under (no python pin).  torch is always installed
first, from the TORCH spec below: the pinned CPU build lies on local disk, and any other
spec can make pip pull a multi-GB CUDA build.  Override with LAZAX_TORCH_SPEC.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
TORCH = os.environ.get("LAZAX_TORCH_SPEC", "torch==2.13.0")

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["tests"]


def _load_tools():
    spec = importlib.util.spec_from_file_location("check_imports", ROOT / "tools/check_imports.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


tools = _load_tools()
WORKSPACE = tools.load_workspace(ROOT)
PACKAGE_FOLDERS = list(WORKSPACE)  # ir, cache, pjrt_runtime, executor, modes, dynamo_backend


def install_all(session: nox.Session, *extra: str) -> None:
    """torch pin first, then every lazax package editable (plus pytest, numpy, extra)."""
    session.install(TORCH)
    editable: list[str] = []
    for package in WORKSPACE.values():
        editable += ["-e", str(package.path.relative_to(ROOT))]
    session.install(*editable, "pytest", "numpy", *extra)


def _has_tests(folder: Path) -> bool:
    return folder.is_dir() and any(
        p.name.startswith("test_") or p.name.endswith("_test.py") for p in folder.rglob("*.py")
    )


def _workers() -> str:
    """pytest-xdist processes: one per core, at most 4 (each holds ~3 GB at its peak
    in the conformance suite); LAZAX_TEST_WORKERS overrides (0: no workers)."""
    return os.environ.get("LAZAX_TEST_WORKERS", str(min(os.cpu_count() or 1, 4)))


@nox.session
def tests(session: nox.Session) -> None:
    """The whole test suite, as configured by pytest.ini, over pytest-xdist workers."""
    install_all(session, "tqdm", "hypothesis", "expecttest", "pytest-xdist", "transformers")
    session.run("pytest", "-n", _workers(), *session.posargs)


@nox.session
def fast(session: nox.Session) -> None:
    """The tier that needs no XLA compile: the executor's decisions on a NullRuntime
    (seconds, not minutes; ``tests/null``, and the runtime's own tests of it)."""
    install_all(session)
    session.run(
        "pytest", "tests/null", "packages/pjrt_runtime/tests/test_null.py", *session.posargs
    )


@nox.session
def coverage(session: nox.Session) -> None:
    """docs/coverage.md from fresh runs: nox -s coverage -- --mode lazy --mode eager"""
    install_all(session, "expecttest")
    session.run("python", "tools/coverage.py", *session.posargs)


@nox.session
def fuzz(session: nox.Session) -> None:
    """Differential fuzzing, long budget: new random programs each run, in every mode.

    LAZAX_FUZZ_EXAMPLES programs per mode (default 500); prints how many each mode ran
    and writes them to fuzz-report.json. A failure is shrunk and replayed from
    .hypothesis/ on the next run; keep it in tests/test_fuzz_regressions.py."""
    install_all(session, "hypothesis")
    env = {
        "LAZAX_FUZZ_RANDOM": "1",
        "LAZAX_FUZZ_EXAMPLES": os.environ.get("LAZAX_FUZZ_EXAMPLES", "500"),
        "LAZAX_FUZZ_REPORT": str(ROOT / "fuzz-report.json"),
    }
    session.run("pytest", "tests/test_fuzz.py", "-s", *session.posargs, env=env)


@nox.session
def soak(session: nox.Session) -> None:
    """The long runs at full length: 10,000 training steps per mode, 5,000 shapes with
    a cache of 64, and two 64-token generate() runs against the OS's mapping limit
    (``tests/long_run_maps.py``); each run's report appended to soak-report.jsonl."""
    install_all(session, "transformers")
    env = {
        "LAZAX_LONG_RUN_MAPS": "1",
        "LAZAX_LONG_RUN_STEPS": "10000",
        "LAZAX_LONG_RUN_SHAPES": "5000",
        "LAZAX_LONG_RUN_REPORT": str(ROOT / "soak-report.jsonl"),
    }
    session.run("pytest", "tests/test_long_runs.py", *session.posargs, env=env)


@nox.session
@nox.parametrize("package", PACKAGE_FOLDERS)
def isolation(session: nox.Session, package: str) -> None:
    """One package alone: a fresh venv with only it and the lazax packages it declares.

    The package and its lazax siblings are installed non-editable from their folders on
    ONE pip command line, so pip satisfies `lazax-ir` etc. with the local folders and
    never looks those names up in an index.  torch (pinned) only if declared somewhere
    in the closure.
    """
    closure = tools.local_closure(WORKSPACE, package)
    if tools.requires_anywhere(WORKSPACE, package, "torch"):
        session.install(TORCH)
    session.install(*(str(p.path.relative_to(ROOT)) for p in closure))
    session.run("python", "tools/check_imports.py", package)
    session.run("python", "-c", f"import {WORKSPACE[package].module}")
    tests_dir = ROOT / "packages" / package / "tests"
    if _has_tests(tests_dir):
        session.install("pytest")
        session.run("pytest", str(tests_dir.relative_to(ROOT)), *session.posargs)
    else:
        session.log(f"no tests in {tests_dir.relative_to(ROOT)}; import check only")


@nox.session
def demo(session: nox.Session) -> None:
    """python -m benchmarks.demo"""
    install_all(session, "tqdm")
    session.run("python", "-m", "benchmarks.demo", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """python -m benchmarks"""
    install_all(session, "tqdm", "matplotlib")
    session.run("python", "-m", "benchmarks", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check, ruff format --check, and the declared-imports check."""
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("python", "tools/check_imports.py")


@nox.session
@nox.parametrize("mode", ["lazy", "eager", "compile", "dynamo"])
def conformance(session: nox.Session, mode: str) -> None:
    """tests/conformance: every OpInfo case in one execution mode (LAZAX_CONFORMANCE_MODE)."""
    install_all(session, "expecttest", "pytest-xdist")
    session.run(
        "pytest",
        "tests/conformance",
        "-n",
        _workers(),
        *session.posargs,
        env={"LAZAX_CONFORMANCE_MODE": mode},
    )
