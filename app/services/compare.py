"""Comparing two runs of the service: gathers each run's facts from the metadata DB and the reports'
DuckDB files, and leaves the comparison itself to ``analysis.views.compare`` (which `goodput diff` uses too)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from analysis.api import DEFAULT_NOISE_PCT, RunFacts, compare_facts, run_facts
from app.models import Finding, Report, ReportStatus, RunSummary
from app.services.findings import finding_to_dict
from app.services.runs import get_run

__all__ = ["DEFAULT_NOISE_PCT", "compare_runs", "run_facts_of"]


def run_facts_of(session: Session, data_dir: Path, run_id: int) -> RunFacts:
    """One run as ``analysis.views.compare`` sees it: each ready report's analysis dict (its stored summary)
    with its DuckDB file, and the findings (API dicts, ranking order)."""
    run = get_run(session, run_id)
    rows = session.execute(
        sa.select(RunSummary.data, Report.trace_path).join(Report, Report.id == RunSummary.report_id)
        .where(RunSummary.run_id == run.id, Report.status == ReportStatus.READY).order_by(Report.id)).all()
    reports = [data for data, _ in rows if isinstance(data, dict)]
    paths = [Path(data_dir) / path if path else None for data, path in rows if isinstance(data, dict)]
    findings = session.scalars(sa.select(Finding).where(Finding.run_id == run.id).order_by(Finding.id))
    return run_facts(run.id, reports, [finding_to_dict(f) for f in findings], paths)


def compare_runs(session: Session, data_dir: Path, base_id: int, head_id: int, *,
                 noise_pct: float = DEFAULT_NOISE_PCT) -> dict[str, Any]:
    """The difference head − base (see ``analysis.views.compare.compare``)."""
    base, head = run_facts_of(session, data_dir, base_id), run_facts_of(session, data_dir, head_id)
    return compare_facts(base, head, noise_pct=noise_pct)
