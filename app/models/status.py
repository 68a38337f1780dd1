"""The statuses of runs, their analysis and reports, as str enums stored as their plain text values."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlalchemy.types import TypeDecorator


class RunStatus(StrEnum):
    """A run's overall status, derived from its reports and analysis (``derive_status``)."""

    QUEUED = "queued"
    PROCESSING = "processing"
    READY = "ready"
    FAILED = "failed"
    DELETED = "deleted"


class AnalysisStatus(StrEnum):
    """The run-level analysis job: queued once every report is terminal, then claimed, then done."""

    QUEUED = "queued"
    ANALYZING = "analyzing"
    READY = "ready"
    FAILED = "failed"


class ReportStatus(StrEnum):
    """One report's ingest job."""

    QUEUED = "queued"
    INGESTING = "ingesting"
    ANALYZING = "analyzing"
    READY = "ready"
    FAILED = "failed"


ACTIVE_REPORT = (ReportStatus.QUEUED, ReportStatus.INGESTING, ReportStatus.ANALYZING)
def derive_status(run: Any, report_statuses: Sequence[str]) -> RunStatus:
    """queued (nothing started), processing, ready (analysis done), failed, or deleted. ``run``: a Run or
    a row with its ``deleted_at`` and ``analysis_status``."""
    if run.deleted_at is not None:
        return RunStatus.DELETED
    if run.analysis_status == AnalysisStatus.FAILED or (
            report_statuses and all(s == ReportStatus.FAILED for s in report_statuses)):
        return RunStatus.FAILED
    if not report_statuses or all(s == ReportStatus.QUEUED for s in report_statuses):
        return RunStatus.QUEUED if run.analysis_status is None else RunStatus.PROCESSING
    if any(s in ACTIVE_REPORT for s in report_statuses) or run.analysis_status != AnalysisStatus.READY:
        return RunStatus.PROCESSING
    return RunStatus.READY


class StatusText(TypeDecorator):
    """A status column: VARCHAR(20) holding the enum's value (the schema and the API are unchanged); reads
    come back as enum members, and a write of a value outside the enum fails before it reaches the row."""

    impl = sa.String(20)
    cache_ok = True

    def __init__(self, enum: type[StrEnum]) -> None:
        super().__init__()
        self.enum = enum

    def process_bind_param(self, value: str | None, dialect: sa.Dialect) -> str | None:
        # Plain strings are accepted (SQL written with literals, status == "ready"), checked against the enum.
        return None if value is None else self.enum(value).value

    def process_result_value(self, value: str | None, dialect: sa.Dialect) -> StrEnum | None:
        return None if value is None else self.enum(value)
