"""The job page's metric picker : per-rule impact and per-kernel time of each run, per step when
every run counted steps; and per ncu-profiled kernel its main ncu KPIs over the job's runs. Series in the shape
``JobTrends.series`` returns, with date and git sha per point."""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from analysis import api
from analysis.api import ToolKind, short_kernel_name
from app.models import Report, ReportStatus, RunSummary
from app.services.pages.web_jobs import JobTrends
from app.services.reads.summaries import report_summary
from app.services.storage import data_path
from app.settings import Settings

TOP_KERNELS = 10


def point_axis(p: Any) -> dict[str, Any]:
    """What the x axis says under a run: its date and short git sha."""
    return {"date": f"{p.created_at:%m-%d}", "time": f"{p.created_at:%H:%M}", "sha": (p.git_sha or "")[:7]}


def metrics(session: Session, trends: JobTrends, href: Any) -> dict[str, dict[str, Any]]:
    """metric id -> series: ``kpi:KEY`` (the comparison's idle and memory-only totals), ``rule:ID`` (that rule's
    impact in each run) and ``kernel:NAME`` (its time per run)."""
    ids = [p.run_id for p in trends.points]
    if not ids:
        return {}
    per_step = trends.per_iteration
    divisor = {p.run_id: (p.iterations or 1) if per_step else 1 for p in trends.points}
    analyzed = {p.run_id for p in trends.points if p.goodput_pct is not None}
    rules = trends.rule_impact
    kernels: dict[str, dict[int, int]] = {}
    for s in session.scalars(sa.select(RunSummary).where(RunSummary.run_id.in_(ids),
                                                        RunSummary.report_id.is_not(None))):
        summary = report_summary(s.data)
        for k in (summary.top_kernels or ()) if summary is not None else ():
            acc = kernels.setdefault(k.name or "", {})
            acc[s.run_id] = acc.get(s.run_id, 0) + int(k.total_ns or 0)
    top = sorted(kernels, key=lambda n: -max(kernels[n].values()))[:TOP_KERNELS]
    suffix = " per step" if per_step else " per run"

    def series(label: str, values: dict[int, int]) -> dict[str, Any]:
        return {"label": label + suffix, "unit": "ns", "points": [
            {"x_label": f"#{p.run_id} {p.created_at:%Y-%m-%d %H:%M}", **point_axis(p),
             # A rule that did not fire in an analyzed run cost nothing there: 0, not a gap in the line.
             "value": (values.get(p.run_id, 0) / divisor[p.run_id]) if p.run_id in analyzed or p.run_id in values
             else None, "href": href(p.run_id), "regressed": False} for p in trends.points]}

    # The comparison's totals (analysis.views.compare's kpis): the ranks' breakdowns summed, per run.
    totals: dict[str, dict[int, int]] = {key: {p.run_id: v for p in trends.points
                                               if (v := getattr(p.headline, key)) is not None}
                                         for key in ("idle_ns", "memory_only_ns")}

    def total_series(label: str, values: dict[int, int]) -> dict[str, Any]:
        return {"label": label, "unit": "ns", "points": [
            {"x_label": f"#{p.run_id} {p.created_at:%Y-%m-%d %H:%M}", **point_axis(p), "value": values.get(p.run_id),
             "href": href(p.run_id), "regressed": False} for p in trends.points]}

    out = {"kpi:idle_ns": total_series("GPU idle per run (all GPUs)", totals["idle_ns"]),
           "kpi:memory_only_ns": total_series("memory-only time per run (all GPUs)", totals["memory_only_ns"])}
    out.update({f"rule:{r}": series(f"{r} impact", rules[r]) for r in sorted(rules)})
    out.update({f"kernel:{n}": series(f"kernel {short_kernel_name(n, 60)}", kernels[n]) for n in top})
    return out


# The ncu KPIs drawn per kernel: key, label, unit, and how a launch gives it (the metrics the ncu rules read).
NCU_KPIS = api.NCU_TREND_KPIS
TOP_NCU_KERNELS = 10
_ncu_cache: OrderedDict[str, dict[str, dict[str, list[float]]]] = OrderedDict()
_ncu_lock = threading.Lock()
_NCU_CACHE_SIZE = 512


def _ncu_kernels(path: Path) -> dict[str, dict[str, list[float]]]:
    """kernel name -> KPI -> [sum, count] over the report's profiled launches that have it (kept per file path
    and mtime: an ingested report never changes)."""
    try:
        key = f"{path}@{path.stat().st_mtime_ns}"
    except OSError:
        return {}
    with _ncu_lock:
        hit = _ncu_cache.get(key)
        if hit is not None:
            _ncu_cache.move_to_end(key)
            return hit
    out = api.ncu_kernel_kpis(path)   # outside the lock: it reads the file
    with _ncu_lock:
        _ncu_cache[key] = out
        while len(_ncu_cache) > _NCU_CACHE_SIZE:
            _ncu_cache.popitem(last=False)
    return out


def ncu_trends(session: Session, settings: Settings, trends: JobTrends, href: Any) -> dict[str, Any]:
    """Per ncu-profiled kernel (the ``TOP_NCU_KERNELS`` with the most profiled time over the job's runs), a
    series per KPI: the mean over that run's profiled launches of the kernel (all its ncu reports), None in
    runs that did not profile it. ``{"kernels": [{"name", "label", "series": {kpi: series}}]}``."""
    ids = [p.run_id for p in trends.points]
    if not ids:
        return {"kernels": []}
    per_run: dict[int, dict[str, dict[str, list[float]]]] = {}
    for run_id, rel in session.execute(
            sa.select(Report.run_id, Report.trace_path).where(
                Report.run_id.in_(ids), Report.kind == ToolKind.NCU.value, Report.status == ReportStatus.READY,
                Report.trace_path.is_not(None)).order_by(Report.id)):
        path = data_path(settings, rel or "")
        if not rel or not path.is_file():
            continue
        run = per_run.setdefault(run_id, {})
        for name, kpis in _ncu_kernels(path).items():
            acc = run.setdefault(name, {})
            for kpi, (total, count) in kpis.items():
                cell = acc.setdefault(kpi, [0.0, 0])
                cell[0] += total
                cell[1] += count
    profiled: dict[str, float] = {}
    for run in per_run.values():
        for name, kpis in run.items():
            total, _count = kpis.get("duration", [0.0, 0])
            profiled[name] = profiled.get(name, 0.0) + total
    top = sorted(profiled, key=lambda n: (-profiled[n], n))[:TOP_NCU_KERNELS]
    kernels = []
    for name in top:
        series = {}
        for kpi, label, unit in NCU_KPIS:
            points = []
            for p in trends.points:
                sums = per_run.get(p.run_id, {}).get(name, {}).get(kpi)
                points.append({"x_label": f"#{p.run_id} {p.created_at:%Y-%m-%d %H:%M}", **point_axis(p),
                               "value": sums[0] / sums[1] if sums and sums[1] else None,
                               "launches": cell[1] if cell else 0, "href": href(p.run_id), "regressed": False})
            if any(pt["value"] is not None for pt in points):
                series[kpi] = {"label": f"{label} (mean per profiled launch)", "unit": unit, "points": points}
        kernels.append({"name": name, "label": short_kernel_name(name, 80), "series": series})
    return {"kernels": kernels}
