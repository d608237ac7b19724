"""Writes docs/coverage.md: how much of torch's OpInfo database lazax passes, per mode.

    python tools/coverage.py --mode lazy --mode eager   # run those modes, then write
    python tools/coverage.py --mode eager --variant op  # only some variants
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
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "coverage"
TABLE = ROOT / "docs" / "coverage.md"


def run_mode(mode: str, variants: list[str]) -> dict:
    sys.path.insert(0, str(ROOT))
    warnings.filterwarnings("ignore")
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    from tests.conformance.harness import DTYPES, VARIANTS, applies, check, op_id

    outcomes = {}
    start = time.perf_counter()
    for position, op in enumerate(op_db):
        if position % 50 == 0:
            print(
                f"{mode}: {position} / {len(op_db)} OpInfos, "
                f"{round(time.perf_counter() - start)} s",
                file=sys.stderr,
                flush=True,
            )
        for dtype_name, dtype in DTYPES.items():
            for variant in VARIANTS:
                if variant not in variants or not applies(op, dtype, variant):
                    continue
                try:
                    result = check(op, dtype, mode, variant)
                    row = [result.status, result.samples, result.detail[:400]]
                except Exception as err:  # the harness itself failed: report, go on
                    row = ["error", 0, f"harness: {type(err).__name__}: {err}"[:400]]
                outcomes[f"{op_id(op)}|{dtype_name}|{variant}"] = row
    return {
        "mode": mode,
        "torch": torch.__version__,
        "seconds": round(time.perf_counter() - start),
        "variants": variants,
        "outcomes": outcomes,
    }


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
        "",
    ]
    for run in runs:
        cells: dict = defaultdict(lambda: [0, 0])
        failing = []
        for key, (status, _samples, detail) in sorted(run["outcomes"].items()):
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
            f"torch {run['torch']}; variants run: {', '.join(run['variants'])} "
            f"(- in a column: not run); the run took {run['seconds']} s.",
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
    TABLE.write_text("\n".join(lines))


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", action="append", default=[])
    parser.add_argument(
        "--variant", action="append", choices=["op", "inplace", "out", "grad"], default=[]
    )
    args = parser.parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    for mode in args.mode:
        run = run_mode(mode, args.variant or ["op", "inplace", "out", "grad"])
        (RESULTS / f"{mode}.json").write_text(json.dumps(run, indent=0, sort_keys=True))
        print(f"{mode}: {len(run['outcomes'])} cases in {run['seconds']} s")
    write_table()
    print(f"wrote {TABLE.relative_to(ROOT)}")


if __name__ == "__main__":
    main(sys.argv[1:])
