"""Comparing two runs: breakdown diff, per-kernel time diff above a noise floor, new and resolved findings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from analysis.trace import Trace
from app.models import Finding, Report, ReportStatus, RunSummary
from app.services.findings import finding_to_dict
from app.services.runs import get_run

KERNEL_LIMIT = 500          # kernels read per report (by total time)
BREAKDOWN_KEYS = ("span_ns", "compute_ns", "comm_exposed_ns", "memory_only_ns", "idle_ns", "goodput_pct")
MAX_KERNEL_ROWS = 100       # kernel diffs returned
# A kernel's change is noise unless it exceeds both the relative floor (of its larger time) and an
# absolute floor relative to the runs' kernel time: run-to-run jitter scales with both.
DEFAULT_NOISE_PCT = 5.0
ABS_FLOOR_SHARE = 0.001


def kernel_totals(trace_path: Path, limit: int = KERNEL_LIMIT) -> list[dict[str, Any]]:
    """Total time and launches per kernel name in one ingested report (read-only), largest first."""
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


def _kernels(session: Session, data_dir: Path, run_id: int) -> dict[str, dict[str, int]]:
    """Kernel totals of the run's ready reports, from their DuckDB files (read-only); the summary's
    top kernels when a file is gone."""
    out: dict[str, dict[str, int]] = {}
    rows = session.execute(sa.select(Report.trace_path, Report.info).where(
        Report.run_id == run_id, Report.status == ReportStatus.READY).order_by(Report.id)).all()
    for trace_path, info in rows:
        path = Path(data_dir) / trace_path if trace_path else None
        kernels = kernel_totals(path) if path is not None and path.is_file() else (info or {}).get(
            "top_kernels", [])
        for k in kernels:
            acc = out.setdefault(k["name"], {"total_ns": 0, "count": 0})
            acc["total_ns"] += int(k["total_ns"])
            acc["count"] += int(k["count"])
    return out


def _totals(session: Session, run_id: int) -> dict[str, Any]:
    row = session.scalar(sa.select(RunSummary).where(RunSummary.run_id == run_id,
                                                     RunSummary.report_id.is_(None)))
    return {k: (getattr(row, k) if row is not None else None) for k in BREAKDOWN_KEYS}


def _delta(base: Any, head: Any) -> dict[str, Any]:
    delta = None if base is None or head is None else head - base
    pct = None if delta is None or not base else round(100.0 * delta / base, 3)
    return {"base": base, "head": head, "delta": delta, "delta_pct": pct}


def fingerprint(f: Finding) -> tuple:
    """What makes two findings 'the same problem' across runs: rule, rank and the first evidence name."""
    first = (f.evidence or [{}])[0] if f.evidence else {}
    return (f.rule_id, f.rank, first.get("name") if isinstance(first, dict) else None)


def compare_runs(session: Session, data_dir: Path, base_id: int, head_id: int, *,
                 noise_pct: float = DEFAULT_NOISE_PCT) -> dict[str, Any]:
    """The difference head − base. Kernel rows whose change is under the noise floor are counted, not listed."""
    base, head = get_run(session, base_id), get_run(session, head_id)
    bt, ht = _totals(session, base.id), _totals(session, head.id)
    bk, hk = _kernels(session, data_dir, base.id), _kernels(session, data_dir, head.id)
    floor_abs = ABS_FLOOR_SHARE * max(sum(k["total_ns"] for k in bk.values()),
                                      sum(k["total_ns"] for k in hk.values()))
    kernels, hidden = [], 0
    for name in sorted(set(bk) | set(hk)):
        b, h = bk.get(name, {"total_ns": 0, "count": 0}), hk.get(name, {"total_ns": 0, "count": 0})
        delta = h["total_ns"] - b["total_ns"]
        larger = max(b["total_ns"], h["total_ns"])
        if abs(delta) <= floor_abs or abs(delta) <= noise_pct / 100.0 * larger:
            hidden += 1
            continue
        kernels.append({"name": name, "base_ns": b["total_ns"], "head_ns": h["total_ns"], "delta_ns": delta,
                        "delta_pct": round(100.0 * delta / b["total_ns"], 3) if b["total_ns"] else None,
                        "base_count": b["count"], "head_count": h["count"]})
    kernels.sort(key=lambda k: (-abs(k["delta_ns"]), k["name"]))
    bf = list(session.scalars(sa.select(Finding).where(Finding.run_id == base.id)))
    hf = list(session.scalars(sa.select(Finding).where(Finding.run_id == head.id)))
    bkeys, hkeys = {fingerprint(f) for f in bf}, {fingerprint(f) for f in hf}
    by_impact = lambda f: (-f.impact_ns, f.id)  # noqa: E731
    return {
        "base": base.id,
        "head": head.id,
        "breakdown": {k: _delta(bt[k], ht[k]) for k in BREAKDOWN_KEYS},
        "noise": {"pct": noise_pct, "abs_ns": int(floor_abs), "kernels_below_noise": hidden},
        "kernels": kernels[:MAX_KERNEL_ROWS],
        "new_findings": [finding_to_dict(f) for f in sorted(hf, key=by_impact) if fingerprint(f) not in bkeys],
        "resolved_findings": [finding_to_dict(f) for f in sorted(bf, key=by_impact)
                              if fingerprint(f) not in hkeys],
    }
