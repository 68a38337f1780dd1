"""Reports of a run as plain data, and the labels the analysis uses for them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from app.models import Report


def iso(value: datetime | None) -> str | None:
    """ISO-8601 UTC with a Z, as every ``*_at`` field of the API."""
    return None if value is None else value.isoformat().replace("+00:00", "Z")


def report_to_dict(report: Report) -> dict[str, Any]:
    return {
        "id": report.id,
        "run_id": report.run_id,
        "name": report.name,
        "kind": report.kind,
        "rank": report.rank,
        "host": report.host,
        "sha256": report.sha256,
        "size_bytes": report.size_bytes,
        "status": report.status,
        "error": None if report.error_code is None else {"code": report.error_code,
                                                         "message": report.error_message or ""},
        "attempts": report.attempts,
        "progress": report.progress or {},
        "counts": report.counts or {},
        "tool_version": report.tool_version,
        "created_at": iso(report.created_at),
        "updated_at": iso(report.updated_at),
    }


def report_labels(reports: list[Report]) -> dict[int, str]:
    """A unique label per report for ``analysis.api.analyze(labels=...)``: the file name, or name#id."""
    seen: dict[str, int] = {}
    for r in reports:
        seen[r.name] = seen.get(r.name, 0) + 1
    return {r.id: r.name if seen[r.name] == 1 else f"{r.name}#{r.id}" for r in reports}
