"""Read-side queries behind the run page: reports, breakdown rows, ranked findings, and report drill-down."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from analysis.api import Breakdown, DeviceBreakdown, IdleAnatomy, ReportSummary, ToolKind
from app.errors import ApiError
from app.models import Finding, Report, RunSummary
from app.services.pages.web_findings import report_label
from app.services.reads.run_repo import RunDetail, get_run, run_detail
from app.services.reads.summaries import Headline, NcuHeadline, RunResults, results_of, to_report_entity
from app.services.storage import data_path
from app.settings import Settings


@dataclass
class RunView:
    """The run page: the run's ``RunDetail`` (what the API returns for it too) and what the page draws
    beside it from the metadata DB. ``reports``: the report rows, for the page's sections; ``results``: the
    run's stored analysis as entities (``app.services.reads.summaries``, the read store)."""

    run: RunDetail
    reports: list[Report]
    results: RunResults
    findings: list[Finding]
    breakdown_rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def summaries(self) -> dict[int, ReportSummary]:
        """Each analyzed report's typed summary, by report id."""
        return {rid: s.summary for rid, s in self.results.reports.items() if s.summary is not None}

    @property
    def job(self) -> str:
        return self.run.job

    @property
    def totals(self) -> Headline:
        """The run's headline numbers (its per-run summary: the sums over its reports)."""
        return self.run.headline


def breakdown_of(summary: ReportSummary | None) -> Breakdown | None:
    """A report's time breakdown (``analysis.diagnosis.breakdown``) from its typed summary, or None."""
    return None if summary is None else summary.breakdown


def chart_segments(bd: Breakdown | DeviceBreakdown) -> dict[str, int]:
    """The five disjoint parts the stacked chart draws; they add up to the span.

    ``compute_ns`` of the breakdown includes communication that overlaps compute, so it is split here.
    """
    return {
        "compute_ns": bd.compute_ns - bd.comm_overlapped_ns,
        "overlapped_comm_ns": bd.comm_overlapped_ns,
        "exposed_comm_ns": bd.comm_exposed_ns,
        "memory_ns": bd.memory_only_ns,
        "idle_ns": bd.idle_ns,
    }


def breakdown_rows(reports: list[Report], results: RunResults) -> list[dict[str, Any]]:
    """One chart row per (report, device): label, span and segments, from the stored summaries only."""
    rows: list[dict[str, Any]] = []
    many = len(reports) > 1
    for report in reports:
        bd = breakdown_of(results.summary(report.id))
        if bd is None:
            continue
        devices = bd.devices
        for dev in devices:
            rank = dev.rank
            parts = []
            if rank is not None:
                parts.append(f"rank {rank}")
            elif many:
                parts.append(report.name[:40])
            parts.append(f"GPU {dev.device}")
            if len({d.pid for d in devices}) > 1:
                parts.append(f"pid {dev.pid}")
            rows.append({"label": " · ".join(parts), "total_ns": dev.span_ns,
                         "segments": chart_segments(dev), "report_id": report.id})
        if not devices and bd.span_ns:
            rows.append({"label": report.name[:40], "total_ns": bd.span_ns, "segments": chart_segments(bd),
                         "report_id": report.id})
    return rows


def iteration_sections(reports: list[Report], results: RunResults) -> list[dict[str, Any]]:
    """Per nsys report whose analysis found a loop with a step anatomy: the step-time distribution and the
    slowest steps with the rule that owns their extra time (from the stored summaries only)."""
    out = []
    for report in reports:
        summary = results.summary(report.id)
        it = None if summary is None else summary.iterations
        ana = None if it is None else it.anatomy
        if it is None or ana is None:
            continue
        dist: Mapping[str, Any] = {} if it.iteration_time is None else it.iteration_time.to_json()
        loops = it.loops
        # Under ``loop:N`` the anatomy is loop N's: its count, source and step times, not the main loop's.
        index = ana.details.get("loop")
        judged = next((lp for lp in loops if index is not None and lp.index == index), None)
        if judged is not None:
            dist = ana.details.get("iteration_time") or dist
        shown = judged or it
        out.append({
            "report_id": report.id, "name": report.name, "rank": report.rank,
            "source": shown.source, "count": shown.count,
            "range": it.range if judged is None or judged.main else None,
            "loop": None if judged is None else {"index": judged.index, "of": len(loops)},
            "dist": [(label, dist.get(key)) for label, key in (("min", "min_ns"), ("p10", "p10_ns"),
                                                              ("median", "median_ns"), ("p90", "p90_ns"),
                                                              ("p99", "p99_ns"), ("max", "max_ns"))],
            "steps": ana.steady_count, "median_ns": ana.iteration_median_ns,
            "jitter_pct": ana.jitter_pct, "duty_pct": ana.gpu_duty_cycle_pct, "kind": ana.kind,
            "per_second": ana.per_second, "slowest": list(ana.slowest_steps),
            # Several loops one after the other: each one's step times (one loop: the table above says it all).
            "loops": list(loops) if len(loops) > 1 else [],
        })
    return out


def system_sections(reports: list[Report], results: RunResults) -> list[dict[str, Any]]:
    """Per report whose export carries system metrics: its storage I/O (OS runtime file calls), NIC counters
    and GPU metrics samples, as the analysis summarised them (``analysis.diagnosis.system_metrics``)."""
    out = []
    for report in reports:
        summary = results.summary(report.id)
        metrics = None if summary is None else summary.system_metrics
        if metrics is None or not (metrics.storage or metrics.nic or metrics.gpu):
            continue
        out.append({"report_id": report.id, "label": report_label(report), "name": report.name,
                    "storage": metrics.storage, "nic": metrics.nic, "gpu": metrics.gpu})
    return out


def idle_sections(reports: list[Report], results: RunResults) -> list[tuple[Report, IdleAnatomy]]:
    """Per nsys report, each (device, phase) of its idle anatomy with idle time, in the stored order: what the
    run page's "While the GPU idled" bars draw."""
    out = []
    for report in reports:
        summary = results.summary(report.id) if report.kind == ToolKind.NSYS else None
        for entry in (summary.idle_anatomy or ()) if summary is not None else ():
            if entry.idle_ns:
                out.append((report, entry))
    return out


def run_view(session: Session, run_id: int) -> RunView:
    """Everything the run page shows that lives in the metadata DB (no trace file is opened)."""
    run = get_run(session, run_id)
    reports = list(session.scalars(sa.select(Report).where(Report.run_id == run_id).order_by(Report.rank, Report.id)))
    rows = list(session.scalars(sa.select(RunSummary).where(RunSummary.run_id == run_id)))
    results = results_of(rows)
    findings = list(session.scalars(
        sa.select(Finding).where(Finding.run_id == run_id)
        .order_by(Finding.position, Finding.id)))  # the analysis' ranking
    return RunView(run_detail(session, run_id, run=run, reports=reports, summaries=rows), reports, results,
                   findings, breakdown_rows(reports, results))


@dataclass(frozen=True)
class NcuKpis:
    """The headline of an ncu-only run (no timeline breakdown): what Nsight Compute measured."""

    kernels: int
    gpu_time_ns: int | None
    saving_ns: int


def _kernel_count(report: Report) -> int:
    """The kernels an ncu report profiled (its counts columns, over those of its ingest)."""
    counts = {**((report.info or {}).get("counts") or {}), **(report.counts or {})}
    return int(counts.get("kernels") or counts.get("ncu_kernels") or 0)


def _ncu_headline(view: RunView, report: Report) -> NcuHeadline:
    """A report's ncu headline from the read store; before the run's analysis stored it, the profiled time its
    ingest found (the same summary's number)."""
    stored = view.results.reports.get(report.id)
    if stored is not None:
        return stored.ncu or NcuHeadline()
    time_ns = (report.info or {}).get("gpu_time_ns")
    return NcuHeadline(gpu_time_ns=time_ns if isinstance(time_ns, int) else None)


def ncu_kpis(view: RunView) -> NcuKpis | None:
    """The headline of a run whose reports are all Nsight Compute ones (None for any other run)."""
    if any(r.kind == ToolKind.NSYS for r in view.reports) or not any(r.kind == ToolKind.NCU for r in view.reports):
        return None
    heads = [_ncu_headline(view, r) for r in view.reports]
    times = [h.gpu_time_ns for h in heads if h.gpu_time_ns is not None]
    # The bounded sum of each report's findings (one kernel's findings share its time), never the raw sum.
    savings = [h.estimated_saving_ns for h in heads if h.estimated_saving_ns is not None]
    return NcuKpis(kernels=sum(_kernel_count(r) for r in view.reports),
                   gpu_time_ns=sum(times) if times else None,
                   saving_ns=sum(savings) if savings else sum(f.impact_ns for f in view.findings if f.rule_id.startswith("NCU")))


def ready_report(session: Session, settings: Settings, run_id: int, report_id: int) -> tuple[Report, Path]:
    """A report of this run whose DuckDB file is published, and that file's path."""
    get_run(session, run_id)
    report = session.get(Report, report_id)
    if report is None or report.run_id != run_id:
        raise ApiError("REPORT_NOT_FOUND", f"Report {report_id} is not part of run {run_id}.")
    if not report.trace_path:
        raise ApiError("CONFLICT", f"Report {report_id} is not ingested yet (status {report.status}).")
    path = data_path(settings, report.trace_path)
    if not path.is_file():
        raise ApiError("REPORT_NOT_FOUND", f"The trace of report {report_id} is missing from storage.")
    return report, path


def report_window(session: Session, run_id: int, report_id: int) -> tuple[int, int] | None:
    """The analysis window a report's findings were judged on, in its own times (None: the whole report)."""
    row = session.scalar(sa.select(RunSummary).where(RunSummary.run_id == run_id, RunSummary.report_id == report_id))
    summary = None if row is None else to_report_entity(row).summary
    w = None if summary is None else summary.window
    if w is None:
        return None
    return (w.start_ns, w.end_ns) if w.start_ns is not None and w.end_ns is not None else None


def clock_offsets(reports: list[Report]) -> dict[int, int]:
    """Per ingested nsys report, the ns to add to its times to reach the run clock the timeline draws on (0 at
    the earliest report's session start; ``analysis.views.run_timeline.offsets``): 0 each unless every one of
    several reports knows its session start."""
    parts = [r for r in reports if r.kind == ToolKind.NSYS and r.trace_path]
    starts = [s for s in ((r.info or {}).get("session_start_utc_ns") for r in parts) if isinstance(s, int)]
    if len(parts) < 2 or len(starts) < len(parts):
        return {r.id: 0 for r in parts}
    origin = min(starts)
    return {r.id: s - origin for r, s in zip(parts, starts, strict=True)}


def on_run_clock(findings: list[dict[str, Any]], reports: list[Report]) -> list[dict[str, Any]]:
    """``findings`` (``finding_dict`` shape) with each timed evidence row's start on the run clock as ``at_ns``:
    the time from the run's start, which the timeline's ticks count from too (a run-level finding's row maps
    through its rank's report)."""
    offs = clock_offsets(reports)
    by_rank = {r.rank: offs[r.id] for r in reports if r.id in offs and r.rank is not None}
    out = []
    for f in findings:
        evidence = []
        for e in f.get("evidence") or []:
            if isinstance(e, dict) and isinstance(e.get("start_ns"), int):
                report_id, rank = f.get("report_id"), e.get("rank")
                off = offs.get(report_id, 0) if report_id is not None else by_rank.get(rank, 0) if rank is not None else 0
                e = {**e, "at_ns": e["start_ns"] + off}
            evidence.append(e)
        out.append({**f, "evidence": evidence})
    return out


def timeline_hints(findings: list[dict[str, Any]], reports: list[Report]) -> list[dict[str, Any]]:
    """Each finding without a timed evidence row gains how the timeline can show it: ``timeline_calls`` (the
    names its evidence sums over, whose calls ``calls.json`` finds where they held the GPU idle) when it is an
    nsys report's, else ``timeline_reason`` (why it has no time range)."""
    by_id = {r.id: r for r in reports}
    out = []
    for f in findings:
        evidence = [e for e in f.get("evidence") or [] if isinstance(e, dict)]
        if any(isinstance(e.get("start_ns"), int) for e in evidence):
            out.append(f)
            continue
        rid = f.get("report_id")
        report = by_id.get(rid) if isinstance(rid, int) else None
        names = [str(n["name"]) for n in f.get("names") or [] if isinstance(n, dict) and n.get("name")] or [
            str(e["name"]) for e in evidence if e.get("name")]
        hint: dict[str, Any]
        if report is None:
            hint = {"timeline_reason": "a figure of the whole run, across its ranks, with no time range of its own"}
        elif report.kind == ToolKind.NCU:
            hint = {"timeline_reason": "measured by Nsight Compute, which replays each kernel off the timeline's clock"}
        elif report.kind == ToolKind.NCCL:
            hint = {"timeline_reason": "read from the NCCL debug log, which records no times"}
        elif names and report.trace_path:
            hint = {"timeline_calls": names[:50]}
        else:
            hint = {"timeline_reason": "its evidence gives totals over the analysis window, with no time range"}
        out.append({**f, **hint})
    return out


def finding_dict(f: Finding) -> dict[str, Any]:
    """A stored finding in the ``Finding.to_dict()`` shape (what downloads and the page's JS read)."""
    out = {
        "rule_id": f.rule_id, "severity": f.severity, "title": f.title, "message": f.message,
        "impact_ns": f.impact_ns, "impact_pct": f.impact_pct, "advice": f.advice, "report": f.report,
        "report_id": f.report_id, "rank": f.rank, "evidence": f.evidence or [], "evidence_total": f.evidence_total,
    }
    out.update(f.extra or {})
    return out


def rank_findings(view: RunView) -> list[dict[str, Any]]:
    """The findings the page groups by rule and rank: a multi-rank run stores one finding per rule and scope
    across the ranks (``per_rank``, ``ranks_with_finding``), so each rank's own come from its report's
    summary (the read store's ``StoredReport.findings``), with the run-level ones; a run of one report, as stored."""
    stored = [finding_dict(f) for f in view.findings]
    if not any("ranks_with_finding" in f for f in stored):
        return stored
    by_label = {r.name: r.id for r in view.reports}
    own: list[dict[str, Any]] = []
    for report in view.reports:
        entity = view.results.reports.get(report.id)
        for f in () if entity is None else entity.findings:
            own.append({**f.to_json(), "report_id": by_label.get(f.report or "", report.id)})
    run_level = [f for f in stored if "ranks_with_finding" not in f]
    return sorted([*own, *run_level], key=lambda f: -int(f.get("impact_ns") or 0))
