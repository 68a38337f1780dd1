"""Runs: their derived status, listing with filters, reading, deleting."""

from __future__ import annotations

import logging
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from analysis.api import window_parse
from analysis.errors import TraceError
from app.errors import ApiError
from app.models import AnalysisStatus, Finding, Report, Run, RunStatus, utcnow
from app.models.status import derive_status
from app.services.jobs.leases import RUN_ANALYSIS
from app.services.reads import run_repo
from app.services.reads.reports import iso
from app.services.reads.run_query import RunFilter
from app.services.reads.run_repo import get_run
from app.services.reads.summaries import run_results
from app.settings import Settings

logger = logging.getLogger(__name__)

# The API's sort keys (app.services.reads.run_repo orders by them); a leading '-' sorts descending.
SORTS = ("created_at", "-created_at", "id", "-id", "status", "-status")


def refresh_status(session: Session, run: Run) -> RunStatus:
    """Recompute ``run.status`` from its reports and analysis (no commit: the caller's transaction)."""
    session.flush()
    statuses = list(session.scalars(sa.select(Report.status).where(Report.run_id == run.id)))
    run.status = derive_status(run, statuses)
    return run.status


def list_runs(session: Session, filters: RunFilter | None = None, *, sort: str = "-created_at", page: int = 1,
              page_size: int = 50) -> dict[str, Any]:
    """One page of runs matching every condition of ``filters``, newest first by default (the API's shape)."""
    found = run_repo.list_runs(session, filters or RunFilter(), sort=sort.lstrip("-"), desc=sort.startswith("-"),
                               tie_desc=True, page=page, page_size=page_size)
    return {"items": [row.to_api() for row in found.items], "page": found.page, "page_size": found.page_size,
            "total": found.total}


def run_detail(session: Session, run_id: int) -> dict[str, Any]:
    """A run with its reports (status, progress, errors) and headline numbers (the API's ``RunDetail``)."""
    return run_repo.run_detail(session, run_id).to_api()


def run_summary(session: Session, run_id: int) -> dict[str, Any]:
    """The run's breakdown and headline numbers, per report and in total, with rule statuses: the API's
    ``Summary``, serialized from the read store's entities (``app.services.reads.summaries``)."""
    run = get_run(session, run_id)
    results = run_results(session, run.id)
    stored = results.run
    severities = dict(session.execute(
        sa.select(Finding.severity, sa.func.count()).where(Finding.run_id == run.id).group_by(Finding.severity)
    ).all())
    return {
        "run_id": run.id,
        "status": run.status,
        "analysis_status": run.analysis_status,
        "analyzed_at": iso(run.analyzed_at),
        "totals": stored.headline.to_api() if results.analyzed else None,
        "reports": [r.to_api() for r in results.reports.values()],
        "severity_counts": {s: int(severities.get(s, 0)) for s in ("critical", "warning", "info")},
        "rules": run.rule_statuses or [],
        # Issue #16: reports the analysis went without (failed ingest or analysis), by rank.
        "missing_reports": [dict(m) for m in stored.missing],
        "missing_ranks": list(stored.missing_ranks),
        "verdict": None if stored.verdict is None else stored.verdict.to_json(),
        "network": None if stored.network is None else dict(stored.network),
        "collectives": None if stored.collectives is None else dict(stored.collectives),
        "network_path": None if stored.network_path is None else stored.network_path.to_json(),
        "run_warnings": [dict(w) for w in stored.run_warnings],
    }


def may_delete(run: Run, *, user_id: int | None, token_id: int | None, is_admin: bool) -> bool:
    """An admin, the person who submitted the run, or (a service token's upload) that token."""
    if is_admin:
        return True
    if run.submitter_user_id is not None:
        return user_id == run.submitter_user_id
    return token_id is not None and token_id == run.submitter_token_id


def delete_run(session: Session, settings: Settings, run_id: int, *, user_id: int | None = None,
               token_id: int | None = None, is_admin: bool = True) -> None:
    """Mark the run deleted (readers stop seeing it), commit, then queue the purge of its files.
    FORBIDDEN unless the caller may delete it (``may_delete``)."""
    from app import queue

    run = get_run(session, run_id, for_update=True)
    if not may_delete(run, user_id=user_id, token_id=token_id, is_admin=is_admin):
        session.rollback()
        raise ApiError("FORBIDDEN", f"Run {run_id} was submitted by someone else; only they or an admin "
                       "can delete it.", {"run_id": run_id})
    run.deleted_at = utcnow()
    run.status = RunStatus.DELETED
    session.commit()
    queue.enqueue_purge(settings, run.id)


MAX_WINDOW_CHARS = 200  # the runs.analysis_window column


def parse_window(window: str | None) -> str | None:
    """A window option checked and made canonical; raises ApiError VALIDATION_ERROR when bad."""
    if window is None or not str(window).strip():
        return None
    try:
        text = window_parse(str(window)).text
    except TraceError as exc:
        raise ApiError("VALIDATION_ERROR", "Invalid analysis window.", {"fields": {"window": exc.message}}) from None
    if len(text) > MAX_WINDOW_CHARS:  # the runs.analysis_window column
        raise ApiError("VALIDATION_ERROR", "Invalid analysis window.",
                       {"fields": {"window": f"longer than {MAX_WINDOW_CHARS} characters"}})
    return text



def reanalyze(session: Session, settings: Settings, run_id: int, window: str | None) -> Run:
    """Record a new analysis window on the run and analyze it again (commit, then enqueue).

    A run still ingesting keeps the window for the analysis that follows its ingest; a run being
    analyzed right now is a CONFLICT (its result would overwrite the new one's).
    """
    from app import queue

    text = parse_window(window) or "steady"
    run = get_run(session, run_id, for_update=True)
    if run.analysis_status == AnalysisStatus.ANALYZING:
        raise ApiError("CONFLICT", f"Run {run_id} is being analyzed; ask again when it is done.", {"run_id": run_id})
    run.analysis_window = text
    enqueue = run.analysis_status in (AnalysisStatus.READY, AnalysisStatus.FAILED)
    if enqueue:
        run.analysis_status, run.analysis_attempts, run.error = AnalysisStatus.QUEUED, 0, None
        RUN_ANALYSIS.clear(run)
    refresh_status(session, run)
    session.commit()
    if enqueue:
        queue.enqueue_analyze(settings, run.id)
    logger.info("re-analysis asked with window %s", text, extra={"run_id": run.id})
    return run


# Threshold overrides of a run live in this tag (``GPU001.min_gap_us=200 GPU003.min_ratio=0.5``, canonical, set
# by ``app.services.runs.uploads``): kept with the run without a schema change, shown with its tags, and read by
# every analysis of the run.
THRESHOLDS_TAG = "goodput.thresholds"


def run_thresholds(tags: dict[str, str] | None) -> dict[str, float]:
    """The threshold overrides recorded on a run (its ``THRESHOLDS_TAG``), for the analysis. One recorded
    before its threshold declared a range, and now out of it, is left out (logged): the run is analysed with
    that threshold's default rather than failing on every analysis."""
    from analysis.api import check_thresholds

    text = (tags or {}).get(THRESHOLDS_TAG) or ""
    out: dict[str, float] = {}
    for key, _, value in (item.partition("=") for item in text.split()):
        if not key:
            continue
        try:
            out.update(check_thresholds({key: value}))
        except KeyError as exc:
            logger.warning("recorded threshold override ignored: %s", exc.args[0])
    return out
