"""Read-side queries behind the run page: reports, breakdown rows, ranked findings, and report drill-down."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from analysis.kernel_names import VOLATILE_NVTX_SQL, short_kernel_name
from app.errors import ApiError
from app.models import Finding, Job, Report, Run, RunSummary
from app.services.storage import data_path
from app.settings import Settings

TABLE_LIMIT = 500   # rows of the kernel / NVTX tables sent to the browser (largest total time first)


@dataclass
class RunView:
    run: Run
    job: str
    reports: list[Report]
    summaries: dict[int | None, dict[str, Any]]
    findings: list[Finding]
    breakdown_rows: list[dict[str, Any]] = field(default_factory=list)
    totals: dict[str, Any] = field(default_factory=dict)


def breakdown_of(data: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``analysis.breakdown`` dict inside a stored report summary (nested or flattened), or None."""
    if not data:
        return None
    bd = data.get("breakdown")
    if isinstance(bd, dict) and "span_ns" in bd:
        return bd
    return data if "span_ns" in data and "compute_ns" in data else None


def chart_segments(bd: dict[str, Any]) -> dict[str, int]:
    """The five disjoint parts the stacked chart draws; they add up to the span.

    ``compute_ns`` of the breakdown includes communication that overlaps compute, so it is split here.
    """
    overlapped = int(bd.get("comm_overlapped_ns") or 0)
    return {
        "compute_ns": int(bd.get("compute_ns") or 0) - overlapped,
        "overlapped_comm_ns": overlapped,
        "exposed_comm_ns": int(bd.get("comm_exposed_ns") or 0),
        "memory_ns": int(bd.get("memory_only_ns") or 0),
        "idle_ns": int(bd.get("idle_ns") or 0),
    }


def breakdown_rows(reports: list[Report], summaries: dict[int | None, dict[str, Any]]) -> list[dict[str, Any]]:
    """One chart row per (report, device): label, span and segments, from the stored summaries only."""
    rows: list[dict[str, Any]] = []
    many = len(reports) > 1
    for report in reports:
        bd = breakdown_of(summaries.get(report.id))
        if bd is None:
            continue
        devices = bd.get("devices") or []
        for dev in devices:
            rank = dev.get("rank", report.rank)
            parts = []
            if rank is not None:
                parts.append(f"rank {rank}")
            elif many:
                parts.append(report.name[:40])
            parts.append(f"GPU {dev.get('device')}")
            if len({d.get('pid') for d in devices}) > 1:
                parts.append(f"pid {dev.get('pid')}")
            rows.append({"label": " · ".join(parts), "total_ns": int(dev.get("span_ns") or 0),
                         "segments": chart_segments(dev), "report_id": report.id})
        if not devices and bd.get("span_ns"):
            rows.append({"label": report.name[:40], "total_ns": int(bd["span_ns"]), "segments": chart_segments(bd),
                         "report_id": report.id})
    return rows


def run_totals(reports: list[Report], summaries: dict[int | None, dict[str, Any]]) -> dict[str, Any]:
    """Headline numbers of the run: sums of its reports' breakdowns (same definition as the runs list)."""
    keys = ("span_ns", "compute_ns", "comm_overlapped_ns", "comm_exposed_ns", "memory_only_ns", "idle_ns")
    out: dict[str, Any] = dict.fromkeys(keys, 0)
    seen = False
    for report in reports:
        bd = breakdown_of(summaries.get(report.id))
        if bd is None:
            continue
        seen = True
        for k in keys:
            out[k] += int(bd.get(k) or 0)
    if not seen:
        return {}
    out["goodput_pct"] = 100.0 * out["compute_ns"] / out["span_ns"] if out["span_ns"] else None
    return out


def get_run(session: Session, run_id: int) -> Run:
    run = session.get(Run, run_id)
    if run is None or run.deleted_at is not None:
        raise ApiError("RUN_NOT_FOUND", f"Run {run_id} does not exist.")
    return run


def run_view(session: Session, run_id: int) -> RunView:
    """Everything the run page shows that lives in the metadata DB (no trace file is opened)."""
    run = get_run(session, run_id)
    job = session.scalar(sa.select(Job.name).where(Job.id == run.job_id)) or ""
    reports = list(session.scalars(sa.select(Report).where(Report.run_id == run_id).order_by(Report.rank, Report.id)))
    summaries = {s.report_id: s.data or {} for s in session.scalars(
        sa.select(RunSummary).where(RunSummary.run_id == run_id))}
    findings = list(session.scalars(
        sa.select(Finding).where(Finding.run_id == run_id)
        .order_by(Finding.position, Finding.id)))  # the analysis' ranking
    return RunView(run, job, reports, summaries, findings, breakdown_rows(reports, summaries),
                   run_totals(reports, summaries))


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


def finding_dict(f: Finding) -> dict[str, Any]:
    """A stored finding in the ``Finding.to_dict()`` shape (what downloads and the page's JS read)."""
    out = {
        "rule_id": f.rule_id, "severity": f.severity, "title": f.title, "message": f.message,
        "impact_ns": f.impact_ns, "impact_pct": f.impact_pct, "advice": f.advice, "report": f.report,
        "report_id": f.report_id, "rank": f.rank, "evidence": f.evidence or [], "evidence_total": f.evidence_total,
    }
    out.update(f.extra or {})
    return out


def kernel_table(trace: Any) -> list[dict[str, Any]]:
    """Per kernel name of an nsys report: launches, total/mean/min/max time and share of all kernel time."""
    if not trace.has_rows("kernels"):
        return []
    rows = trace.sql(
        """SELECT name, any_value(category), count(*), sum(end_ns - start_ns), min(end_ns - start_ns),
                  max(end_ns - start_ns), count(DISTINCT stream), sum(sum(end_ns - start_ns)) OVER ()
             FROM kernels GROUP BY name ORDER BY 4 DESC, 1 LIMIT $lim""",
        {"lim": TABLE_LIMIT},
    )
    return [{"name": n or "", "short": short_kernel_name(n or ""), "category": c, "count": int(k),
             "total_ns": int(t), "mean_ns": int(t) // max(1, int(k)), "min_ns": int(mn), "max_ns": int(mx),
             "streams": int(s), "pct": 100.0 * int(t) / int(all_t) if all_t else None}
            for n, c, k, t, mn, mx, s, all_t in rows]


def nvtx_table(trace: Any) -> list[dict[str, Any]]:
    """Per NVTX range text (volatile counters such as ``op_id = N`` folded) and domain: count and durations."""
    if not trace.has_rows("nvtx"):
        return []
    rows = trace.sql(
        f"""SELECT {VOLATILE_NVTX_SQL} AS t, domain, count(*), sum(end_ns - start_ns), min(end_ns - start_ns),
                   max(end_ns - start_ns)
              FROM nvtx WHERE end_ns IS NOT NULL GROUP BY t, domain ORDER BY 4 DESC, 1 LIMIT $lim""",  # noqa: S608
        {"lim": TABLE_LIMIT},
    )
    return [{"text": t or "", "domain": d, "count": int(k), "total_ns": int(tt), "mean_ns": int(tt) // max(1, int(k)),
             "min_ns": int(mn), "max_ns": int(mx)} for t, d, k, tt, mn, mx in rows]


def kernel_rank_matrix(traces: list[tuple[str, Any]], top: int = 15) -> dict[str, Any]:
    """Kernel x rank total time for the ``top`` kernels (by their largest total on any rank).

    ``traces`` are (rank label, nsys Trace) pairs; a straggler kernel shows as one rank's outlying cell.
    """
    per: list[dict[str, int]] = []
    for _label, trace in traces:
        rows = trace.sql("SELECT name, sum(end_ns - start_ns) FROM kernels GROUP BY name ORDER BY 2 DESC LIMIT 200") \
            if trace.has_rows("kernels") else []
        per.append({n or "": int(t) for n, t in rows})
    names = sorted({n for p in per for n in p}, key=lambda n: -max(p.get(n, 0) for p in per))[:top]
    return {"ranks": [label for label, _ in traces],
            "kernels": [{"name": n, "short": short_kernel_name(n), "total_ns": [p.get(n) for p in per]} for n in names]}


def ncu_kernel_table(trace: Any) -> list[dict[str, Any]]:
    """Per kernel name of an ncu report: profiled launches, ncu's durations, share and the best estimated speedup."""
    if not trace.has_rows("ncu_kernels"):
        return []
    speedup = "NULL"
    if trace.has_rows("ncu_rule_results"):
        speedup = "(SELECT max(r.speedup_pct) FROM ncu_rule_results r JOIN ncu_kernels k2 USING (kernel_id) " \
                  "WHERE k2.name IS NOT DISTINCT FROM k.name)"
    rows = trace.sql(
        f"""SELECT name, count(*), sum(duration_ns), min(duration_ns), max(duration_ns),
                   sum(sum(duration_ns)) OVER (), {speedup}
              FROM ncu_kernels k GROUP BY name ORDER BY 3 DESC NULLS LAST, 1 LIMIT $lim""",  # noqa: S608
        {"lim": TABLE_LIMIT})
    out = []
    for n, k, t, mn, mx, all_t, sp in rows:
        out.append({"name": n or "", "short": short_kernel_name(n or ""), "category": "ncu", "count": int(k),
                    "total_ns": None if t is None else int(t),
                    "mean_ns": None if t is None else int(t) // max(1, int(k)),
                    "min_ns": None if mn is None else int(mn), "max_ns": None if mx is None else int(mx),
                    "streams": None, "pct": 100.0 * t / all_t if t is not None and all_t else None,
                    "speedup_pct": None if sp is None else float(sp)})
    return out
