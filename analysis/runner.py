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
from analysis import steps as records_of
from analysis import window as win
from analysis.activity import unit_ops
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
# Windows that are a stretch of the loop: there a finding's cost per step is the natural unit.
LOOP_WINDOWS = ("steady", "iterations")


def _anatomy(t: Trace, v: Trace, info: PhaseInfo, all_params: Mapping[str, Mapping[str, float]]) -> dict[str, Any] | None:
    """The window's step anatomy from every iteration's exact record: those the ingest wrote into the
    file, else (a file older than the table) computed on the window's GPU operations, exact for the
    iterations that lie inside it, which are the only ones the anatomy uses."""
    loop = info.loop
    if not len(loop) or not v.has_rows("kernels"):
        return None
    cols = records_of.stored(t, loop)
    unit: tuple[int | None, int | None] | None
    if cols is not None:
        pid, device = (None if int(c[0]) == -1 else int(c[0]) for c in (cols["pid"], cols["device"]))
        unit = (pid, device)
    else:
        unit = records_of.record_unit(t, loop)
        cols = records_of.compute(unit_ops(v), loop, unit)
    return anatomy(v, loop, all_params, cols, unit)


def _loop_summary(trace: Trace, info: PhaseInfo, ana: dict[str, Any] | None) -> dict[str, Any]:
    """The report's ``iterations`` object: NVTX's step summary when the step is an NVTX range (its
    keys as before), plus the loop's source, counts, iteration-time percentiles and step anatomy."""
    loop = info.loop
    nv = loop.nvtx or (it.iterations(trace) if loop.source is None else {})
    out: dict[str, Any] = it.compact(nv) if loop.source in ("nvtx", None) else {
        "has_nvtx": trace.has_rows("nvtx"), "range": None, "domain": None}
    if loop.source == "nvtx":
        # NVTX steps keep their projected GPU time as the headline, as before; p99 of it beside.
        out["p99_ns"] = nv.get("p99_ns")
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


def _pairing(ends: list[np.ndarray]) -> list[int]:
    """Per loop, the index shift ``d`` that pairs its iteration ``j`` with the longest loop's ``j + d``.

    Loops of equal length pair by index. A shorter loop (a rank whose capture began or ended an iteration
    or more apart) is placed inside the longest where its iterations' ends, on the absolute clock, lie
    closest to the longest loop's (the smallest median distance; the smallest shift on ties), among the
    shifts that put its first iteration at the longest loop's nearest ones on the clock, or either end."""
    ref = ends[int(np.argmax([len(e) for e in ends]))]
    out = []
    for e in ends:
        room = len(ref) - len(e)
        near = int(np.searchsorted(ref, e[0]))
        cands = sorted({d for d in (0, room, near - 1, near, near + 1) if 0 <= d <= room})
        cost = [float(np.median(np.abs(e - ref[d:d + len(e)]))) for d in cands]
        out.append(cands[int(np.argmin(cost))])
    return out


def _last_per_step(run: Run, infos_p: list[PhaseInfo | None]) -> dict[str, Any] | None:
    """Multi-rank runs: per iteration, which report (rank) finished it last on the absolute clock, and
    by how much after the first. Iterations pair by index when every rank's loop has the same count,
    else as ``_pairing`` aligns them; a step exists where every rank has an iteration."""
    loops = [(t, i.loop) for t, i in zip(run.traces, infos_p, strict=True) if i is not None and len(i.loop)]
    if len(loops) < 2 or any(t.session_start_utc_ns is None for t, _ in loops):
        return None
    # On the clock of the earliest session: start differences, never sums of absolute clocks (int64).
    base = min(int(t.session_start_utc_ns or 0) for t, _ in loops)
    aligned = [lp.ends + (int(t.session_start_utc_ns or 0) - base) for t, lp in loops]
    shift = _pairing(aligned)
    first = max(shift)
    stop = min(d + len(e) for d, e in zip(shift, aligned, strict=True))
    if stop <= first:
        return None
    ends = np.stack([e[first - d:stop - d] for d, e in zip(shift, aligned, strict=True)])
    last = np.argmax(ends, axis=0)
    spread = ends.max(axis=0) - ends.min(axis=0)
    names = [f"rank {t.rank}" if t.rank is not None else t.label for t, _ in loops]
    if len(set(names)) < len(names):  # ranks missing or repeated in the metadata: the reports' labels
        names = [t.label for t, _ in loops]
    counts = np.bincount(last, minlength=len(loops))
    out: dict[str, Any] = {
        "count": int(ends.shape[1]), "last": {names[k]: int(c) for k, c in enumerate(counts)},
        "spread_median_ns": float(np.median(spread)),
        "items": [{"index": j, "last": names[int(last[j])], "spread_ns": int(spread[j])}
                  for j in range(min(ends.shape[1], ITEMS))]}
    if any(d != first for d in shift):  # not paired by index: each report's first iteration of step 0
        out["first_iteration"] = {names[k]: first - d for k, d in enumerate(shift)}
    # Per report: its iteration index -> (rank that finished that step last, spread), for its records.
    out["_by_report"] = {t.label: (first - d, [names[int(k)] for k in last], spread)
                         for (t, _), d in zip(loops, shift, strict=True)}
    return out


def _mark_last(infos: list[dict[str, Any]], steps: dict[str, Any]) -> None:
    """Each report's per-iteration records gain ``last`` (the rank that finished that step last on the
    absolute clock) and ``spread_ns`` (how long after the first it did), where the step exists."""
    by_report = steps.pop("_by_report")
    for info in infos:
        hit = by_report.get(info["file"])
        ana = (info.get("iterations") or {}).get("anatomy")
        if hit is None or ana is None:
            continue
        at, last, spread = hit
        for rec in (*ana["records"], *ana["slowest_steps"]):
            j = rec["index"] - at
            if 0 <= j < len(last):
                rec["last"], rec["spread_ns"] = last[j], int(spread[j])


def _align(run: Run, bounds: list[tuple[int, int] | None]) -> list[tuple[int, int] | None]:
    """Several nsys reports with absolute clocks: one steady window for all, the intersection of theirs
    on the absolute time base (when they overlap), so that ranks are judged over the same stretch."""
    starts = [t.session_start_utc_ns for t in run.traces]
    known = [b for b in bounds if b is not None]
    clocks = [s for s in starts if s is not None]
    if len(run.traces) < 2 or len(known) < len(bounds) or len(clocks) < len(starts):
        return bounds
    # Offsets from the earliest session start (Python integers: exact whatever the clocks).
    base = min(clocks)
    off = [s - base for s in clocks]
    lo = max(b[0] + o for b, o in zip(known, off, strict=True))
    hi = min(b[1] + o for b, o in zip(known, off, strict=True))
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
            infos: list[dict[str, Any]] = []
            for t, v, i, (phase, b, reason) in zip(run.traces, views, infos_p, resolved, strict=True):
                info = report_info(t)
                if i is not None:
                    info["breakdown"] = bd.breakdown(v)
                    ana = _anatomy(t, v, i, all_params)
                    info["iterations"] = _loop_summary(t, i, ana)
                    nvtx = nvtx_projection(v, limit=10)
                    info["nvtx"] = {"has_nvtx": nvtx["has_nvtx"], "top_ranges": nvtx["ranges"]}
                    info["launches"] = launch_summary(v)
                    info["phases"] = [p.to_dict() for p in i.phases]
                elif t.tool == "ncu":  # the per-kernel memory story, weighted by nsys time
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
    findings = [_per_step(_placed(f, phase_by_label, paced, spec.text), infos) for f in findings]
    ranked = rank_findings(findings)
    if top is not None:
        ranked = ranked[:top]
    out: dict[str, Any] = {
        "window": spec.text,
        "reports": infos,
        "findings": [f.to_dict() for f in ranked],
        "rules": [r.to_dict() for r in results],
    }
    if steps is not None:
        _mark_last(infos, steps)
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


def _per_step(f: Finding, infos: list[dict[str, Any]]) -> Finding:
    """A finding judged on a window that is a stretch of the loop (the steady state, or iterations A to B)
    gains its impact per step: the impact
    over the number of iterations wholly inside the window (``impact_per_step_ns``, ``steps_in_window``).
    Report-level findings use their report's iterations; run-level ones, when every nsys report's window
    holds iterations, the fewest of them (the steps all ranks went through). Findings about another phase
    (start-up, warm-up) stay totals."""
    counts = {}
    for info in infos:
        ana = (info.get("iterations") or {}).get("anatomy")
        if ana and ana.get("steady_count") and info["window"]["phase"] in LOOP_WINDOWS:
            counts[info["file"]] = (int(ana["steady_count"]), info["window"]["phase"])
    if f.report is not None:
        hit = counts.get(f.report)
    else:
        nsys = [info["file"] for info in infos if info.get("tool") == "nsys"]
        hit = min((counts[n] for n in nsys), default=None) if nsys and all(n in counts for n in nsys) else None
        hit = (hit[0], f.phase) if hit else None
    if hit is None or hit[1] != f.phase or not f.impact_ns:
        return f
    n = hit[0]
    return dataclasses.replace(f, extra={**f.extra, "impact_per_step_ns": int(round(f.impact_ns / n)),
                                         "steps_in_window": n})
