"""How lazax answers torch's OpInfo ``error_inputs``, per mode, as a markdown table.

    python tools/error_inputs_table.py                  # every mode, one after another
    python tools/error_inputs_table.py --mode lazy      # one mode (repeatable)
    python tools/error_inputs_table.py --mode eager --op cat --op gather

For each mode it runs ``tests/conformance/errors.check_errors`` over every OpInfo with
error inputs (the skip list does not apply: this measures what lazax does) and prints,
per mode: the OpInfos with at least one case the CPU rejects, those cases, how many of
them lazax rejects with the same exception type (and the same message), with another
type, or not at all (silent), a leak from the previous case, dynamo's own differences
(see ``errors.py``) and the cases that fail the conformance test (``errors.failing``);
then each failing case with the sample, the CPU's exception and message, and lazax's.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODES = ("lazy", "eager", "compile", "dynamo")


def run_mode(mode: str, only: list[str]) -> tuple[list, float]:
    sys.path.insert(0, str(ROOT))
    warnings.filterwarnings("ignore")
    from torch.testing._internal.common_methods_invocations import op_db

    from tests.conformance.errors import check_errors, has_error_inputs
    from tests.conformance.harness import op_id

    start = time.perf_counter()
    cases = []
    for op in op_db:
        if not has_error_inputs(op) or (only and op_id(op) not in only):
            continue
        cases += check_errors(op, mode)
    return cases, time.perf_counter() - start


def _pct(n: int, total: int) -> str:
    return f"{n} ({100 * n / total:.1f}%)" if total else "0"


def _cell(text: str, limit: int = 160) -> str:
    from tests.conformance.errors import short

    return short(text, limit).replace("|", "\\|")


def table(results: dict) -> str:
    from tests.conformance.errors import failing

    lines = [
        "| mode | OpInfos | cases | same type | same message | type only | other type | "
        "silent | leak | dynamo's own | failing | seconds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for mode, (cases, seconds) in results.items():
        total = len(cases)
        count = {s: sum(c.status == s for c in cases) for s in ("same", "type", "other")}
        count |= {s: sum(c.status == s for c in cases) for s in ("silent", "leak")}
        ops = len({c.op for c in cases})
        lines.append(
            f"| {mode} | {ops} | {total} | {_pct(count['same'] + count['type'], total)} | "
            f"{_pct(count['same'], total)} | {count['type']} | {count['other']} | "
            f"{count['silent']} | {count['leak']} | {sum(c.dynamo_own for c in cases)} | "
            f"{sum(failing(c) for c in cases)} | {seconds:.0f} |"
        )
    for mode, (cases, _) in results.items():
        bad = [c for c in cases if failing(c)]
        lines += ["", f"### {mode}: {len(bad)} failing cases", ""]
        if not bad:
            continue
        dynamo = mode == "dynamo"
        lines += [
            "| op | # | status | sample | CPU | lazax |"
            + (" dynamo on the CPU |" if dynamo else ""),
            "|---|---|---|---|---|---|" + ("---|" if dynamo else ""),
        ]
        for c in bad:
            lazax = f"{c.lazax_type}: {c.lazax_message}" if c.lazax_type else "(no error)"
            if c.wrapped:
                lazax = f"({c.wrapped} from) {lazax}"
            lines.append(
                f"| {c.op} | {c.index} | {c.status} | {_cell(c.sample, 100)} | "
                f"{c.cpu_type}: {_cell(c.cpu_message)} | {_cell(lazax)} |"
                + (f" {_cell(c.dynamo_cpu)} |" if dynamo else "")
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", action="append", choices=MODES, help="default: all four")
    parser.add_argument("--op", action="append", default=[], help="only these OpInfo ids")
    ns = parser.parse_args()
    results = {}
    for mode in ns.mode or MODES:
        results[mode] = run_mode(mode, ns.op)
        print(f"{mode}: {len(results[mode][0])} cases, {results[mode][1]:.0f} s", file=sys.stderr)
    print(table(results))


if __name__ == "__main__":
    main()
