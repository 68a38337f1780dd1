"""Analyze a run: per-report summaries, all selected rules, findings ranked by impact."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from analysis import breakdown as bd
from analysis import iterations as it
from analysis.findings import rank_findings
from analysis.launches import launch_summary
from analysis.ncu.kernels import report_kernels
from analysis.nvtx_projection import nvtx_projection
from analysis.rules.base import run_rules
from analysis.rules.registry import default_registry
from analysis.summary import report_info
from analysis.trace import DUCKDB_MEMORY_BYTES, Run, Trace


def _with_summaries(info: dict[str, Any], trace: Trace) -> dict[str, Any]:
    """An nsys report's info plus its time breakdown (with per-device parts) and compact NVTX summaries."""
    if trace.tool != "nsys":
        return info
    info["breakdown"] = bd.breakdown(trace)
    info["iterations"] = it.compact(it.iterations(trace))
    nvtx = nvtx_projection(trace, limit=10)
    info["nvtx"] = {"has_nvtx": nvtx["has_nvtx"], "top_ranges": nvtx["ranges"]}
    info["launches"] = launch_summary(trace)  # stream vs CUDA graph launches (issue #14)
    return info


def analyze_run(
    reports: list[Path], *, labels: list[str] | None = None, rules: list[str] | None = None,
    thresholds: Mapping[str, float] | None = None, top: int | None = None, memory_bytes: int = DUCKDB_MEMORY_BYTES,
) -> dict[str, Any]:
    """See ``analysis.api.analyze``."""
    registry = default_registry()
    registry.validate_overrides(thresholds)
    selected = registry.select(rules)
    with Run.open([Path(p) for p in reports], labels, memory_bytes) as run:
        infos = [_with_summaries(report_info(t), t) for t in run.traces]
        for info, t in zip(infos, run.traces, strict=True):
            if t.tool == "ncu":  # the per-kernel memory story, weighted by nsys time (issue #17)
                info["kernels"] = report_kernels(t, run)
        findings, results = run_rules(run, registry, selected, thresholds)
    ranked = rank_findings(findings)
    if top is not None:
        ranked = ranked[:top]
    return {
        "reports": infos,
        "findings": [f.to_dict() for f in ranked],
        "rules": [r.to_dict() for r in results],
    }
