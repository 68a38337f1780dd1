"""Findings downloads: JSON as stored, and CSV whose cells cannot be run as spreadsheet formulas."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from typing import Any

from app import finite_json

CSV_COLUMNS = ("rank_by_impact", "rule_id", "severity", "title", "impact_ns", "impact_pct", "report", "rank",
               "message", "advice", "evidence_total", "evidence", "per_rank")
# Spreadsheets evaluate a cell starting with these as a formula (CSV injection); kernel names and NVTX
# text come from the profiled program, so any of them may start that way.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n", "|", "%")


def safe_cell(value: Any) -> Any:
    """Numbers pass; text that a spreadsheet would evaluate gets a leading apostrophe."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return value
    text = str(value)
    return "'" + text if text.startswith(FORMULA_START) else text


def findings_csv(findings: Iterable[dict[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\r\n")
    writer.writerow(CSV_COLUMNS)
    for i, f in enumerate(findings, 1):
        row = {**f, "rank_by_impact": i, "evidence": finite_json.dumps(f.get("evidence") or [], ensure_ascii=False),
               # a multi-rank run's finding across the ranks: each rank's part ([{rank, host, impact_ns}])
               "per_rank": "" if f.get("per_rank") is None else finite_json.dumps(
                   [{k: p.get(k) for k in ("rank", "host", "impact_ns")} for p in f["per_rank"]])}
        writer.writerow([safe_cell(row.get(c)) for c in CSV_COLUMNS])
    return buf.getvalue()
