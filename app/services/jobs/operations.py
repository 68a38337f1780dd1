"""Operating the stored files and jobs: retry of transient failures, re-ingest, and what may be deleted when
(uploads no report needs, leftovers of killed attempts and uploads, exports past their retention)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.errors import ApiError
from app.models import AnalysisStatus, Report, ReportStatus, Run, utcnow
from app.services.jobs.leases import INGEST, RUN_ANALYSIS
from app.services.jobs.runs import refresh_status
from app.services.reads.run_query import live
from app.services.reads.run_repo import get_run
from app.services.storage import KEPT_SUFFIX, STAGING_IDLE_S, storage_for
from app.settings import Settings

logger = logging.getLogger(__name__)

# Failures that say nothing about the file: the same bytes may well ingest on another try.
TRANSIENT = ("no_space", "timeout", "worker_crashed")
# A stored upload no row refers to may be one whose row is not committed yet: older than this it is an orphan.
ORPHAN_AGE_S = 3600.0
# A file a row points to but no report needs is left this long after it was last stored (the same bytes may
# be arriving again: ``Storage.store`` touches the file).
RECENT_S = 300.0


def _needs(rel: str) -> sa.ColumnElement[bool]:
    """Reports that still need the stored file ``rel``: pending, ready, or failed for a transient reason."""
    return sa.and_(Report.upload_path == rel, sa.or_(
        Report.status.in_((ReportStatus.QUEUED, ReportStatus.INGESTING, ReportStatus.ANALYZING, ReportStatus.READY)),
        sa.and_(Report.status == ReportStatus.FAILED, Report.error_code.in_(TRANSIENT))))


def source_of(settings: Settings, upload_path: str, sha256: str) -> Path | None:
    """The stored export to ingest: the kept copy of these bytes when one exists (validated and scrubbed
    already, by this report's earlier ingest or another report's of the same bytes), else the report's own
    file; None when neither exists."""
    storage = storage_for(settings)
    for rel in (storage.kept_path(sha256) if sha256 else None, upload_path):
        if rel and storage.exists(rel):
            return storage.path(rel)
    return None


def release_upload(session: Session, settings: Settings, rel: str | None) -> bool:
    """Delete the stored file ``rel`` when no report needs it any more (call after committing)."""
    if not rel:
        return False
    needed = session.execute(sa.select(sa.func.count()).select_from(Report).where(_needs(rel))).scalar_one()
    session.rollback()
    if needed or not storage_for(settings).remove(rel):
        return False
    logger.info("removed stored upload %s: no report needs it", rel)
    return True


@dataclass
class Requeued:
    """Reports sent to ingest again, the run whose analysis was re-queued, and reports that could not be."""

    reports: list[int] = field(default_factory=list)
    analyze_run: int | None = None
    missing: list[int] = field(default_factory=list)


def reopen_run(run: Run) -> None:
    """A run that gets a report to ingest again forgets a failed analysis (it is analyzed again once its
    reports are done); otherwise it would still read failed while its reports are queued."""
    if run.analysis_status == AnalysisStatus.FAILED:
        run.analysis_status, run.error, run.analysis_attempts = None, None, 0


def _requeue(session: Session, settings: Settings, rows: list[Report], out: Requeued) -> None:
    now = utcnow()
    for report in rows:
        if source_of(settings, report.upload_path, report.sha256) is None:
            out.missing.append(report.id)
            continue
        n = INGEST.release(
            session, sa.and_(Report.id == report.id, Report.status.in_((ReportStatus.READY, ReportStatus.FAILED))),
            {Report.status: ReportStatus.QUEUED, Report.attempts: 0, Report.error_code: None,
             Report.error_message: None, Report.progress: {}, Report.updated_at: now})
        if n:
            out.reports.append(report.id)


def retry_run(session: Session, settings: Settings, run_id: int) -> Requeued:
    """Send a run's reports that failed for a transient reason (``TRANSIENT``) to ingest again; when none
    did and the analysis failed, queue the analysis again. Commits, then enqueues. 409 when nothing can be
    retried."""
    from app import queue

    run = get_run(session, run_id, for_update=True)
    rows = list(session.scalars(sa.select(Report).where(
        Report.run_id == run.id, Report.status == ReportStatus.FAILED, Report.error_code.in_(TRANSIENT)).order_by(Report.id)))
    out = Requeued()
    _requeue(session, settings, rows, out)
    if out.reports:
        reopen_run(run)
    if not rows and run.analysis_status == AnalysisStatus.FAILED and session.scalar(
            sa.select(sa.func.count()).select_from(Report).where(Report.run_id == run.id, Report.status == ReportStatus.READY)):
        run.analysis_status, run.analysis_attempts, run.error = AnalysisStatus.QUEUED, 0, None
        RUN_ANALYSIS.clear(run)
        out.analyze_run = run.id
    if not out.reports and out.analyze_run is None:
        session.rollback()
        why = ("the stored export of each failed report is gone; upload the files again" if out.missing else
               f"no report failed for a transient reason ({', '.join(TRANSIENT)}) and the analysis did not fail")
        raise ApiError("NOTHING_TO_RETRY", f"Run {run_id}: nothing to retry: {why}.",
                       {"run_id": run_id, "missing_reports": out.missing})
    refresh_status(session, run)
    session.commit()
    for report_id in out.reports:
        queue.enqueue_ingest(settings, report_id)
    if out.analyze_run is not None:
        queue.enqueue_analyze(settings, out.analyze_run)
    logger.info("retry: reports %s, analysis %s", out.reports, out.analyze_run, extra={"run_id": run_id})
    return out


def reingest_all(session: Session, settings: Settings, run_ids: list[int] | None = None) -> Requeued:
    """Queue every finished report of live runs (or of ``run_ids``) for ingest again from its stored export,
    so a newer Goodput rebuilds its trace and the run is analyzed again. Commits, then enqueues."""
    from app import queue

    query = (sa.select(Report).join(Run, Run.id == Report.run_id)
             .where(live(), Report.status.in_((ReportStatus.READY, ReportStatus.FAILED))).order_by(Report.id))
    if run_ids:
        query = query.where(Run.id.in_(run_ids))
    out = Requeued()
    rows = list(session.scalars(query))
    _requeue(session, settings, rows, out)
    for run_id in {r.run_id for r in rows if r.id in out.reports}:
        run = session.get(Run, run_id)
        if run is not None:
            reopen_run(run)
            refresh_status(session, run)
    session.commit()
    for report_id in out.reports:
        queue.enqueue_ingest(settings, report_id)
    return out


def sweep_leftovers(session: Session, settings: Settings, *, uploads: bool = True) -> int:
    """Remove what killed work left behind: temporary files in the folders of reports no live attempt holds,
    staged uploads whose receiver died, and (``uploads``) stored uploads no report needs. Returns how many."""
    storage = storage_for(settings)
    now = utcnow()
    # Files changed within a lease of now are kept: a dead attempt stopped writing at least a lease ago (its
    # lease expired), while an attempt that claims a report after the query below writes newer files.
    older_than = time.time() - max(1, settings.lease_seconds)
    # A report that had a killed attempt is queued again, failed, or ready after a later attempt, and was
    # touched then; reconcile runs every minute, so a day back is plenty and keeps the scan small. A report
    # held by a live lease (a later attempt ingesting, or its analysis) is never a suspect, whatever its
    # attempt count: its temporary files are that attempt's.
    suspects = session.execute(sa.select(Report.id, Report.sha256).where(
        Report.updated_at >= now - timedelta(days=1),
        sa.or_(Report.status.in_((ReportStatus.QUEUED, ReportStatus.FAILED)), sa.and_(Report.status == ReportStatus.READY, Report.attempts > 1),
               sa.and_(Report.status == ReportStatus.INGESTING, Report.lease_expires_at < now)))).all()
    # The kept copy is written beside the uploads, named by the upload's bytes: a live ingest of another
    # report of the same bytes may be writing one, so those bytes' temporaries are left to its own clean-up.
    live = set(session.scalars(sa.select(Report.sha256).where(
        Report.status == ReportStatus.INGESTING, Report.lease_expires_at >= now)))
    session.rollback()
    removed = sum(storage.remove_attempt_leftovers(rid, older_than, None if sha in live else sha)
                  for rid, sha in suspects)
    # The lock says whether a receiver is alive; the idle time only covers the instant before it is taken.
    removed += storage.remove_abandoned_staging(min(STAGING_IDLE_S, float(settings.lease_seconds)))
    if uploads:
        removed += _remove_unneeded_uploads(session, settings)
    return removed


_last_upload_sweep: dict[str, float] = {}


def upload_sweep_due(settings: Settings, every_s: float = 3600.0) -> bool:
    """True at most once per ``every_s`` in this process: listing every stored upload is not for each minute
    (uploads are released as their ingest ends; this sweep only catches what a crash left)."""
    key = str(settings.data_dir)
    now = time.monotonic()
    if now - _last_upload_sweep.get(key, -every_s) < every_s:
        return False
    _last_upload_sweep[key] = now
    return True


def _remove_unneeded_uploads(session: Session, settings: Settings) -> int:
    storage = storage_for(settings)
    needed = set(session.scalars(sa.select(Report.upload_path).where(
        sa.or_(Report.status.in_((ReportStatus.QUEUED, ReportStatus.INGESTING, ReportStatus.ANALYZING, ReportStatus.READY)),
               sa.and_(Report.status == ReportStatus.FAILED, Report.error_code.in_(TRANSIENT))))))
    known = set(session.scalars(sa.select(Report.upload_path)))
    session.rollback()
    cutoff = time.time() - ORPHAN_AGE_S
    removed = 0
    for rel, mtime in storage.list_uploads():
        if rel in needed:
            continue
        # A file a row points to but no report needs goes at once; an unknown one only once it is old
        # (its upload may not have committed its row yet).
        if mtime < (time.time() - RECENT_S if rel in known else cutoff) and storage.remove(rel):
            removed += 1
    return removed


def expire_uploads(session: Session, settings: Settings, now: datetime | None = None) -> int:
    """Delete stored exports of reports older than ``keep_uploads_days`` (0 keeps them); their traces and
    findings stay, only re-ingest and retry need the export. Returns how many files went."""
    days = settings.keep_uploads_days
    if days <= 0:
        return 0
    cutoff = (now or utcnow()) - timedelta(days=days)
    young = sa.select(Report.upload_path).where(Report.created_at >= cutoff)
    paths = set(session.scalars(sa.select(Report.upload_path).where(
        Report.created_at < cutoff, Report.status.in_((ReportStatus.READY, ReportStatus.FAILED)), Report.upload_path.not_in(young))))
    session.rollback()
    storage = storage_for(settings)
    removed = 0
    for rel in sorted(paths):
        if storage.remove(rel):
            removed += 1
    if removed:
        logger.info("removed %d stored exports older than %d days (GOODPUT_KEEP_UPLOADS_DAYS)", removed, days)
    return removed


def is_kept_copy(rel: str) -> bool:
    return rel.endswith(KEPT_SUFFIX)
