"""Reports: one uploaded export file of a run, with its ingest job state (status, attempts, lease)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.models.base import Base, JSONType, UTCDateTime, utcnow
from app.models.status import ReportStatus, StatusText

if TYPE_CHECKING:  # the two modules name each other in their relationships
    from app.models.job import Run

REPORT_KINDS = ("nsys", "ncu")
REPORT_STATUSES = tuple(s.value for s in ReportStatus)


class Report(Base):
    __tablename__ = "reports"
    __table_args__ = (
        # The same bytes in the same run are stored once.
        sa.UniqueConstraint("run_id", "sha256"),
        sa.Index("ix_reports_status_lease_expires_at", "status", "lease_expires_at"),
        # Ids name report directories and URLs: never reused after a purge.
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(sa.ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(sa.String(500))  # the client's file name: display only
    kind: Mapped[str] = mapped_column(sa.String(10))
    rank: Mapped[int | None] = mapped_column()
    host: Mapped[str | None] = mapped_column(sa.String(200))
    sha256: Mapped[str] = mapped_column(sa.String(64), index=True)
    size_bytes: Mapped[int] = mapped_column(sa.BigInteger)
    status: Mapped[ReportStatus] = mapped_column(StatusText(ReportStatus), default=ReportStatus.QUEUED)
    error_code: Mapped[str | None] = mapped_column(sa.String(50))
    error_message: Mapped[str | None] = mapped_column(sa.Text)
    attempts: Mapped[int] = mapped_column(default=0)
    lease_owner: Mapped[str | None] = mapped_column(sa.String(200))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    progress: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)  # {stage, done, total}
    counts: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)    # rows per normalized table
    tool_version: Mapped[str | None] = mapped_column(sa.String(100))
    schema_version: Mapped[int | None] = mapped_column()
    info: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)      # analysis.diagnosis.summary.report_info
    upload_path: Mapped[str] = mapped_column(sa.String(1000))  # relative to data_dir
    trace_path: Mapped[str | None] = mapped_column(sa.String(1000))  # relative to data_dir
    # The report's own analysis: its folder (analysis.json and the cross-rank facts, relative to
    # data_dir), the window it was made for, the attempts of its task, when it was published.
    analysis_path: Mapped[str | None] = mapped_column(sa.String(1000))
    analysis_window: Mapped[str | None] = mapped_column(sa.String(200))
    analysis_attempts: Mapped[int] = mapped_column(default=0, server_default="0")
    analyzed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)

    run: Mapped[Run] = relationship(back_populates="reports")
