"""``torch_xla.debug.metrics_compare_utils``: read numbers out of metrics reports.

Contract: ``get_data_points_from_metrics_reports(reports)``: for a list of
``met.metrics_report()`` texts, a dict ``"<Name>__<field>" -> [value per report]`` with
each metric's ``TotalSamples`` and ``Accumulator`` and each counter's ``Value``
(times in seconds, sizes in megabytes as torch_xla's, counts as printed); a report
that lacks a name contributes no value.
"""

from __future__ import annotations

import re

__all__ = ["get_data_points_from_metrics_reports"]

_HEAD = re.compile(r"^(Metric|Counter): (\S+)\s*$")
_FIELD = re.compile(r"^\s+(TotalSamples|Accumulator|Value): (\S+)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
# The report prints sizes in powers of 1024 (InboundData: "1.50KB").
_UNITS.update({"B": 1 / 1024**2, "KB": 1 / 1024, "MB": 1.0, "GB": 1024.0})


def _number(text: str) -> float:
    match = re.fullmatch(r"([-+0-9.eE]+)(ns|us|ms|s|B|KB|MB|GB)?", text)
    if match is None:
        raise ValueError(f"not a number in a metrics report: {text!r}")
    return float(match.group(1)) * _UNITS.get(match.group(2) or "s", 1.0)


def _points(report: str) -> dict[str, float]:
    points, name = {}, None
    for line in report.splitlines():
        head = _HEAD.match(line)
        if head:
            name = head.group(2)
            continue
        field = _FIELD.match(line)
        if field and name is not None:
            points[f"{name}__{field.group(1)}"] = _number(field.group(2))
    return points


def get_data_points_from_metrics_reports(reports) -> dict[str, list[float]]:
    data: dict[str, list[float]] = {}
    for report in reports:
        for key, value in _points(report).items():
            data.setdefault(key, []).append(value)
    return data
