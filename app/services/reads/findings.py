"""Findings of a run: listing, filtered and ranked by impact (workers write them via services.pipeline)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.ids import valid_id
from app.models import Finding, Run
from app.services.reads.run_query import live
from app.services.reads.run_repo import get_run

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
    if not valid_id(run_id):
        get_run(session, run_id)  # raises RUN_NOT_FOUND before the driver sees an out-of-range id
    conditions: list[Any] = [Finding.run_id == run_id]
    if severity:
        conditions.append(Finding.severity.in_(severity))
    if rule:
        conditions.append(Finding.rule_id.in_(rule))
    if rank is not None:
        return _of_rank(session, run_id, conditions, rank, page, page_size)
    # One round trip for the hottest read of the API: column rows (not ORM entities), the total as a
    # window over the same filter, the run's liveness as a join. Only an empty page needs more.
    rows = session.execute(
        sa.select(*Finding.__table__.c, sa.func.count().over().label("total"))
        .join(Run, sa.and_(Run.id == Finding.run_id, live()))
        .where(*conditions)
        .order_by(Finding.position, Finding.id)  # the analysis' ranking (analysis.diagnosis.findings.rank_findings)
        .limit(page_size).offset((page - 1) * page_size)
    ).all()
    if rows:
        total = rows[0].total
    else:
        get_run(session, run_id)  # RUN_NOT_FOUND, or a genuinely empty page
        total = session.scalar(sa.select(sa.func.count(Finding.id)).where(*conditions)) or 0
    return {"items": [finding_to_dict(r) for r in rows], "page": page, "page_size": page_size,
            "total": int(total)}


def has_rank(f: Any, rank: int) -> bool:
    """Whether a stored finding concerns ``rank``: its own rank, or a part of it (a finding across the
    ranks of a multi-rank run lists each rank's part in ``per_rank``)."""
    parts = (f.extra or {}).get("per_rank")
    if isinstance(parts, list):
        return any(isinstance(p, dict) and p.get("rank") == rank for p in parts)
    return f.rank == rank


def _of_rank(session: Session, run_id: int, conditions: list[Any], rank: int, page: int,
             page_size: int) -> dict[str, Any]:
    """The page of the run's findings that concern ``rank`` (``has_rank``): ``per_rank`` is JSON, so the
    run's findings (one per rule and scope: tens) are filtered here, in ranking order."""
    get_run(session, run_id)
    rows = session.execute(
        sa.select(*Finding.__table__.c).join(Run, sa.and_(Run.id == Finding.run_id, live()))
        .where(*conditions).order_by(Finding.position, Finding.id)
    ).all()
    mine = [r for r in rows if has_rank(r, rank)]
    start = (page - 1) * page_size
    return {"items": [finding_to_dict(r) for r in mine[start:start + page_size]], "page": page,
            "page_size": page_size, "total": len(mine)}
