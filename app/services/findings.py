"""Findings of a run: listing, filtered and ranked by impact (workers write them via services.pipeline)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.models import Finding
from app.services.paging import paginate
from app.services.runs import get_run

BREAKDOWN_KEYS = ("span_ns", "compute_ns", "comm_exposed_ns", "memory_only_ns", "idle_ns", "goodput_pct")


def finding_to_dict(f: Finding) -> dict[str, Any]:
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
    query = sa.select(Finding).where(Finding.run_id == run.id)
    if severity:
        query = query.where(Finding.severity.in_(severity))
    if rule:
        query = query.where(Finding.rule_id.in_(rule))
    if rank is not None:
        query = query.where(Finding.rank == rank)
    query = query.order_by(Finding.impact_ns.desc(), Finding.position, Finding.id)
    return paginate(session, query, page, page_size, finding_to_dict)
