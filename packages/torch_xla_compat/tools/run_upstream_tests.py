"""Run torch_xla's own public-API test files against this package, unchanged.

Contract: extracts the chosen files of pytorch/xla's ``test/`` folder from a bare git
mirror (``--mirror``, default ``/work/.mirror/pytorch+xla/repo``) into a fresh temp
directory, runs each file with pytest there (one process per file, with a timeout) and
prints ``passed / collected`` per file and in total. pytest collects what torch_xla's CI
(``python3 <file>``, unittest) runs: the plugin ``unittest_collection`` deselects a
module-level ``test_*`` function that takes ``self``, which unittest never runs.
Nothing of pytorch/xla is written into this repository. Extra import paths
(``--deps``, e.g. a ``pip install --target`` folder with ``absl-py``, and torchvision
0.16.2 for ``dynamo/test_dynamo.py``: see docs/torch_xla.md) are put on ``PYTHONPATH``.

    python packages/torch_xla_compat/tools/run_upstream_tests.py --deps /tmp/xla_deps
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

# The public-API files of issue 36: the three modes, metrics, dynamo, SPMD basics.
FILES = (
    "eager/test_eager.py",
    "eager/test_eager_with_xla_compile.py",
    "eager/test_eager_with_torch_compile.py",
    "eager/test_eager_spmd.py",
    "test_metrics.py",
    "test_devices.py",
    "pjrt/test_metrics.py",
    "pjrt/test_runtime.py",
    "dynamo/test_dynamo.py",
    "test_dynamic_shapes_detector.py",
    "spmd/test_xla_sharding.py",
)

_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed)")
_TEST_DEF = re.compile(r"^\s+def (test\w*)\(", re.MULTILINE)


def extract(mirror: str, rev: str, dest: Path) -> Path:
    """``git archive`` the test folder of ``rev`` into ``dest``; returns ``dest/test``."""
    tar = dest / "test.tar"
    with tar.open("wb") as out:
        subprocess.run(
            ["git", f"--git-dir={mirror}", "archive", rev, "test"], stdout=out, check=True
        )
    with tarfile.open(tar) as archive:
        archive.extractall(dest, filter="data")
    return dest / "test"


def run_file(test_dir: Path, name: str, env: dict, timeout: int, log_dir: Path) -> dict:
    """One pytest process on one file; the counts from its summary line."""
    # The file's own folder on the path, as ``python3 <file>`` (torch_xla's CI) has it:
    # spmd tests import their neighbour ``test_xla_sharding_base``.
    paths = [str((test_dir / name).parent), str(Path(__file__).parent), env["PYTHONPATH"]]
    env = {**env, "PYTHONPATH": os.pathsep.join(paths)}
    cmd = [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider"]
    cmd += ["-p", "unittest_collection"]
    cmd += ["-q", "-rA", name]
    try:
        proc = subprocess.run(
            cmd, cwd=test_dir, env=env, capture_output=True, text=True, timeout=timeout
        )
        text = proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        text = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else ""
        text += "\nTIMEOUT\n"
    (log_dir / (name.replace("/", "_") + ".txt")).write_text(text)
    tail = text.strip().splitlines()[-1] if text.strip() else ""
    counts = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
    for num, kind in _COUNT.findall(tail):
        key = "error" if kind.startswith("error") else kind
        counts[key] = counts.get(key, 0) + int(num)
    counts["tail"] = tail
    if "error" in tail and "during collection" in text:
        # The file did not import: count its tests as failing, by their definitions.
        counts["error"] = len(_TEST_DEF.findall((test_dir / name).read_text()))
        counts["tail"] = "not collected: " + _first_error(text)
    return counts


def _first_error(text: str) -> str:
    lines = [line for line in text.splitlines() if line.startswith("E   ")]
    return lines[-1][4:].strip() if lines else "?"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", default="/work/.mirror/pytorch+xla/repo")
    parser.add_argument("--rev", default="HEAD")
    parser.add_argument("--deps", action="append", default=[])
    parser.add_argument("--timeout", type=int, default=600)
    parser.add_argument("--logs", default=None, help="folder for each file's pytest output")
    parser.add_argument("files", nargs="*", default=list(FILES))
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="xla_tests_") as tmp:
        test_dir = extract(args.mirror, args.rev, Path(tmp))
        log_dir = Path(args.logs) if args.logs else Path(tmp) / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(test_dir), *args.deps])
        # torch_xla's CPU tests expect several host devices, as lazax's suite has.
        env.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
        total_pass = total = 0
        for name in args.files:
            c = run_file(test_dir, name, env, args.timeout, log_dir)
            n = c["passed"] + c["failed"] + c["error"]
            total_pass += c["passed"]
            total += n
            print(f"{name}: {c['passed']} / {n}   ({c['tail']})", flush=True)
        print(f"TOTAL: {total_pass} / {total}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
