"""Iterations of a report: the repeating NVTX range (a training step), with per-iteration GPU time and spread."""

from __future__ import annotations

import re
import statistics
from typing import Any

from analysis.nvtx_projection import projected_table
from analysis.trace import Trace

# Names people give their step ranges; preferred when several ranges repeat.
STEP_NAME = re.compile(r"step|iter|batch|epoch", re.IGNORECASE)
MIN_ITERATIONS = 3


def iterations(trace: Trace, max_items: int = 500) -> dict[str, Any]:
    """Per-iteration times from the repeating NVTX range that best looks like a step.

    Candidates are range names (domain + text) seen at least 3 times that launched GPU work; a name
    that says step/iter/batch/epoch wins, then the one covering the most host time. Returns
    ``{has_nvtx, range, domain, count, items: [{index, start_ns, end_ns, cpu_ns, gpu_start_ns, gpu_end_ns,
    gpu_ns, gpu_op_ns, gpu_ops}], mean_ns, median_ns, min_ns, max_ns, stdev_ns, cv_pct, reason}``
    where ``gpu_ns`` is the projected GPU duration of one iteration and the statistics are over it.
    ``items`` is capped at ``max_items``. Without NVTX or without a repeating range, ``range`` is None
    and ``reason`` says why.
    """
    empty = {"has_nvtx": trace.has_rows("nvtx"), "range": None, "domain": None, "count": 0, "items": []}
    if not empty["has_nvtx"]:
        return {**empty, "reason": "the report has no NVTX ranges; annotate the training step with NVTX"}
    table = projected_table(trace)
    cands = trace.sql(f"""
        SELECT domain, text, COUNT(*) AS n, SUM(end_ns - start_ns) AS cpu FROM {table}
        WHERE gpu_ops > 0 AND text IS NOT NULL GROUP BY domain, text HAVING COUNT(*) >= {MIN_ITERATIONS}""")  # noqa: S608
    if not cands:
        return {**empty, "reason": f"no NVTX range repeats {MIN_ITERATIONS}+ times with GPU work"}
    domain, text, _, _ = max(cands, key=lambda c: (bool(STEP_NAME.search(c[1])), int(c[3]), int(c[2])))
    rows = trace.sql(f"""
        SELECT start_ns, end_ns, gpu_start, gpu_end, gpu_op_ns, gpu_ops FROM {table}
        WHERE text = $text AND domain IS NOT DISTINCT FROM $domain AND gpu_ops > 0
        ORDER BY start_ns""", {"text": text, "domain": domain})  # noqa: S608
    items = [{"index": i, "start_ns": int(r[0]), "end_ns": int(r[1]), "cpu_ns": int(r[1] - r[0]),
              "gpu_start_ns": int(r[2]), "gpu_end_ns": int(r[3]), "gpu_ns": int(r[3] - r[2]),
              "gpu_op_ns": int(r[4]), "gpu_ops": int(r[5])} for i, r in enumerate(rows)]
    gpu = [it["gpu_ns"] for it in items]
    mean = statistics.fmean(gpu)
    stdev = statistics.pstdev(gpu)
    return {
        "has_nvtx": True, "range": text, "domain": domain, "count": len(items), "items": items[:max_items],
        "mean_ns": mean, "median_ns": float(statistics.median(gpu)), "min_ns": min(gpu), "max_ns": max(gpu),
        "stdev_ns": stdev, "cv_pct": round(100.0 * stdev / mean, 3) if mean else 0.0, "reason": None,
    }


def compact(it: dict[str, Any]) -> dict[str, Any]:
    """The iteration summary without the per-iteration list (for the CLI JSON)."""
    return {k: v for k, v in it.items() if k != "items"}
