"""Findings of a run: listing, filtered and ranked by impact (workers write them via services.pipeline)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.models import Finding
from app.services.runs import get_run

BREAKDOWN_KEYS = ("span_ns", "compute_ns", "comm_exposed_ns", "memory_only_ns", "idle_ns", "goodput_pct")


def finding_to_dict(f: Any) -> dict[str, Any]:
    """A Finding (or a row with its columns) as API data."""
    return {
        "id": f.id, "run_id": f.run_id, "report_id": f.report_id, "position": f.position,
        "rule_id": f.rule_id, "severity": f.severity, "title": f.title, "message": f.message,
        "impact_ns": f.impact_ns, "impact_pct": f.impact_pct, "advice": f.advice,
        "evidence": f.evidence or [], "evidence_total": f.evidence_total, "report": f.report,
        "rank": f.rank, "extra": f.extra or {},
    }


def list_findings(session: Session, run_id: int, *, severity: list[str] | None = None,
                  rule: list[str] | None = None, rank: int | None = None, page: int = 1,
                  page_size: int = 50) -> dict[str, Any]:
    """One page of the run's findings, largest impact first."""
    run = get_run(session, run_id)
    conditions: list[Any] = [Finding.run_id == run.id]
    if severity:
        conditions.append(Finding.severity.in_(severity))
    if rule:
        conditions.append(Finding.rule_id.in_(rule))
    if rank is not None:
        conditions.append(Finding.rank == rank)
    total = session.scalar(sa.select(sa.func.count(Finding.id)).where(*conditions)) or 0
    # Column rows, not ORM entities: this is the hottest read of the API.
    rows = session.execute(sa.select(*Finding.__table__.c).where(*conditions)
                           .order_by(Finding.impact_ns.desc(), Finding.position, Finding.id)
                           .limit(page_size).offset((page - 1) * page_size))
    return {"items": [finding_to_dict(r) for r in rows], "page": page, "page_size": page_size,
            "total": int(total)}
