"""A re-analysis window checked against the run's ingested reports before it is recorded and queued: an NVTX
name, a loop, iterations or a time range a report does not have is a 400 naming the valid range now, not a
failed analysis later (``analysis.loops.window.check_fits``, the check the analysis itself makes)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from analysis.api import ToolKind, TraceError, window_check
from app.errors import ApiError
from app.models import Report, ReportStatus
from app.services.storage import data_path
from app.settings import Settings


def check_window_fits(session: Session, settings: Settings, run_id: int, window: str | None) -> None:
    """Raise ApiError VALIDATION_ERROR (fields.window) when ``window`` cannot apply to the run's ingested nsys
    reports: ready ones, and those whose analysis failed (for another window, perhaps: their trace is there).
    Reports still ingesting are checked by their analysis."""
    ingested = sa.or_(Report.status == ReportStatus.READY, sa.and_(Report.status == ReportStatus.FAILED,
                                                        Report.error_code == "analysis_failed"))
    rows = session.execute(sa.select(Report.trace_path, Report.name).where(
        Report.run_id == run_id, Report.kind == ToolKind.NSYS.value, ingested, Report.trace_path.is_not(None))).all()
    try:
        window_check(window, [(data_path(settings, path), name) for path, name in rows
                              if path is not None and data_path(settings, path).is_file()])
    except TraceError as exc:
        raise ApiError("VALIDATION_ERROR", f"Invalid analysis window: {' '.join(exc.message.split())}",
                       {"fields": {"window": exc.message}}) from None
