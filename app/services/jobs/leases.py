"""The one lease machinery of the three kinds of job (ingest, a report's analysis, a run's analysis): claim,
renew, fail when the attempts are used up, and what reconcile finds expired.

A job is a row (a report or a run) with an owner, an expiry and an attempt counter. Every state change is
one conditional ``UPDATE ... WHERE <the state we expect>`` whose row count says whether we won (see
``app.services.jobs.jobstate`` for why that is atomic on both databases). What differs per kind is only which
columns hold the lease and which row state means "held" or "waiting": one ``Lease`` each below.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import InstrumentedAttribute, Session

from analysis.api import fmt
from app.db import changed
from app.models import AnalysisStatus, Report, ReportStatus, Run, utcnow
from app.models.status import derive_status
from app.services.reads.run_query import live

TERMINAL = (ReportStatus.READY, ReportStatus.FAILED)


class Outcome(Enum):
    """What a claim did: took the job, failed it (attempts used up by crashed workers), or nothing."""

    WON = "won"
    CRASHED = "crashed"
    NONE = "none"


def same_task(owner_column: Any, owner: str) -> sa.ColumnElement[bool]:
    """The lease is held by this very task: the owner ends with "/<celery task id>", and the same message
    delivered again means its first delivery died (acks_late + reject_on_worker_lost), so it may take its
    job back at once."""
    task_id = owner.rsplit("/", 1)[-1]
    return owner_column.like("%/" + task_id.replace("%", "").replace("_", "\\_"), escape="\\")


@dataclass(frozen=True)
class Lease:
    """Where one kind of job keeps its lease. ``held``: the row state of a job a worker holds; ``waiting``:
    the state of one no worker has taken yet (claimable without a lease to break); ``crash_text``: why a job
    whose attempts crashed workers failed (``{n}``: the attempts), the one crash message of its kind."""

    table: type[Report] | type[Run]
    held: sa.ColumnElement[bool]
    waiting: sa.ColumnElement[bool]
    owner: InstrumentedAttribute[str | None]
    expires: InstrumentedAttribute[datetime | None]
    attempts: InstrumentedAttribute[int]
    crash_text: str

    def claimable(self, owner: str, now: datetime) -> sa.ColumnElement[bool]:
        """Waiting, or held under a lease that expired (or never got an expiry), or held by this task."""
        return sa.or_(self.waiting, sa.and_(self.held, sa.or_(
            self.expires.is_(None), self.expires < now, same_task(self.owner, owner))))

    def expired(self, now: datetime) -> sa.ColumnElement[bool]:
        """Held under a lease that ran out: its worker died (or lost its heartbeat)."""
        return sa.and_(self.held, self.expires < now)

    def released(self) -> dict[Any, Any]:
        """The values that free the lease."""
        return {self.owner: None, self.expires: None}

    def crash_message(self, max_attempts: int) -> str:
        """Why a job of this kind failed after ``max_attempts`` claims by workers that died."""
        return self.crash_text.format(n=max_attempts)

    def release(self, session: Session, where: sa.ColumnElement[bool], values: Mapping[Any, Any]) -> int:
        """Free the lease of the rows ``where`` names (held or not) while setting ``values``; the rows changed.
        No commit."""
        return changed(session, sa.update(self.table).where(where).values({**values, **self.released()}))

    def finish(self, session: Session, row: sa.ColumnElement[bool], owner: str, values: Mapping[Any, Any]) -> bool:
        """End a job ``owner`` holds (publish it, fail it, or send it back) with ``values``, freeing its lease;
        False when the lease was lost. No commit."""
        return bool(self.release(session, sa.and_(row, self.owner == owner, self.held), values))

    def clear(self, row: Report | Run) -> None:
        """Free the lease of a loaded row (the caller's transaction writes it)."""
        setattr(row, self.owner.key, None)
        setattr(row, self.expires.key, None)

    def claim(self, session: Session, row: sa.ColumnElement[bool], owner: str, lease_seconds: int,
              max_attempts: int, *, take: Mapping[Any, Any], crash: Mapping[Any, Any],
              now: datetime) -> Outcome:
        """Take the job ``row`` names (lease, one more attempt, then ``take``), or fail it with ``crash``
        when its attempts are used up. No commit: the caller reads what it needs in the same transaction."""
        claimable = sa.and_(row, self.claimable(owner, now))
        crashed = changed(session,
            sa.update(self.table).where(claimable, self.attempts >= max_attempts)
            .values({**self.released(), **crash}))
        if crashed:
            return Outcome.CRASHED
        won = changed(session,
            sa.update(self.table).where(claimable, self.attempts < max_attempts)
            .values({self.attempts: self.attempts + 1, self.owner: owner,
                     self.expires: now + timedelta(seconds=lease_seconds), **take}))
        return Outcome.WON if won else Outcome.NONE

    def renew(self, session: Session, row: sa.ColumnElement[bool], owner: str, lease_seconds: int) -> bool:
        """Extend a held lease (the heartbeat of a long job); False when it was lost. Commits."""
        n = changed(session,
            sa.update(self.table).where(row, self.owner == owner, self.held)
            .values({self.expires: utcnow() + timedelta(seconds=lease_seconds)}))
        session.commit()
        return bool(n)


INGEST = Lease(Report, Report.status == ReportStatus.INGESTING, Report.status == ReportStatus.QUEUED,
               Report.lease_owner, Report.lease_expires_at, Report.attempts,
               "the worker died {n} times while ingesting this file (killed, out of memory, or over its time "
               "limit); try a smaller export or raise GOODPUT_INGEST_MEMORY_BYTES")
# A report's analysis is queued by the ingest that publishes it: ``analyzing`` with no lease yet.
REPORT_ANALYSIS = Lease(Report, Report.status == ReportStatus.ANALYZING, sa.false(), Report.lease_owner,
                        Report.lease_expires_at, Report.analysis_attempts,
                        "the worker died {n} times while analyzing this report (killed, out of memory, or over its "
                        "time limit); raise GOODPUT_ANALYSIS_MEMORY_BYTES or retry the run")
RUN_ANALYSIS = Lease(Run, Run.analysis_status == AnalysisStatus.ANALYZING, Run.analysis_status == AnalysisStatus.QUEUED,
                     Run.analysis_lease_owner, Run.analysis_lease_expires_at, Run.analysis_attempts,
                     "the analysis crashed its worker {n} times")


def fail_used_up(session: Session, lease: Lease, max_attempts: int, now: datetime) -> list[int]:
    """Fail (``worker_crashed``) the reports whose ``lease`` expired with their attempts used up, each by a
    conditional UPDATE; returns the runs that completed. No commit."""
    expired = lease.expired(now)
    runs: list[int] = []
    for rid in session.execute(sa.select(Report.id).where(expired, lease.attempts >= max_attempts)).scalars():
        n = lease.release(session, sa.and_(Report.id == rid, expired), {
            Report.status: ReportStatus.FAILED, Report.error_code: "worker_crashed",
            Report.error_message: lease.crash_message(max_attempts), Report.updated_at: now})
        if n and (run_id := after_terminal(session, rid)) is not None:
            runs.append(run_id)
    return runs


def _none_ready(session: Session, run_id: int) -> str:
    """Why a run with no ready report has no analysis, from its reports' own errors: a report whose analysis
    failed (a window that fits it not, ``analysis_failed: bad_window: ...``) was ingested, so the message says so
    and names each report's code (the first three, then how many more)."""
    rows = session.execute(sa.select(Report.name, Report.error_code, Report.error_message)
                           .where(Report.run_id == run_id).order_by(Report.id)).all()
    codes = [code if code != "analysis_failed" else (message or "").split(":", 1)[0] or code
             for _, code, message in rows]
    analyzed_only = bool(rows) and all(code == "analysis_failed" for _, code, _ in rows)
    if analyzed_only and set(codes) == {"bad_window"}:
        head = "the analysis window fits none of the run's reports"
    elif analyzed_only:
        head = "every report of this run was ingested, but none could be analyzed"
    else:
        head = "no report of this run could be ingested and analyzed"
    named = "; ".join(f"{name}: {code or 'failed'}" for (name, _, _), code in zip(rows[:3], codes, strict=False))
    more = f"; and {fmt.count(len(rows) - 3)} more" if len(rows) > 3 else ""
    return f"{head} ({named}{more}); see each report's error"


def after_terminal(session: Session, report_id: int) -> int | None:
    """When every report of the run is terminal, queue a (re-)analysis; returns the run id if so."""
    run_id = session.execute(sa.select(Report.run_id).where(Report.id == report_id)).scalar_one_or_none()
    if run_id is None:
        return None
    # Lock the run row (PostgreSQL) so two reports finishing together cannot both miss each other.
    session.execute(sa.select(Run.id).where(Run.id == run_id).with_for_update())
    pending = session.execute(
        sa.select(sa.func.count()).select_from(Report)
        .where(Report.run_id == run_id, Report.status.not_in(TERMINAL))
    ).scalar_one()
    if pending:
        refresh_run_status(session, run_id)
        return None
    ready = session.execute(
        sa.select(sa.func.count()).select_from(Report).where(Report.run_id == run_id, Report.status == ReportStatus.READY)
    ).scalar_one()
    state = {Run.analysis_status: AnalysisStatus.QUEUED, Run.error: None} if ready else {
        Run.analysis_status: AnalysisStatus.FAILED, Run.error: _none_ready(session, run_id)}
    RUN_ANALYSIS.release(session, sa.and_(Run.id == run_id, live()),
                         {**state, Run.analysis_attempts: 0, Run.updated_at: utcnow()})
    refresh_run_status(session, run_id)
    return run_id if ready else None


def refresh_run_status(session: Session, run_id: int) -> None:
    """Store the run's derived status (what lists filter on) in the caller's transaction."""
    run = session.execute(sa.select(Run.deleted_at, Run.analysis_status).where(Run.id == run_id)).one_or_none()
    if run is None:
        return
    statuses = list(session.execute(sa.select(Report.status).where(Report.run_id == run_id)).scalars())
    session.execute(sa.update(Run).where(Run.id == run_id).values(status=derive_status(run, statuses)))
