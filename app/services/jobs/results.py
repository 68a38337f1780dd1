"""Result persistence of an analysis: a held run's findings and per-report and per-run summaries, replaced in
one transaction that also releases the analysis lease."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from analysis.api import AnalysisResult, FindingResult, breakdown_value
from app.models import AnalysisStatus, Finding, Run, RunSummary, utcnow
from app.services.jobs.jobstate import AnalysisInputs
from app.services.jobs.jsoncols import jsonable
from app.services.jobs.leases import RUN_ANALYSIS, refresh_run_status
from app.services.jobs.ncu_summary import compact_report
from app.services.reads.run_repo import goodput_pct


def finish_run_analysis(session: Session, run_id: int, owner: str, inputs: AnalysisInputs,
                        result: AnalysisResult) -> bool:
    """Replace the run's findings and summaries with ``result`` in one transaction; False if the lease was lost."""
    now = utcnow()
    n = RUN_ANALYSIS.finish(session, Run.id == run_id, owner, {
        Run.analysis_status: AnalysisStatus.READY, Run.analyzed_at: now, Run.error: None,
        Run.rule_statuses: jsonable([r.to_json() for r in result.rules]), Run.updated_at: now})
    if not n:
        session.rollback()
        return False
    session.execute(sa.delete(Finding).where(Finding.run_id == run_id))
    session.execute(sa.delete(RunSummary).where(RunSummary.run_id == run_id))
    by_label: dict[str | None, int] = dict(zip(inputs.labels, inputs.report_ids, strict=True))
    # A multi-rank run's findings are one per rule and scope across the ranks (``per_rank``, no report):
    # stored as they are, each report's own findings stay in its summary (``reports[].findings``).
    findings = result.findings
    impact_by_report: dict[int | None, list[int]] = {}
    for position, f in enumerate(findings):
        report_id = by_label.get(f.report)
        impact_by_report.setdefault(report_id, []).append(int(f.impact_ns or 0))
        session.add(_finding_row(run_id, report_id, position, f))
    reports = [compact_report(r.to_json()) for r in result.reports]  # ncu: one memory story per kernel config
    for report_id, data in zip(inputs.report_ids, reports, strict=False):
        own = _own_impacts(data) if isinstance(data.get("findings"), list) else impact_by_report.get(report_id, [])
        session.add(_summary_row(run_id, report_id, data, len(own), max(own, default=None)))
    all_impacts = [int(f.impact_ns or 0) for f in findings]
    row = _run_summary_row(run_id, reports, len(findings), max(all_impacts, default=None))
    if result.missing:  # analyzed without these (failed) reports
        row.data = {**row.data, "missing": jsonable(result.missing), "missing_ranks": jsonable(result.missing_ranks or [])}
    if result.verdict is not None:  # what bounds the run and what to do first (analysis.diagnosis.verdict)
        row.data = {**row.data, "verdict": jsonable(result.verdict.to_json())}
    if result.run_warnings:  # missing ranks, other jobs, reports apart on the clock (analysis.run.mixed)
        row.data = {**row.data, "run_warnings": jsonable(list(result.run_warnings))}
    for key, value in (("network", result.network), ("collectives", result.collectives),
                       ("network_path", None if result.network_path is None else result.network_path.to_json())):
        if value is not None:  # run-wide facts: NCCL's network matrix, collectives' wait vs transfer, the NCCL log's path
            row.data = {**row.data, key: jsonable(value)}
    session.add(row)
    refresh_run_status(session, run_id)
    session.commit()
    return True


def _own_impacts(data: dict[str, Any]) -> list[int]:
    """The impacts of a report's own findings (a multi-rank run's ``reports[].findings``)."""
    return [int(f.get("impact_ns") or 0) for f in data["findings"] if isinstance(f, dict)]


# The finding's JSON keys that have their own column; ``extra`` keeps the rest (its phase, the rule's numbers).
FINDING_KEYS = ("rule_id", "severity", "title", "message", "impact_ns", "impact_pct", "advice", "evidence",
                "evidence_total", "report", "rank")


def _finding_row(run_id: int, report_id: int | None, position: int, f: FindingResult) -> Finding:
    extra = {k: v for k, v in f.to_json().items() if k not in FINDING_KEYS}
    return Finding(
        run_id=run_id, report_id=report_id, position=position, rule_id=str(f.rule_id),
        severity=str(f.severity or "info"), title=str(f.title or ""),
        message=str(f.message or ""), impact_ns=int(f.impact_ns or 0),
        impact_pct=f.impact_pct, advice=str(f.advice or ""),
        evidence=jsonable([e.to_json() for e in f.evidence]), evidence_total=int(f.evidence_total or 0),
        report=f.report, rank=f.rank, extra=jsonable(extra),
    )


# Summary columns: copies of the analysis.diagnosis.breakdown totals (report dict's "breakdown", or top level).
SUMMARY_NS = ("span_ns", "compute_ns", "comm_exposed_ns", "memory_only_ns", "idle_ns")


def _summary_row(run_id: int, report_id: int | None, data: dict[str, Any], count: int,
                 top: int | None) -> RunSummary:
    row = RunSummary(run_id=run_id, report_id=report_id, data=jsonable(data), finding_count=count,
                     top_impact_ns=top)
    for col in SUMMARY_NS:
        value = breakdown_value(data, col)
        setattr(row, col, None if value is None else int(value))
    pct = breakdown_value(data, "goodput_pct")
    row.goodput_pct = None if pct is None else float(pct)
    return row


def _run_summary_row(run_id: int, reports: list[dict[str, Any]], count: int, top: int | None) -> RunSummary:
    """The per-run row: the ranks' times summed (span too: GPU-time across ranks), goodput from the sums."""
    # Each report's findings are in its own row; the run's row keeps the rest of each report's summary.
    slim = [{k: v for k, v in r.items() if k != "findings"} for r in reports]
    row = RunSummary(run_id=run_id, report_id=None, data=jsonable({"reports": slim}), finding_count=count,
                     top_impact_ns=top)
    for col in SUMMARY_NS:
        values = [int(v) for v in (breakdown_value(r, col) for r in reports) if v is not None]
        setattr(row, col, sum(values) if values else None)
    row.goodput_pct = goodput_pct(row.compute_ns, row.span_ns)
    return row

