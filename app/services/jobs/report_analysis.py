"""Job state of the per-report analysis step in the metadata DB.

A report's life: ``queued`` -> ``ingesting`` -> ``analyzing`` -> ``ready`` (or ``failed``). ``analyzing``
is the per-report analysis (``analysis.run.runner.analyze_report``), one Celery task per report, queued by
the ingest that published the report and claimed like an ingest: a conditional UPDATE that takes a
lease (``lease_owner``/``lease_expires_at``, free again once the step is done) and counts an attempt
(``analysis_attempts``). Publishing it makes the report ``ready``, which may complete the run: the run-level
step is then queued by ``leases.after_terminal`` under the run's row lock, and claimed once by
``pipeline.claim_run_analysis`` (conditional UPDATE), however many reports finish together.

ncu reports skip this step (their nsys time comes from the run's nsys reports, so the run-level step
analyzes them); a report whose analysis fails is ``failed`` (``analysis_failed``) and the run is analyzed
with the reports it has, naming the missing ones.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from analysis.api import ToolKind
from app.models import AnalysisStatus, Report, ReportStatus, Run, utcnow
from app.services.jobs.leases import (
    REPORT_ANALYSIS,
    RUN_ANALYSIS,
    Outcome,
    after_terminal,
    fail_used_up,
    refresh_run_status,
)
from app.services.jobs.runs import run_thresholds
from app.services.reads.run_query import of_live_run

logger = logging.getLogger(__name__)

ANALYSIS_DIR = "analysis"  # beside trace.duckdb in the report's folder


@dataclass
class ReportAnalysisClaim:
    """What a claimed per-report analysis reads: the trace, its label in findings, the run's window."""

    report_id: int
    run_id: int = 0
    trace_path: str | None = None
    label: str = ""
    window: str | None = None
    thresholds: dict[str, float] = field(default_factory=dict)  # the run's threshold overrides
    # Set when the claim failed the report (attempts used up) and that completed its run.
    analyze_run_id: int | None = None

    def __bool__(self) -> bool:
        return self.trace_path is not None


def report_label(session: Session, report_id: int) -> str:
    """The report's name in findings: its file name, with ``#id`` when the run has that name twice (as
    ``pipeline.claim_run_analysis`` labels them)."""
    row = session.execute(sa.select(Report.name, Report.run_id).where(Report.id == report_id)).one()
    same = session.scalar(sa.select(sa.func.count()).select_from(Report)
                          .where(Report.run_id == row.run_id, Report.name == row.name))
    return row.name if same == 1 else f"{row.name}#{report_id}"


def claim_report_analysis(session: Session, report_id: int, owner: str, lease_seconds: int, *,
                          max_attempts: int = 3) -> ReportAnalysisClaim:
    """Take a report's analysis (lease + attempt); falsy when it is not waiting for it, held, or gone.
    A report whose analysis attempts are used up by crashed workers is failed instead. Commits."""
    now = utcnow()
    claim = ReportAnalysisClaim(report_id)
    outcome = REPORT_ANALYSIS.claim(
        session, sa.and_(Report.id == report_id, of_live_run()), owner, lease_seconds, max_attempts, now=now,
        crash={Report.status: ReportStatus.FAILED, Report.error_code: "worker_crashed",
               Report.error_message: REPORT_ANALYSIS.crash_message(max_attempts), Report.updated_at: now},
        take={Report.progress: {"stage": "analyzing", "done": 0, "total": 1}, Report.updated_at: now})
    if outcome is Outcome.CRASHED:
        claim.analyze_run_id = after_terminal(session, report_id)
        session.commit()
        return claim
    won = outcome is Outcome.WON
    if won:
        row = session.execute(sa.select(Report.run_id, Report.trace_path).where(Report.id == report_id)).one()
        claim.run_id, claim.trace_path = row.run_id, row.trace_path
        claim.label = report_label(session, report_id)
        claim.window, tags = session.execute(
            sa.select(Run.analysis_window, Run.tags).where(Run.id == row.run_id)).one()
        claim.thresholds = run_thresholds(tags)
        refresh_run_status(session, row.run_id)
    session.commit()
    if won and claim.trace_path is None:  # cannot happen: an analyzing report was published with its trace
        raise RuntimeError(f"report {report_id} is analyzing without a trace")
    return claim


def renew_lease(session: Session, report_id: int, owner: str, lease_seconds: int) -> bool:
    """Extend a held lease (the heartbeat of a long analysis); False when the lease was lost."""
    return REPORT_ANALYSIS.renew(session, Report.id == report_id, owner, lease_seconds)


def finish_report_analysis(session: Session, report_id: int, owner: str, analysis_path: str,
                           window: str) -> int | None:
    """Publish a report's analysis: the report is ``ready``; returns the run id when that completed the run."""
    now = utcnow()
    n = REPORT_ANALYSIS.finish(session, Report.id == report_id, owner, {
        Report.status: ReportStatus.READY, Report.analysis_path: analysis_path, Report.analysis_window: window,
        Report.analyzed_at: now, Report.progress: {"stage": "done", "done": 1, "total": 1}, Report.updated_at: now})
    if not n:
        session.rollback()
        logger.warning("lease lost before the report's analysis was published; result dropped",
                       extra={"report_id": report_id})
        return None
    run_id = after_terminal(session, report_id)
    session.commit()
    return run_id


def note_window(session: Session, report_id: int, owner: str, window: str) -> None:
    """Record the window a held analysis was for (before failing it: a re-analysis for another window
    tries the report again). No commit: the caller's next call commits."""
    session.execute(sa.update(Report).where(Report.id == report_id, Report.lease_owner == owner)
                    .values(analysis_window=window))


def stale_reports(session: Session, run_id: int, window: str) -> list[int]:
    """nsys reports of the run without their own analysis for ``window``: ready ones analyzed for another
    window (or before the per-report step), and those whose analysis failed (for another window, perhaps: a window
    one rank lacks)."""
    other = sa.or_(Report.analysis_path.is_(None), Report.analysis_window.is_(None), Report.analysis_window != window)
    failed = sa.and_(Report.status == ReportStatus.FAILED, Report.error_code == "analysis_failed",
                     sa.or_(Report.analysis_window.is_(None), Report.analysis_window != window))
    return list(session.scalars(
        sa.select(Report.id).where(
            Report.run_id == run_id, Report.kind == ToolKind.NSYS.value, Report.trace_path.is_not(None),
            sa.or_(sa.and_(Report.status == ReportStatus.READY, other), failed))
        .order_by(Report.id)))


def send_back(session: Session, run_id: int, owner: str, report_ids: list[int]) -> list[int]:
    """The run-level step found reports to analyze first (a new window, or reports from before the per-report step):
    they go back to ``analyzing`` and the run's claim is released (queued: the last of them re-queues it).
    Returns the reports to enqueue. Commits."""
    now = utcnow()
    held = RUN_ANALYSIS.finish(session, Run.id == run_id, owner, {
        Run.analysis_status: AnalysisStatus.QUEUED, Run.analysis_attempts: Run.analysis_attempts - 1,
        Run.updated_at: now})
    if not held:
        session.rollback()
        return []
    sent = []
    for rid in report_ids:
        n = REPORT_ANALYSIS.release(
            session, sa.and_(Report.id == rid, Report.status.in_((ReportStatus.READY, ReportStatus.FAILED))),
            {Report.status: ReportStatus.ANALYZING, Report.analysis_attempts: 0, Report.error_code: None,
             Report.error_message: None, Report.updated_at: now})
        if n:
            sent.append(rid)
    refresh_run_status(session, run_id)
    session.commit()
    return sent


def reconcile_analyses(session: Session, *, now: datetime, lease_seconds: int, max_attempts: int) -> tuple[list[int], list[int]]:
    """Per-report analyses to send again: an expired lease (its worker died) or none taken for a lease
    period (a lost message). Those whose attempts are used up are failed. Returns (report ids to
    enqueue, run ids completed by a failure). No commit: ``pipeline.reconcile``'s transaction."""
    stale = now - timedelta(seconds=lease_seconds)
    runs = fail_used_up(session, REPORT_ANALYSIS, max_attempts, now)
    again = sa.or_(sa.and_(REPORT_ANALYSIS.expired(now), Report.analysis_attempts < max_attempts),
                   sa.and_(Report.status == ReportStatus.ANALYZING, Report.lease_owner.is_(None), Report.updated_at < stale))
    ids = list(session.execute(sa.select(Report.id).where(again).order_by(Report.id)).scalars())
    if ids:
        REPORT_ANALYSIS.release(session, sa.and_(Report.id.in_(ids), again), {Report.updated_at: now})
    return ids, runs


def missing_reports(session: Session, run_id: int) -> list[dict[str, object]]:
    """The run's reports that failed (ingest or analysis): what a run analyzed without them lacks."""
    rows = session.execute(
        sa.select(Report.id, Report.name, Report.rank, Report.error_code, Report.error_message)
        .where(Report.run_id == run_id, Report.status == ReportStatus.FAILED).order_by(Report.rank.is_(None), Report.rank,
                                                                           Report.id)).all()
    return [{"report_id": r.id, "report": r.name, "rank": r.rank, "error_code": r.error_code,
             "error_message": r.error_message} for r in rows]

