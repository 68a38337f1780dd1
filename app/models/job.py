"""Jobs (a recurring workload such as ``llama-70b-pretrain``) and runs (one profiled execution of it)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.models.base import Base, JSONType, UTCDateTime, utcnow
from app.models.status import AnalysisStatus, RunStatus, StatusText

if TYPE_CHECKING:  # the two modules name each other in their relationships
    from app.models.report import Report

RUN_SOURCES = ("web", "api", "cli")
RUN_STATUSES = tuple(s.value for s in RunStatus)
ANALYSIS_STATUSES = tuple(s.value for s in AnalysisStatus)


class Job(Base):
    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(200), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    runs: Mapped[list[Run]] = relationship(back_populates="job", passive_deletes=True)


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (
        sa.Index("ix_runs_job_id_created_at", "job_id", "created_at"),
        sa.Index("ix_runs_created_at", "created_at"),
        sa.Index("ix_runs_status", "status"),
        # Ids are never reused after a purge (a scheduler's saved URL must not point at another run).
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(sa.ForeignKey("jobs.id", ondelete="CASCADE"))
    tags: Mapped[dict[str, str]] = mapped_column(JSONType, default=dict)
    git_sha: Mapped[str | None] = mapped_column(sa.String(64))
    cluster: Mapped[str | None] = mapped_column(sa.String(200))
    submitter: Mapped[str | None] = mapped_column(sa.String(200), index=True)
    # Who may delete the run besides admins: the owning person, else (a service token's upload) the token.
    submitter_user_id: Mapped[int | None] = mapped_column(sa.ForeignKey("users.id", ondelete="SET NULL"))
    submitter_token_id: Mapped[int | None] = mapped_column(sa.ForeignKey("api_tokens.id", ondelete="SET NULL"))
    source: Mapped[str] = mapped_column(sa.String(10), default="api")
    status: Mapped[RunStatus] = mapped_column(StatusText(RunStatus), default=RunStatus.QUEUED)
    analysis_status: Mapped[AnalysisStatus | None] = mapped_column(StatusText(AnalysisStatus))
    analyzed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Analysis attempts and lease, so a crashed analyze is re-queued like an ingest.
    analysis_attempts: Mapped[int] = mapped_column(default=0)
    analysis_lease_owner: Mapped[str | None] = mapped_column(sa.String(200))
    analysis_lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # The run's rule results (id, status, reason) from the last analysis.
    rule_statuses: Mapped[list[dict[str, Any]]] = mapped_column(JSONType, default=list)
    # The analysis window asked for (analysis.loops.window spec); NULL: the default, the steady state.
    analysis_window: Mapped[str | None] = mapped_column(sa.String(200))
    error: Mapped[str | None] = mapped_column(sa.Text)
    # SHA-256 of the submitter and the upload's Idempotency-Key header: a retried upload finds its run.
    idempotency_key: Mapped[str | None] = mapped_column(sa.String(64), index=True, unique=True)
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)

    job: Mapped[Job] = relationship(back_populates="runs")
    reports: Mapped[list[Report]] = relationship(
        back_populates="run", order_by="Report.id", passive_deletes=True
    )
