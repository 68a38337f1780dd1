"""Comparing two runs (head − base) from plain data: KPI deltas, per-kernel deltas above a noise floor,
new and resolved findings, per rank and per step; the service's compare and `goodput diff` both call it.

A run side is a ``RunFacts``: the analysis' report dicts (``analysis.api.analyze(...)["reports"]``, the
same dicts the service stores), kernel totals per report (``kernel_totals`` on the DuckDB files) and
the findings as dicts in ranking order. Nothing here reads a database other than a report's DuckDB file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KERNEL_LIMIT = 500          # kernels read per report (by total time)
BREAKDOWN_KEYS = ("span_ns", "compute_ns", "comm_exposed_ns", "memory_only_ns", "idle_ns", "goodput_pct")
SUM_KEYS = BREAKDOWN_KEYS[:-1]
MAX_KERNEL_ROWS = 100       # kernel diffs returned
# A kernel's change is noise unless it exceeds both the relative floor (of its larger time) and an
# absolute floor relative to the runs' kernel time: run-to-run jitter scales with both.
DEFAULT_NOISE_PCT = 5.0
ABS_FLOOR_SHARE = 0.001
# The step statistics compared per rank (from ``analysis.iterations``; GPU time per step).
STEP_KEYS = ("count", "median_ns", "p10_ns", "p90_ns", "min_ns", "max_ns")


@dataclass
class RunFacts:
    """One side of a comparison. ``id``: the run id or a label; ``totals``: the run's breakdown when the
    caller has it stored (else summed from ``reports`` by ``run_totals``)."""

    id: Any
    reports: list[dict[str, Any]] = field(default_factory=list)
    kernels: dict[str, dict[str, int]] = field(default_factory=dict)
    findings: list[dict[str, Any]] = field(default_factory=list)
    totals: dict[str, Any] | None = None


def kernel_totals(trace_path: Path, limit: int = KERNEL_LIMIT) -> list[dict[str, Any]]:
    """Total time and launches per kernel name in one ingested report (read-only), largest first."""
    from analysis.trace import Trace

    trace = Trace(Path(trace_path), Path(trace_path).name)
    try:
        if not trace.has_rows("kernels"):
            return []
        rows = trace.sql(
            "SELECT name, SUM(end_ns - start_ns)::BIGINT AS total_ns, COUNT(*) AS n FROM kernels "
            "GROUP BY name ORDER BY total_ns DESC, name LIMIT ?", [int(limit)])
    finally:
        trace.close()
    return [{"name": name, "total_ns": int(total), "count": int(n)} for name, total, n in rows]


def merge_kernels(per_report: Iterable[Iterable[Mapping[str, Any]]]) -> dict[str, dict[str, int]]:
    """Kernel totals of several reports (the ranks of a run) summed by name."""
    out: dict[str, dict[str, int]] = {}
    for kernels in per_report:
        for k in kernels:
            acc = out.setdefault(str(k["name"]), {"total_ns": 0, "count": 0})
            acc["total_ns"] += int(k["total_ns"])
            acc["count"] += int(k["count"])
    return out


def breakdown_value(data: Mapping[str, Any], key: str) -> int | float | None:
    """A breakdown number of a report (or run) dict: from its ``breakdown``, else its top level."""
    raw = data.get("breakdown")
    bd: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
    for source in (bd, data):
        value = source.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value
    return None


def report_breakdown(report: Mapping[str, Any]) -> dict[str, Any]:
    """One report's breakdown KPIs (``None`` where the analysis had none)."""
    return {k: breakdown_value(report, k) for k in BREAKDOWN_KEYS}


def run_totals(reports: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The run's KPIs: the ranks' times summed (span too: GPU time across ranks), goodput from the sums.

    The same arithmetic as the service's per-run summary row (``app.services.pipeline``).
    """
    out: dict[str, Any] = {}
    for key in SUM_KEYS:
        values = [int(v) for v in (breakdown_value(r, key) for r in reports) if v is not None]
        out[key] = sum(values) if values else None
    out["goodput_pct"] = (round(100.0 * out["compute_ns"] / out["span_ns"], 3)
                          if out["span_ns"] and out["compute_ns"] is not None else None)
    return out


def delta(base: Any, head: Any) -> dict[str, Any]:
    d = None if base is None or head is None else head - base
    pct = None if d is None or not base else round(100.0 * d / base, 3)
    return {"base": base, "head": head, "delta": d, "delta_pct": pct}


def fingerprint(f: Mapping[str, Any]) -> tuple:
    """What makes two findings 'the same problem' across runs: rule, rank and the first evidence name."""
    evidence = f.get("evidence") or []
    first = evidence[0] if evidence else {}
    return (f.get("rule_id"), f.get("rank"), first.get("name") if isinstance(first, dict) else None)


def diff_kernels(bk: Mapping[str, Mapping[str, int]], hk: Mapping[str, Mapping[str, int]],
                 noise_pct: float = DEFAULT_NOISE_PCT) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Kernel rows whose change passes the noise floor, largest change first; and the floor itself."""
    floor_abs = ABS_FLOOR_SHARE * max(sum(k["total_ns"] for k in bk.values()),
                                      sum(k["total_ns"] for k in hk.values()))
    rows: list[dict[str, Any]] = []
    hidden = 0
    zero = {"total_ns": 0, "count": 0}
    for name in sorted(set(bk) | set(hk)):
        b, h = bk.get(name, zero), hk.get(name, zero)
        d = h["total_ns"] - b["total_ns"]
        larger = max(b["total_ns"], h["total_ns"])
        if abs(d) <= floor_abs or abs(d) <= noise_pct / 100.0 * larger:
            hidden += 1
            continue
        rows.append({"name": name, "base_ns": b["total_ns"], "head_ns": h["total_ns"], "delta_ns": d,
                     "delta_pct": round(100.0 * d / b["total_ns"], 3) if b["total_ns"] else None,
                     "base_count": b["count"], "head_count": h["count"]})
    rows.sort(key=lambda k: (-abs(k["delta_ns"]), k["name"]))
    return rows[:MAX_KERNEL_ROWS], {"pct": noise_pct, "abs_ns": int(floor_abs), "kernels_below_noise": hidden}


def diff_findings(base: list[dict[str, Any]], head: list[dict[str, Any]]) -> tuple[list, list]:
    """(new in head, resolved since base), each largest impact first (ties: ranking order)."""
    bkeys, hkeys = {fingerprint(f) for f in base}, {fingerprint(f) for f in head}

    def by_impact(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return sorted(items, key=lambda f: -int(f.get("impact_ns") or 0))  # stable: ranking order on ties

    return ([f for f in by_impact(head) if fingerprint(f) not in bkeys],
            [f for f in by_impact(base) if fingerprint(f) not in hkeys])


def _keys(reports: list[dict[str, Any]], by_rank: bool) -> list[tuple[str, Any]]:
    return [("rank", r.get("rank")) if by_rank else ("report", i) for i, r in enumerate(reports)]


def _has_ranks(reports: list[dict[str, Any]]) -> bool:
    ranks = [r.get("rank") for r in reports]
    return all(isinstance(x, int) for x in ranks) and len(set(ranks)) == len(ranks)


def _steps(report: Mapping[str, Any]) -> dict[str, Any] | None:
    raw = report.get("iterations")
    it: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
    return {k: it.get(k) for k in STEP_KEYS} if it.get("count") else None


def diff_ranks(base: list[dict[str, Any]], head: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per rank: breakdown deltas, and step deltas when both have steps. Reports pair by rank when every
    report of both runs has its own rank, else by position (one report each: those two)."""
    by_rank = _has_ranks(base) and _has_ranks(head)
    bmap = dict(zip(_keys(base, by_rank), base, strict=True))
    hmap = dict(zip(_keys(head, by_rank), head, strict=True))
    out = []
    for key in sorted(set(bmap) | set(hmap), key=lambda k: k[1]):
        b, h = bmap.get(key), hmap.get(key)
        bb = report_breakdown(b) if b else dict.fromkeys(BREAKDOWN_KEYS)
        hb = report_breakdown(h) if h else dict.fromkeys(BREAKDOWN_KEYS)
        bs, hs = (_steps(b) if b else None), (_steps(h) if h else None)
        out.append({
            "rank": key[1] if key[0] == "rank" else None,
            "report": key[1] if key[0] == "report" else None,
            "base_file": (b or {}).get("file"), "head_file": (h or {}).get("file"),
            "breakdown": {k: delta(bb[k], hb[k]) for k in BREAKDOWN_KEYS},
            "steps": ({k: delta(bs[k], hs[k]) for k in STEP_KEYS} if bs and hs else None),
        })
    return out


def step_time(reports: Sequence[Mapping[str, Any]]) -> float | None:
    """The run's step time: the largest per-rank median GPU time per step (the slowest rank sets the pace)."""
    values = [s["median_ns"] for s in (_steps(r) for r in reports) if s and s.get("median_ns") is not None]
    return max(values) if values else None


def compare(base: RunFacts, head: RunFacts, *, noise_pct: float = DEFAULT_NOISE_PCT) -> dict[str, Any]:
    """The difference head − base. Kernel rows under the noise floor are counted, not listed."""
    bt = base.totals if base.totals is not None else run_totals(base.reports)
    ht = head.totals if head.totals is not None else run_totals(head.reports)
    kernels, noise = diff_kernels(base.kernels, head.kernels, noise_pct)
    new, resolved = diff_findings(base.findings, head.findings)
    return {
        "base": base.id,
        "head": head.id,
        "breakdown": {k: delta(bt.get(k), ht.get(k)) for k in BREAKDOWN_KEYS},
        "step_time_ns": delta(step_time(base.reports), step_time(head.reports)),
        "noise": noise,
        "kernels": kernels,
        "new_findings": new,
        "resolved_findings": resolved,
        "ranks": diff_ranks(base.reports, head.reports),
    }
