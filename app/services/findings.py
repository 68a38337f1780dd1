"""Findings of a run: listing (filtered, ranked by impact) and replacing them with a new analysis result."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.models import Finding, Report, Run, RunSummary
from app.services.paging import paginate
from app.services.reports import report_labels
from app.services.runs import get_run

# Keys of Finding.to_dict() that have their own column; anything else a rule adds goes to ``extra``.
_COLUMNS = ("rule_id", "severity", "title", "message", "impact_ns", "impact_pct", "advice", "evidence",
            "evidence_total", "report", "rank")
BREAKDOWN_KEYS = ("span_ns", "compute_ns", "comm_exposed_ns", "memory_only_ns", "idle_ns", "goodput_pct")


def finding_to_dict(f: Finding) -> dict[str, Any]:
    return {
        "id": f.id, "run_id": f.run_id, "report_id": f.report_id, "position": f.position,
        "rule_id": f.rule_id, "severity": f.severity, "title": f.title, "message": f.message,
        "impact_ns": f.impact_ns, "impact_pct": f.impact_pct, "advice": f.advice,
        "evidence": f.evidence or [], "evidence_total": f.evidence_total, "report": f.report,
        "rank": f.rank, "extra": f.extra or {},
    }


def list_findings(session: Session, run_id: int, *, severity: list[str] | None = None,
                  rule: list[str] | None = None, rank: int | None = None, page: int = 1,
                  page_size: int = 50) -> dict[str, Any]:
    """One page of the run's findings, largest impact first."""
    run = get_run(session, run_id)
    query = sa.select(Finding).where(Finding.run_id == run.id)
    if severity:
        query = query.where(Finding.severity.in_(severity))
    if rule:
        query = query.where(Finding.rule_id.in_(rule))
    if rank is not None:
        query = query.where(Finding.rank == rank)
    query = query.order_by(Finding.impact_ns.desc(), Finding.position, Finding.id)
    return paginate(session, query, page, page_size, finding_to_dict)


def _breakdown(report: Mapping[str, Any]) -> Mapping[str, Any]:
    bd = report.get("breakdown")
    return bd if isinstance(bd, Mapping) else report


def _num(d: Mapping[str, Any], key: str) -> Any:
    value = d.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if key.endswith("_pct") else int(value)


def replace_analysis(session: Session, run: Run, result: Mapping[str, Any],
                     kernel_totals: Mapping[int, list[dict[str, Any]]] | None = None) -> None:
    """Replace the run's findings, summaries and rule statuses with ``analysis.api.analyze``'s result.

    ``result["reports"]`` must be in the order of the run's ingested reports passed to analyze (by id),
    labelled with ``app.services.reports.report_labels``. ``kernel_totals`` maps report id to
    ``[{"name", "total_ns", "count"}]`` (see ``app.services.compare.kernel_totals``) for compare.
    Does not commit: the caller's transaction also finishes the analysis job.
    """
    reports = list(session.scalars(sa.select(Report).where(Report.run_id == run.id, Report.status == "ready")
                                   .order_by(Report.id)))
    labels = report_labels(reports)
    by_label = {label: rid for rid, label in labels.items()}
    session.execute(sa.delete(Finding).where(Finding.run_id == run.id))
    session.execute(sa.delete(RunSummary).where(RunSummary.run_id == run.id))
    findings = list(result.get("findings") or [])
    for position, fd in enumerate(findings):
        session.add(Finding(
            run_id=run.id, report_id=by_label.get(fd.get("report") or ""), position=position,
            rule_id=str(fd["rule_id"]), severity=str(fd["severity"]), title=str(fd.get("title", "")),
            message=str(fd.get("message", "")), impact_ns=int(fd.get("impact_ns") or 0),
            impact_pct=fd.get("impact_pct"), advice=str(fd.get("advice") or ""),
            evidence=list(fd.get("evidence") or []), evidence_total=int(fd.get("evidence_total") or 0),
            report=fd.get("report"), rank=fd.get("rank"),
            extra={k: v for k, v in fd.items() if k not in _COLUMNS},
        ))
    infos = list(result.get("reports") or [])
    totals: dict[str, Any] = {k: None for k in BREAKDOWN_KEYS}
    for report, info in zip(reports, infos, strict=False):
        bd = _breakdown(info)
        nums = {k: _num(bd, k) for k in BREAKDOWN_KEYS}
        mine = [f for f in findings if f.get("report") == labels[report.id]]
        data = {**info, "kernels": list((kernel_totals or {}).get(report.id, []))}
        session.add(RunSummary(run_id=run.id, report_id=report.id, data=data, **nums,
                               finding_count=len(mine),
                               top_impact_ns=max((int(f.get("impact_ns") or 0) for f in mine), default=None)))
        for k in BREAKDOWN_KEYS[:-1]:
            if nums[k] is not None:
                totals[k] = (totals[k] or 0) + nums[k]
    if totals["span_ns"]:
        totals["goodput_pct"] = round(100.0 * (totals["compute_ns"] or 0) / totals["span_ns"], 3)
    session.add(RunSummary(
        run_id=run.id, report_id=None, data={"reports": [labels[r.id] for r in reports]}, **totals,
        finding_count=len(findings),
        top_impact_ns=max((int(f.get("impact_ns") or 0) for f in findings), default=None),
    ))
    run.rule_statuses = list(result.get("rules") or [])


def analysis_inputs(session: Session, data_dir: Path, run: Run) -> tuple[list[Path], list[str], list[int]]:
    """(DuckDB paths, labels, report ids) of the run's ready reports, in id order, for analyze."""
    reports = list(session.scalars(sa.select(Report).where(Report.run_id == run.id, Report.status == "ready")
                                   .order_by(Report.id)))
    labels = report_labels(reports)
    return ([Path(data_dir) / r.trace_path for r in reports if r.trace_path],
            [labels[r.id] for r in reports if r.trace_path], [r.id for r in reports if r.trace_path])
