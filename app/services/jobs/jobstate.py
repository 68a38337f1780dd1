"""Job state of ingests and analyses in the metadata DB: claims with leases, heartbeats, progress, failures,
and reconcile of expired leases and lost messages. The lease itself (claim, renew, fail when used up) is
``app.services.jobs.leases``, shared by the three kinds of job.

Celery only carries ids; the rows here are the truth. Every state change is one conditional
``UPDATE ... WHERE <the state we expect>`` whose row count says whether we won, which is atomic on
PostgreSQL (the row lock is taken and the WHERE re-checked) and on SQLite (the write lock is taken
before anything is read, so no stale snapshot can be written over). A message delivered twice, a
worker that died, or a broker that lost its queue therefore never yields two results.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.models import AnalysisStatus, Report, ReportStatus, Run, utcnow
from app.services.jobs.jsoncols import jsonable
from app.services.jobs.leases import (
    INGEST,
    RUN_ANALYSIS,
    TERMINAL,
    Outcome,
    after_terminal,
    fail_used_up,
    refresh_run_status,
    same_task,
)
from app.services.jobs.report_analysis import reconcile_analyses
from app.services.jobs.runs import run_thresholds
from app.services.reads.run_query import live, of_live_run
from app.services.storage import Storage

logger = logging.getLogger(__name__)


@dataclass
class Claim:
    """The outcome of ``claim_report``: truthy when this worker now holds the report."""

    report_id: int
    upload_path: str | None = None
    attempts: int = 0
    sha256: str = ""
    # Set when the claim failed the report (attempts used up) and that completed its run.
    analyze_run_id: int | None = None

    def __bool__(self) -> bool:
        return self.upload_path is not None


@dataclass
class AnalysisInputs:
    """The ingested reports a claimed analysis reads: ids, DuckDB paths (data_dir-relative), labels."""

    run_id: int
    report_ids: list[int] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    window: str | None = None  # the run's analysis window (None: the default)
    # Per report: its tool, and its own analysis' folder (data_dir-relative) and window.
    kinds: list[str] = field(default_factory=list)
    analysis_paths: list[str | None] = field(default_factory=list)
    analysis_windows: list[str | None] = field(default_factory=list)
    thresholds: dict[str, float] = field(default_factory=dict)  # the run's threshold overrides


@dataclass
class Requeue:
    """What ``reconcile`` decided to send again."""

    reports: list[int] = field(default_factory=list)
    runs: list[int] = field(default_factory=list)
    analyses: list[int] = field(default_factory=list)  # reports whose own analysis is sent again


def claim_report(session: Session, report_id: int, owner: str, lease_seconds: int, *,
                 max_attempts: int = 3) -> Claim:
    """Take the report for ingest (lease + attempt counter, one transaction); commits.

    Falsy when the report is finished, held by a live lease, or gone. A report whose attempts are
    used up by crashed workers is failed with ``worker_crashed`` instead.
    """
    now = utcnow()
    claim = Claim(report_id)
    outcome = INGEST.claim(
        session, sa.and_(Report.id == report_id, of_live_run()), owner, lease_seconds, max_attempts, now=now,
        crash={Report.status: ReportStatus.FAILED, Report.error_code: "worker_crashed",
               Report.error_message: INGEST.crash_message(max_attempts), Report.updated_at: now},
        take={Report.status: ReportStatus.INGESTING, Report.error_code: None, Report.error_message: None,
              Report.progress: {"stage": "starting", "done": 0, "total": 0}, Report.updated_at: now})
    if outcome is Outcome.CRASHED:
        claim.analyze_run_id = after_terminal(session, report_id)
        session.commit()
        return claim
    if outcome is Outcome.WON:
        row = session.execute(sa.select(Report.upload_path, Report.attempts, Report.run_id, Report.sha256)
                              .where(Report.id == report_id)).one()
        claim.upload_path, claim.attempts, claim.sha256 = row.upload_path, row.attempts, row.sha256
        refresh_run_status(session, row.run_id)
    session.commit()
    return claim


def renew_report_lease(session: Session, report_id: int, owner: str, lease_seconds: int) -> bool:
    """Extend a held lease (the heartbeat of a long ingest); False when the lease was lost."""
    return INGEST.renew(session, Report.id == report_id, owner, lease_seconds)


def renew_run_lease(session: Session, run_id: int, owner: str, lease_seconds: int) -> bool:
    """Extend a held analysis lease (the heartbeat of a long analysis); False when the lease was lost."""
    return RUN_ANALYSIS.renew(session, Run.id == run_id, owner, lease_seconds)


def set_progress(session: Session, report_id: int, owner: str, stage: str, done: int, total: int) -> None:
    """Record ingest progress (stage or table, done, total) on the report while the lease is held."""
    session.execute(
        sa.update(Report)
        .where(Report.id == report_id, Report.lease_owner == owner, Report.status == ReportStatus.INGESTING)
        .values(progress={"stage": str(stage), "done": int(done), "total": int(total)}, updated_at=utcnow())
    )
    session.commit()


def finish_ingest(session: Session, report_id: int, owner: str, trace_file: Path, tool: str,
                  info: Mapping[str, Any] | None, storage: Storage, upload_path: str | None = None,
                  then: ReportStatus = ReportStatus.READY) -> int | None:
    """Publish an ingest: the report becomes ``then``; returns the run id when the run is now complete.

    ``then``: ``ready``, or ``analyzing`` when the report's own analysis follows (the worker
    queues it; ``app.services.jobs.report_analysis``). ``upload_path``: the stored export the report keeps
    from now on (the scrubbed copy), when it changed. ``trace_file`` is stored under its key in ``storage``.
    """
    info = dict(info or {})
    counts = info.get("counts") if isinstance(info.get("counts"), dict) else {}
    rel = storage.key_of(trace_file)
    rank = info.get("rank") if isinstance(info.get("rank"), int) and not isinstance(info.get("rank"), bool) else None
    host = str(info["host"])[:200] if info.get("host") else None
    n = INGEST.finish(session, Report.id == report_id, owner, {
        # Rank and host come from the export (its allow-listed environment) unless the upload gave them.
        Report.rank: sa.func.coalesce(Report.rank, rank), Report.host: sa.func.coalesce(Report.host, host),
        Report.status: then, Report.kind: tool, Report.trace_path: rel, Report.info: jsonable(info),
        Report.counts: jsonable(counts), Report.tool_version: _str_or_none(info.get("tool_version")),
        Report.progress: {"stage": "done", "done": 1, "total": 1}, Report.updated_at: utcnow(),
        **({Report.upload_path: upload_path} if upload_path else {}),
        # A new trace: its own analysis (if any) is of the old one.
        **({Report.analysis_path: None, Report.analysis_window: None, Report.analysis_attempts: 0}
           if then == ReportStatus.ANALYZING else {})})
    if not n:
        session.rollback()
        logger.warning("lease lost before publish; result dropped", extra={"report_id": report_id})
        return None
    if then == ReportStatus.ANALYZING:  # not terminal: the report's analysis task completes the run, if anyone
        refresh_run_status(session, session.execute(sa.select(Report.run_id).where(Report.id == report_id)).scalar_one())
        session.commit()
        return None
    run_id = after_terminal(session, report_id)
    session.commit()
    return run_id


def fail_report(session: Session, report_id: int, code: str, message: str, *, owner: str | None = None,
                task_id: str | None = None) -> int | None:
    """Fail a report with a typed error; returns the run id when that completed the run.

    ``owner``: only while that worker holds the lease; ``task_id``: only while the Celery task of that id holds
    it (the worker's main process, failing a task its pool process could not finish, knows no more)."""
    cond = [Report.id == report_id, Report.status.not_in(TERMINAL)]
    if owner is not None:
        cond.append(Report.lease_owner == owner)
    if task_id is not None:
        cond.append(same_task(Report.lease_owner, f"/{task_id}"))
    n = INGEST.release(session, sa.and_(*cond), {Report.status: ReportStatus.FAILED, Report.error_code: code,
                                                 Report.error_message: message, Report.updated_at: utcnow()})
    run_id = after_terminal(session, report_id) if n else None
    session.commit()
    return run_id


def claim_run_analysis(session: Session, run_id: int, owner: str, lease_seconds: int, *,
                       max_attempts: int = 3) -> AnalysisInputs | None:
    """Take a complete run for analysis; None when it is not queued (or is held, or gone). Commits."""
    now = utcnow()
    complete = sa.and_(Run.id == run_id, live(),
                       ~sa.exists().where(Report.run_id == Run.id, Report.status.not_in(TERMINAL)))
    outcome = RUN_ANALYSIS.claim(
        session, complete, owner, lease_seconds, max_attempts, now=now,
        crash={Run.analysis_status: AnalysisStatus.FAILED, Run.error: RUN_ANALYSIS.crash_message(max_attempts),
               Run.updated_at: now},
        take={Run.analysis_status: AnalysisStatus.ANALYZING, Run.updated_at: now})
    if outcome is Outcome.CRASHED:
        refresh_run_status(session, run_id)
        session.commit()
        return None
    if outcome is Outcome.NONE:
        session.commit()
        return None
    rows = session.execute(
        sa.select(Report.id, Report.name, Report.trace_path, Report.kind, Report.analysis_path,
                  Report.analysis_window)
        .where(Report.run_id == run_id, Report.status == ReportStatus.READY, Report.trace_path.is_not(None))
        .order_by(Report.rank.is_(None), Report.rank, Report.id)
    ).all()
    window, tags = session.execute(sa.select(Run.analysis_window, Run.tags).where(Run.id == run_id)).one()
    refresh_run_status(session, run_id)
    session.commit()
    inputs = AnalysisInputs(run_id, window=window, thresholds=run_thresholds(tags))
    names = [r.name for r in rows]
    for r in rows:
        # Labels name the report in findings; a file name seen twice in a run gets its id appended.
        label = r.name if names.count(r.name) == 1 else f"{r.name}#{r.id}"
        inputs.report_ids.append(r.id)
        inputs.paths.append(r.trace_path)
        inputs.labels.append(label)
        inputs.kinds.append(r.kind)
        inputs.analysis_paths.append(r.analysis_path)
        inputs.analysis_windows.append(r.analysis_window)
    return inputs


def fail_run_analysis(session: Session, run_id: int, owner: str, message: str) -> bool:
    """Mark a held analysis failed with a message a person can act on."""
    n = RUN_ANALYSIS.release(session, sa.and_(Run.id == run_id, Run.analysis_lease_owner == owner), {
        Run.analysis_status: AnalysisStatus.FAILED, Run.error: message, Run.updated_at: utcnow()})
    if n:
        refresh_run_status(session, run_id)
    session.commit()
    return bool(n)


def reconcile(session: Session, *, lease_seconds: int, max_attempts: int = 3,
              now: datetime | None = None) -> Requeue:
    """Find work to send again: expired leases, and jobs left queued with no claim (a lost message).

    A report whose lease expired goes back to ``queued`` (or ``failed``/``worker_crashed`` when its
    attempts are used up); its ``updated_at`` is bumped so each stale job is re-sent once per lease
    period, not on every tick. Commits; the caller enqueues the returned ids.
    """
    now = now or utcnow()
    stale = now - timedelta(seconds=lease_seconds)
    out = Requeue()
    out.runs += fail_used_up(session, INGEST, max_attempts, now)
    requeue_reports = sa.and_(of_live_run(), sa.or_(sa.and_(INGEST.expired(now), Report.attempts < max_attempts),
                                                    sa.and_(Report.status == ReportStatus.QUEUED, Report.updated_at < stale)))
    ids = list(session.execute(sa.select(Report.id).where(requeue_reports).order_by(Report.id)).scalars())
    if ids:
        INGEST.release(session, sa.and_(Report.id.in_(ids), requeue_reports),
                       {Report.status: ReportStatus.QUEUED, Report.updated_at: now})
        out.reports.extend(ids)
    out.analyses, completed = reconcile_analyses(session, now=now, lease_seconds=lease_seconds,
                                                 max_attempts=max_attempts)
    out.runs.extend(r for r in completed if r not in out.runs)
    complete = ~sa.exists().where(Report.run_id == Run.id, Report.status.not_in(TERMINAL))
    has_reports = sa.exists().where(Report.run_id == Run.id)
    run_stale = sa.and_(live(), complete, has_reports, sa.or_(
        RUN_ANALYSIS.expired(now),
        sa.and_(sa.or_(Run.analysis_status == AnalysisStatus.QUEUED, Run.analysis_status.is_(None)),
                Run.updated_at < stale),
    ))
    run_ids = list(session.execute(sa.select(Run.id).where(run_stale).order_by(Run.id)).scalars())
    if run_ids:
        # An expired analysis keeps its attempt count; the claim fails it once the count is used up.
        RUN_ANALYSIS.release(session, sa.and_(Run.id.in_(run_ids), run_stale),
                             {Run.analysis_status: AnalysisStatus.QUEUED, Run.updated_at: now})
        out.runs.extend(r for r in run_ids if r not in out.runs)
    session.commit()
    return out


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)[:100]

