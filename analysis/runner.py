"""Analyze a run: per-report phases and summaries, all selected rules on the analysis window, findings
ranked by impact."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from analysis import breakdown as bd
from analysis import iterations as it
from analysis import window as win
from analysis.anatomy import anatomy
from analysis.findings import Finding, rank_findings
from analysis.launches import launch_summary
from analysis.ncu.kernels import report_kernels
from analysis.nvtx_projection import nvtx_projection
from analysis.phases import PhaseInfo, phase_info
from analysis.rules.base import run_rules
from analysis.rules.registry import default_registry
from analysis.summary import report_info
from analysis.trace import DUCKDB_MEMORY_BYTES, Run, Trace

ITEMS = 50  # per-iteration records in the JSON: the first ones (all of them feed the statistics)
# Idle a host-paced loop shows between iterations is its pacing, not a defect of the GPU: also when the
# host is seen waiting in OS calls (HOST001), which is how a paced loop waits for its next frame or request.
PACING_RULES = ("GPU001", "GPU002", "HOST001")


def _loop_summary(trace: Trace, info: PhaseInfo, ana: dict[str, Any] | None) -> dict[str, Any]:
    """The report's ``iterations`` object: NVTX's step summary when the step is an NVTX range (its
    keys as before), plus the loop's source, counts, iteration-time percentiles and step anatomy."""
    loop = info.loop
    nv = loop.nvtx or (it.iterations(trace) if loop.source is None else {})
    out: dict[str, Any] = it.compact(nv) if loop.source in ("nvtx", None) else {
        "has_nvtx": trace.has_rows("nvtx"), "range": None, "domain": None}
    if loop.source == "nvtx":
        # NVTX steps keep their projected GPU time as the headline, as before; p99 of it beside.
        gpu = [i["gpu_ns"] for i in nv["items"]]
        out["p99_ns"] = float(np.percentile(gpu, 99)) if gpu else None
    d = loop.durations
    out.update({"source": loop.source, "count": len(loop), "signature": loop.signature,
                "detail": loop.detail, "reason": out.get("reason") if loop.source else loop.reason})
    if len(d):
        q = {f"p{p}": float(np.percentile(d, p)) for p in (10, 50, 90, 99)}
        stats = {"median_ns": q["p50"], "p10_ns": q["p10"], "p90_ns": q["p90"], "p99_ns": q["p99"],
                 "min_ns": int(d.min()), "max_ns": int(d.max()), "mean_ns": float(d.mean())}
        out["iteration_time"] = stats
        if loop.source != "nvtx":
            out.update(stats)
        out["items"] = [{"index": i, "start_ns": int(loop.starts[i]), "end_ns": int(loop.ends[i]),
                         "ns": int(d[i])} for i in range(min(len(d), ITEMS))]
    if ana is not None:
        records = ana.pop("records")
        out["anatomy"] = {**ana, "records": records[:ITEMS], "records_total": len(records)}
    return out


def _last_per_step(run: Run, infos_p: list[PhaseInfo | None]) -> dict[str, Any] | None:
    """Multi-rank runs: per iteration, which report (rank) finished it last on the absolute clock, and
    by how much after the first. Iterations pair by index when every rank's loop has the same count."""
    loops = [(t, i.loop) for t, i in zip(run.traces, infos_p, strict=True) if i is not None and len(i.loop)]
    if len(loops) < 2 or len({len(lp) for _, lp in loops}) != 1 or any(t.session_start_utc_ns is None for t, _ in loops):
        return None
    # On the clock of the earliest session: start differences, never sums of absolute clocks (int64).
    base = min(int(t.session_start_utc_ns or 0) for t, _ in loops)
    ends = np.stack([lp.ends + (int(t.session_start_utc_ns or 0) - base) for t, lp in loops])
    last = np.argmax(ends, axis=0)
    spread = ends.max(axis=0) - ends.min(axis=0)
    names = [f"rank {t.rank}" if t.rank is not None else t.label for t, _ in loops]
    if len(set(names)) < len(names):  # ranks missing or repeated in the metadata: the reports' labels
        names = [t.label for t, _ in loops]
    counts = np.bincount(last, minlength=len(loops))
    return {"count": int(ends.shape[1]), "last": {names[k]: int(c) for k, c in enumerate(counts)},
            "spread_median_ns": float(np.median(spread)),
            "items": [{"index": j, "last": names[int(last[j])], "spread_ns": int(spread[j])}
                      for j in range(min(ends.shape[1], ITEMS))]}


def _align(run: Run, bounds: list[tuple[int, int] | None]) -> list[tuple[int, int] | None]:
    """Several nsys reports with absolute clocks: one steady window for all, the intersection of theirs
    on the absolute time base (when they overlap), so that ranks are judged over the same stretch."""
    starts = [t.session_start_utc_ns for t in run.traces]
    if len(run.traces) < 2 or any(b is None for b in bounds) or any(s is None for s in starts):
        return bounds
    # Offsets from the earliest session start (Python integers: exact whatever the clocks).
    base = min(starts)  # type: ignore[type-var]
    off = [s - base for s in starts]  # type: ignore[operator]
    lo = max(b[0] + o for b, o in zip(bounds, off, strict=True))  # type: ignore[index]
    hi = min(b[1] + o for b, o in zip(bounds, off, strict=True))  # type: ignore[index]
    if lo >= hi:
        return bounds
    return [(lo - o, hi - o) for o in off]


def analyze_run(
    reports: list[Path], *, labels: list[str] | None = None, rules: list[str] | None = None,
    thresholds: Mapping[str, float] | None = None, top: int | None = None, memory_bytes: int = DUCKDB_MEMORY_BYTES,
    window: str | None = None,
) -> dict[str, Any]:
    """See ``analysis.api.analyze``."""
    spec = win.parse(window)
    registry = default_registry()
    registry.validate_overrides(thresholds)
    selected = registry.select(rules)
    all_params = {r.id: registry.resolve_params(r, thresholds) for r in registry}
    with Run.open([Path(p) for p in reports], labels, memory_bytes) as run:
        infos_p = [phase_info(t) if t.tool == "nsys" else None for t in run.traces]
        resolved = [win.resolve(spec, t, i) if i is not None else ("all", None, "not an nsys report")
                    for t, i in zip(run.traces, infos_p, strict=True)]
        bounds = [r[1] for r in resolved]
        if spec.kind == "steady" and all(t.tool == "nsys" for t in run.traces):
            bounds = _align(run, bounds)
        views = [t.windowed(*b) if b is not None else t for t, b in zip(run.traces, bounds, strict=True)]
        for v, i in zip(views, infos_p, strict=True):
            if i is not None:
                v.memo["phase_info"] = i
        wrun = Run(views)
        try:
            infos = []
            for t, v, i, (phase, b, reason) in zip(run.traces, views, infos_p, resolved, strict=True):
                info = report_info(t)
                if i is not None:
                    info["breakdown"] = bd.breakdown(v)
                    ana = anatomy(v, i.loop, all_params) if len(i.loop) and v.has_rows("kernels") else None
                    info["iterations"] = _loop_summary(t, i, ana)
                    nvtx = nvtx_projection(v, limit=10)
                    info["nvtx"] = {"has_nvtx": nvtx["has_nvtx"], "top_ranges": nvtx["ranges"]}
                    info["launches"] = launch_summary(v)
                    info["phases"] = [p.to_dict() for p in i.phases]
                elif t.tool == "ncu":  # the per-kernel memory story, weighted by nsys time (issue #17)
                    info["kernels"] = report_kernels(t, wrun)
                b = bounds[len(infos)]
                info["window"] = {"spec": spec.text, "phase": phase, "reason": reason,
                                  "start_ns": None if b is None else b[0], "end_ns": None if b is None else b[1]}
                infos.append(info)
            findings, results = run_rules(wrun, registry, selected, thresholds, window=spec)
            steps = _last_per_step(run, infos_p)
        finally:
            for v, t in zip(views, run.traces, strict=True):
                if v is not t:
                    v.close()
    phase_by_label = {info["file"]: info["window"]["phase"] for info in infos}
    paced = {info["file"] for info in infos
             if ((info.get("iterations") or {}).get("anatomy") or {}).get("kind") == "host_paced"}
    findings = [_placed(f, phase_by_label, paced, spec.text) for f in findings]
    ranked = rank_findings(findings)
    if top is not None:
        ranked = ranked[:top]
    out = {
        "window": spec.text,
        "reports": infos,
        "findings": [f.to_dict() for f in ranked],
        "rules": [r.to_dict() for r in results],
    }
    if steps is not None:
        out["steps"] = steps  # multi-rank: which rank finished each iteration last
    return out


def _placed(f: Finding, phase_by_label: dict[str, str], paced: set[str], spec: str) -> Finding:
    """A finding with its phase (the report's window, or the run's for run-level findings); on a
    host-paced loop the idle rules are information, not defects."""
    if f.phase is None:
        f = dataclasses.replace(f, phase=phase_by_label.get(f.report or "", spec if f.report is None else None))
    if f.report in paced and f.rule_id in PACING_RULES:
        f = dataclasses.replace(f, severity="info", message=f.message + " The loop is host-paced (the GPU waits "
                                "for each frame or request by design): this idle is its pacing, not a GPU defect.",
                                extra={**f.extra, "host_paced": True})
    return f
