"""Findings of a run's analysis and the summaries (breakdown, headline numbers) history and trends read."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base, JSONType, UTCDateTime, utcnow


class Finding(Base):
    """One ``analysis.diagnosis.findings.Finding.to_dict()``; ``position`` is its place in the impact ranking."""

    __tablename__ = "findings"
    __table_args__ = (sa.Index("ix_findings_run_id_impact_ns", "run_id", "impact_ns"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(sa.ForeignKey("runs.id", ondelete="CASCADE"))
    # None for run-level findings (e.g. communication across ranks).
    report_id: Mapped[int | None] = mapped_column(sa.ForeignKey("reports.id", ondelete="CASCADE"), index=True)
    position: Mapped[int] = mapped_column(default=0)
    rule_id: Mapped[str] = mapped_column(sa.String(20))
    severity: Mapped[str] = mapped_column(sa.String(10))
    title: Mapped[str] = mapped_column(sa.Text)
    message: Mapped[str] = mapped_column(sa.Text)
    impact_ns: Mapped[int] = mapped_column(sa.BigInteger)
    impact_pct: Mapped[float | None] = mapped_column(sa.Float)
    advice: Mapped[str] = mapped_column(sa.Text, default="")
    evidence: Mapped[list[dict[str, Any]]] = mapped_column(JSONType, default=list)
    evidence_total: Mapped[int] = mapped_column(default=0)
    report: Mapped[str | None] = mapped_column(sa.String(500))  # the report label the analysis used
    rank: Mapped[int | None] = mapped_column()
    extra: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)  # rule-specific numbers
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class RunSummary(Base):
    """Per-report (``report_id`` set) or per-run (``report_id`` NULL) breakdown and headline numbers.

    ``data`` holds the analysis' report dict (report_info + breakdown) and, for compare, ``kernels``:
    a list of ``{"name", "total_ns", "count"}``; the per-run row also holds ``reports`` (labels).
    """

    __tablename__ = "run_summaries"
    __table_args__ = (sa.UniqueConstraint("run_id", "report_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(sa.ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    report_id: Mapped[int | None] = mapped_column(sa.ForeignKey("reports.id", ondelete="CASCADE"))
    data: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    # Copies of the analysis.diagnosis.breakdown totals (all ns), for history and trend queries.
    span_ns: Mapped[int | None] = mapped_column(sa.BigInteger)
    compute_ns: Mapped[int | None] = mapped_column(sa.BigInteger)
    comm_exposed_ns: Mapped[int | None] = mapped_column(sa.BigInteger)
    memory_only_ns: Mapped[int | None] = mapped_column(sa.BigInteger)
    idle_ns: Mapped[int | None] = mapped_column(sa.BigInteger)
    goodput_pct: Mapped[float | None] = mapped_column(sa.Float)
    finding_count: Mapped[int] = mapped_column(default=0)
    top_impact_ns: Mapped[int | None] = mapped_column(sa.BigInteger)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
