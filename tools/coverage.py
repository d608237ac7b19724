"""Writes docs/coverage.md: how much of torch's OpInfo database lazax passes, per mode.

    python tools/coverage.py --mode lazy --mode eager   # run those modes, then write
    python tools/coverage.py --mode eager --variant op --dtype float32  # a subset
    python tools/coverage.py --mode lazy --jobs 2       # in 2 processes (2 cores)
    python tools/coverage.py --mode lazy --op gather --record-failures  # after a fix
    python tools/coverage.py                            # rewrite the table from the
                                                        # results already in docs/coverage/

For each mode it runs every (OpInfo, dtype, variant) case of the conformance suite
(``tests/conformance``) through ``harness.check``, skip list or not (this measures what
lazax does, not what the tests demand), and keeps the outcomes in
``docs/coverage/<mode>.json``. The table counts, per dtype and variant, the OpInfos that
pass all their samples over the OpInfos tried (those with at least one sample torch
accepts), and lists every case that does not pass with its first failure.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "coverage"
TABLE = ROOT / "docs" / "coverage.md"
VARIANT_NAMES = ["op", "inplace", "out", "grad"]
DTYPE_NAMES = ["float32", "bfloat16", "int64", "bool"]


def run_mode(mode: str, variants: list[str], dtypes: list[str], shard=(0, 1), only=()) -> dict:
    sys.path.insert(0, str(ROOT))
    warnings.filterwarnings("ignore")
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    from tests.conformance.harness import DTYPES, VARIANTS, applies, check, op_id

    outcomes = {}
    start = time.perf_counter()
    for position, op in enumerate(op_db):
        if position % shard[1] != shard[0] or (only and op_id(op) not in only):
            continue
        if position % 50 == shard[0]:
            print(
                f"{mode}: {position} / {len(op_db)} OpInfos, "
                f"{round(time.perf_counter() - start)} s",
                file=sys.stderr,
                flush=True,
            )
        for dtype_name, dtype in DTYPES.items():
            for variant in VARIANTS:
                if dtype_name not in dtypes or variant not in variants:
                    continue
                if not applies(op, dtype, variant):
                    continue
                began = time.perf_counter()
                try:
                    result = check(op, dtype, mode, variant)
                    row = [result.status, result.samples, result.detail[:400]]
                except Exception as err:  # the harness itself failed: report, go on
                    row = ["error", 0, f"harness: {type(err).__name__}: {err}"[:400]]
                row.append(round(time.perf_counter() - began, 2))  # where the time goes
                outcomes[f"{op_id(op)}|{dtype_name}|{variant}"] = row
    return {
        "mode": mode,
        "torch": torch.__version__,
        "seconds": round(time.perf_counter() - start),
        "variants": variants,
        "dtypes": dtypes,
        "outcomes": outcomes,
    }


def _float32_share(run: dict, variant: str) -> tuple[int, int]:
    passed = tried = 0
    for key, row in run["outcomes"].items():
        _, dtype, case_variant = key.split("|")
        if dtype == "float32" and case_variant == variant and row[0] != "none":
            tried += 1
            passed += row[0] == "pass"
    return passed, tried


def _summary(runs: list[dict]) -> list[str]:
    """float32 per mode side by side, against the targets: lazy and eager at least 90%
    of OpInfos passing all their samples, compile and dynamo within 5 points of lazy."""
    lazy = next((r for r in runs if r["mode"] == "lazy"), None)
    lines = [
        "## float32, every mode",
        "",
        "| mode | op | inplace | out | grad | op: points from lazy |",
        "|---|---|---|---|---|---|",
    ]
    for run in runs:
        row = [run["mode"]]
        for variant in VARIANT_NAMES:
            passed, tried = _float32_share(run, variant)
            row.append(f"{100 * passed / tried:.1f}% of {tried}" if tried else "-")
        if lazy is not None:
            mine, base = _float32_share(run, "op"), _float32_share(lazy, "op")
            if mine[1] and base[1]:
                row.append(f"{100 * (mine[0] / mine[1] - base[0] / base[1]):+.1f}")
            else:
                row.append("-")
        lines.append("| " + " | ".join(row) + " |")
    return lines + [""]


def write_table() -> None:
    runs = [json.loads(p.read_text()) for p in sorted(RESULTS.glob("*.json"))]
    order = {"lazy": 0, "eager": 1, "compile": 2, "dynamo": 3}
    runs.sort(key=lambda r: order.get(r["mode"], 9))
    lines = [
        "# Op coverage: torch's OpInfo database on lazax",
        "",
        "Written by `python tools/coverage.py` (do not edit by hand). Each cell: OpInfos",
        "whose samples all match torch on the CPU / OpInfos with at least one sample torch",
        "accepts for that dtype and variant. `grad`: float32 gradients. Cases the",
        "conformance tests skip (`tests/conformance/skips.py`) count here as they ran.",
        "A sample matches when its outputs agree within the dtype's tolerance, or, for",
        "floats, when lazax is about as close to a float64 run as torch's CPU kernel is;",
        "index outputs among ties match when they pick the same values",
        "(`tests/conformance/oracles.py`). dynamo mode checks the first 4 samples of each",
        "case (a compile per sample).",
        "",
    ]
    lines += _summary(runs)
    for run in runs:
        cells: dict = defaultdict(lambda: [0, 0])
        failing = []
        for key, row in sorted(run["outcomes"].items()):
            status, detail = row[0], row[2]
            name, dtype, variant = key.split("|")
            if status == "none":
                continue
            cells[(dtype, variant)][1] += 1
            if status == "pass":
                cells[(dtype, variant)][0] += 1
            else:
                failing.append((name, dtype, variant, status, detail))
        lines += [
            f"## {run['mode']} mode",
            "",
            f"torch {run['torch']}; variants run: {', '.join(run['variants'])}; dtypes run: "
            f"{', '.join(run.get('dtypes', DTYPE_NAMES))} (-: not run); the run took "
            f"{run['seconds']} s.",
            "",
            "| dtype | op | inplace | out | grad |",
            "|---|---|---|---|---|",
        ]
        for dtype in ("float32", "bfloat16", "int64", "bool"):
            row = [dtype]
            for variant in ("op", "inplace", "out", "grad"):
                passed, tried = cells[(dtype, variant)]
                row.append(f"{passed} / {tried} ({100 * passed / tried:.1f}%)" if tried else "-")
            lines.append("| " + " | ".join(row) + " |")
        lines += ["", f"<details><summary>{len(failing)} cases that do not pass</summary>", ""]
        lines += ["| op | dtype | variant | outcome | first failure |", "|---|---|---|---|---|"]
        for name, dtype, variant, status, detail in failing:
            detail = detail.replace("|", "\\|").replace("\n", " ")[:200]
            lines.append(f"| {name} | {dtype} | {variant} | {status} | {detail} |")
        lines += ["", "</details>", ""]
        timed = sorted(
            ((row[3], key) for key, row in run["outcomes"].items() if len(row) > 3),
            reverse=True,
        )
        if timed:
            total = sum(seconds for seconds, _ in timed)
            lines += [
                f"Slowest cases (of {total:.0f} s spent in cases): "
                + ", ".join(
                    f"{key.replace('|', ' ')} {seconds:.0f} s" for seconds, key in timed[:8]
                ),
                "",
            ]
    TABLE.write_text("\n".join(lines))


def run_parallel(mode: str, variants: list[str], dtypes: list[str], jobs: int) -> dict:
    """``run_mode`` split over ``jobs`` processes (OpInfos dealt round-robin)."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        workers = []
        for k in range(jobs):
            out = Path(scratch) / f"{k}.json"
            command = [sys.executable, __file__, "--mode", mode, "--shard", f"{k}/{jobs}"]
            command += [f"--variant={v}" for v in variants] + [f"--dtype={d}" for d in dtypes]
            workers.append((subprocess.Popen([*command, "--out", str(out)]), out))
        runs = []
        for process, out in workers:
            if process.wait() != 0:
                raise SystemExit(f"coverage worker failed: {process.args}")
            runs.append(json.loads(out.read_text()))
    merged = dict(runs[0], seconds=round(time.perf_counter() - start), outcomes={})
    for run in runs:
        merged["outcomes"].update(run["outcomes"])
    return merged


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", action="append", default=[])
    parser.add_argument("--variant", action="append", choices=VARIANT_NAMES, default=[])
    parser.add_argument("--dtype", action="append", choices=DTYPE_NAMES, default=[])
    parser.add_argument("--jobs", type=int, default=1, help="processes per mode")
    parser.add_argument(
        "--record-failures",
        action="store_true",
        help="write tests/conformance/known_failures.json from the results of every mode",
    )
    parser.add_argument(
        "--op",
        action="append",
        default=[],
        help="re-run only these OpInfos (ids as in the table) and update the stored run",
    )
    parser.add_argument("--shard", help=argparse.SUPPRESS)  # k/n: a worker's share
    parser.add_argument("--out", help=argparse.SUPPRESS)  # a worker's result file
    args = parser.parse_args(argv)
    variants, dtypes = args.variant or VARIANT_NAMES, args.dtype or DTYPE_NAMES
    if args.shard:
        k, n = (int(v) for v in args.shard.split("/"))
        run = run_mode(args.mode[0], variants, dtypes, (k, n))
        Path(args.out).write_text(json.dumps(run))
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    for mode in args.mode:
        if args.op:  # a partial re-run: merged into the stored run of this mode
            stored = json.loads((RESULTS / f"{mode}.json").read_text())
            fresh = run_mode(mode, variants, dtypes, only=set(args.op))
            stored["outcomes"].update(fresh["outcomes"])
            run = stored
        elif args.jobs > 1:
            run = run_parallel(mode, variants, dtypes, args.jobs)
        else:
            run = run_mode(mode, variants, dtypes)
        (RESULTS / f"{mode}.json").write_text(json.dumps(run, indent=0, sort_keys=True))
        print(f"{mode}: {len(run['outcomes'])} cases in {run['seconds']} s")
    write_table()
    print(f"wrote {TABLE.relative_to(ROOT)}")
    if args.record_failures:
        record_failures()


KNOWN = ROOT / "tests" / "conformance" / "known_failures.json"


def record_failures() -> None:
    """Every case that did not pass in a recorded run, as a skip with its first failure
    (lazy mode's failures for every mode; the other modes' own failures for theirs; a
    run of some dtypes only stands for all of them, saying so)."""
    known = {}
    for path in sorted(RESULTS.glob("*.json")):
        run = json.loads(path.read_text())
        for key, row in run["outcomes"].items():
            status, detail = row[0], row[2]
            if status in ("pass", "none"):
                continue
            name, dtype, variant = key.split("|")
            mode = "*" if run["mode"] == "lazy" else run["mode"]
            first = detail.splitlines()[0] if detail else ""
            reason = f"{status}: {first}"
            if set(run.get("dtypes", DTYPE_NAMES)) != set(DTYPE_NAMES):
                # A run of some dtypes only: the failure stands for the dtypes not run.
                reason = f"in {dtype} (dtypes run: {', '.join(run['dtypes'])}), {reason}"
                dtype = "*"
            known["|".join((name, variant, dtype, mode))] = reason[:240]
    everywhere = {key.rsplit("|", 1)[0] for key in known if key.endswith("|*")}
    known = {  # a lazy failure already covers the same case in the other modes
        key: reason
        for key, reason in known.items()
        if key.endswith("|*") or key.rsplit("|", 1)[0] not in everywhere
    }
    KNOWN.write_text(json.dumps(dict(sorted(known.items())), indent=1) + "\n")
    print(f"wrote {KNOWN.relative_to(ROOT)}: {len(known)} cases")


if __name__ == "__main__":
    main(sys.argv[1:])
