"""Analyze a run: per-report summaries, all selected rules, findings ranked by impact."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from analysis.findings import rank_findings
from analysis.rules.base import run_rules
from analysis.rules.registry import default_registry
from analysis.summary import report_info
from analysis.trace import Run


def analyze_run(
    reports: list[Path], *, labels: list[str] | None = None, rules: list[str] | None = None,
    thresholds: Mapping[str, float] | None = None, top: int | None = None,
) -> dict[str, Any]:
    """See ``analysis.api.analyze``."""
    registry = default_registry()
    registry.validate_overrides(thresholds)
    selected = registry.select(rules)
    with Run.open([Path(p) for p in reports], labels) as run:
        infos = [report_info(t) for t in run.traces]
        findings, results = run_rules(run, registry, selected, thresholds)
    ranked = rank_findings(findings)
    if top is not None:
        ranked = ranked[:top]
    return {
        "reports": infos,
        "findings": [f.to_dict() for f in ranked],
        "rules": [r.to_dict() for r in results],
    }
