"""Comparing two runs of the service: gathers each run's facts from the metadata DB and the reports'
DuckDB files, and leaves the comparison itself to ``analysis.compare`` (which `goodput diff` uses too)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from analysis.api import DEFAULT_NOISE_PCT, RunFacts, compare_facts, kernel_totals, merge_kernels
from app.models import Finding, Report, ReportStatus, RunSummary
from app.services.findings import finding_to_dict
from app.services.runs import get_run

__all__ = ["DEFAULT_NOISE_PCT", "compare_runs", "kernel_totals", "run_facts"]


def _kernels(session: Session, data_dir: Path, run_id: int) -> dict[str, dict[str, int]]:
    """Kernel totals of the run's ready reports, from their DuckDB files (read-only); the summary's
    top kernels when a file is gone."""
    per_report = []
    rows = session.execute(sa.select(Report.trace_path, Report.info).where(
        Report.run_id == run_id, Report.status == ReportStatus.READY).order_by(Report.id)).all()
    for trace_path, info in rows:
        path = Path(data_dir) / trace_path if trace_path else None
        per_report.append(kernel_totals(path) if path is not None and path.is_file()
                          else (info or {}).get("top_kernels", []))
    return merge_kernels(per_report)


def run_facts(session: Session, data_dir: Path, run_id: int) -> RunFacts:
    """One run as ``analysis.compare`` sees it: the analysis' report dicts (stored with the per-run
    summary), kernel totals and findings (API dicts, ranking order)."""
    run = get_run(session, run_id)
    row = session.scalar(sa.select(RunSummary).where(RunSummary.run_id == run.id, RunSummary.report_id.is_(None)))
    data = row.data if row is not None and isinstance(row.data, dict) else {}
    reports = [r for r in data.get("reports") or [] if isinstance(r, dict)]
    findings = session.scalars(sa.select(Finding).where(Finding.run_id == run.id).order_by(Finding.id))
    return RunFacts(id=run.id, reports=reports, kernels=_kernels(session, data_dir, run.id),
                    findings=[finding_to_dict(f) for f in findings])


def compare_runs(session: Session, data_dir: Path, base_id: int, head_id: int, *,
                 noise_pct: float = DEFAULT_NOISE_PCT) -> dict[str, Any]:
    """The difference head − base (see ``analysis.compare.compare``)."""
    base, head = run_facts(session, data_dir, base_id), run_facts(session, data_dir, head_id)
    return compare_facts(base, head, noise_pct=noise_pct)
