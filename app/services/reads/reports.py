"""Reports of a run as plain data."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from app.models import Report


def iso(value: datetime | None) -> str | None:
    """ISO-8601 UTC with a Z, as every ``*_at`` field of the API."""
    return None if value is None else value.isoformat().replace("+00:00", "Z")


def report_to_dict(report: Report) -> dict[str, Any]:
    info = report.info or {}
    return {
        "id": report.id,
        "run_id": report.run_id,
        "name": report.name,
        "kind": report.kind,
        # Rank and host come from the export itself once ingested.
        "rank": report.rank if report.rank is not None else _int(info.get("rank")),
        "host": report.host if report.host is not None else info.get("host"),
        "sha256": report.sha256,
        "size_bytes": report.size_bytes,
        "status": report.status,
        "error": None if report.error_code is None else {"code": report.error_code,
                                                         "message": report.error_message or ""},
        "attempts": report.attempts,
        "lease_owner": report.lease_owner,
        "lease_expires_at": iso(report.lease_expires_at),
        "progress": report.progress or {},
        "counts": report.counts or {},
        "tool_version": report.tool_version,
        "created_at": iso(report.created_at),
        "updated_at": iso(report.updated_at),
    }


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
