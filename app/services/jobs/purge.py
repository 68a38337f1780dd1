"""Purging deleted runs: their rows, then the files no report refers to any more (and orphans of crashes)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.models import Finding, Report, Run, RunSummary
from app.services.storage import storage_for
from app.settings import Settings


def delete_run_rows(session: Session, run_id: int) -> list[tuple[int, str, str]] | None:
    """Delete a run marked deleted (``deleted_at`` set) with its reports, findings and summaries.

    Returns the deleted reports' (id, sha256, upload_path) so their files can go; None when the run is
    live (never purged) or already gone.
    """
    deleted = session.execute(sa.select(Run.deleted_at).where(Run.id == run_id)).scalar_one_or_none()
    if deleted is None:
        session.rollback()
        return None
    gone = [(r.id, r.sha256, r.upload_path) for r in session.execute(
        sa.select(Report.id, Report.sha256, Report.upload_path).where(Report.run_id == run_id))]
    report_ids = [g[0] for g in gone]
    session.execute(sa.delete(Finding).where(sa.or_(Finding.run_id == run_id, Finding.report_id.in_(report_ids))))
    session.execute(sa.delete(RunSummary).where(RunSummary.run_id == run_id))
    session.execute(sa.delete(Report).where(Report.run_id == run_id))
    session.execute(sa.delete(Run).where(Run.id == run_id))
    session.commit()
    return gone


def remove_report_files(session: Session, settings: Settings, gone: list[tuple[int, str, str]]) -> int:
    """Delete the DuckDB files of deleted reports, and their uploads unless another report shares the bytes."""
    storage = storage_for(settings)
    removed = 0
    for report_id, sha, upload_path in gone:
        if storage.remove_report(report_id):
            removed += 1
        still_used = session.execute(sa.select(sa.func.count()).select_from(Report)
                                     .where(Report.sha256 == sha)).scalar_one()
        if not still_used and storage.remove(upload_path):
            removed += 1
    session.rollback()
    return removed


def collect_garbage(session: Session, settings: Settings, *, min_age_s: float = 3600.0) -> int:
    """Remove report directories and uploads no report row refers to; returns how many were removed.

    Files younger than ``min_age_s`` are kept: an upload is written before its row commits.
    """
    known_ids = set(session.execute(sa.select(Report.id)).scalars())
    known_sha = set(session.execute(sa.select(Report.sha256).distinct()).scalars())
    session.rollback()
    return storage_for(settings).sweep_orphans(known_ids, known_sha, min_age_s=min_age_s)
