"""Jobs: the list with run counts, and one job's per-run headline numbers over time."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.models import Job, Run
from app.services.reads import run_repo
from app.services.reads.reports import iso
from app.services.reads.run_query import live
from app.services.reads.run_repo import get_job


def list_jobs(session: Session, *, page: int = 1, page_size: int = 50) -> dict[str, Any]:
    """Jobs by name with how many live runs they have and when the last one was created."""
    query = (sa.select(Job, sa.func.count(Run.id), sa.func.max(Run.created_at))
             .outerjoin(Run, sa.and_(Run.job_id == Job.id, live())).group_by(Job.id).order_by(Job.name))
    total = session.scalar(sa.select(sa.func.count(Job.id))) or 0
    rows = session.execute(query.limit(page_size).offset((page - 1) * page_size)).all()
    items = [{"id": j.id, "name": j.name, "created_at": iso(j.created_at), "run_count": int(n),
              "last_run_at": iso(last)}
             for j, n, last in rows]
    return {"items": items, "page": page, "page_size": page_size, "total": int(total)}


def job_history(session: Session, name: str, *, limit: int = 100) -> dict[str, Any]:
    """The job's last ``limit`` live runs, oldest first, with their headline numbers."""
    job = get_job(session, name)
    return {"job": job.name, "items": [p.to_api() for p in run_repo.job_history(session, job, limit=limit)]}
