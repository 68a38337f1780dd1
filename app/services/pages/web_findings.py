"""Findings of a run seen by rank: one row per rule with a per-rank breakdown, the rank x rule impact matrix,
the "minor" cut, and the names ranks go by on the page ("rank 3 · ault44 · GPU 0")."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from analysis.api import ToolKind, short_host
from app.models import Report

MINOR_NS = 5_000              # findings below this impact are listed under "minor"
STANDOUT_RATIO = 2.0          # a rank "stands out" when its impact is at least this times the next rank's
SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}


def report_label(report: Report) -> str:
    """``rank 3 · ault44 · GPU 0``: rank, short host and GPUs of a report; its file name when it has neither."""
    info = report.info or {}
    parts = []
    if report.rank is not None:
        parts.append(f"rank {report.rank}")
    host = short_host(report.host or info.get("host"))
    if host:
        parts.append(host)
    devices = [d.get("id", d.get("device")) for d in info.get("devices") or [] if isinstance(d, dict)]
    devices = [d for d in devices if d is not None]
    if devices:
        parts.append("GPU " + ",".join(str(d) for d in devices))
    if report.rank is None and not host:
        parts.insert(0, short_file_name(report.name))
    return " · ".join(parts)


def short_file_name(name: str, limit: int = 32) -> str:
    """A file name short enough for a label, never cut mid-word: its extension dropped and, when still longer
    than ``limit``, "…" and its end from a separator on ("…numba-copy-blocked-full")."""
    stem = re.sub(r"\.(sqlite|csv|nsys-rep|ncu-rep)(\.(gz|zst|zstd))?$", "", name)
    if len(stem) <= limit:
        return stem
    tail = stem[-limit:]
    cut = re.search(r"[_\-.\s]+", tail)
    return "…" + (tail[cut.end():] if cut and cut.end() < len(tail) else tail)


def rank_key(finding: dict[str, Any], reports: list[Report]) -> str:
    """The page's name for where a finding is: its report's label, else its rank's report, else the run."""
    by_id = {r.id: r for r in reports}
    if finding.get("report_id") in by_id:
        return report_label(by_id[finding["report_id"]])
    rank = finding.get("rank")
    if rank is not None:
        same = [r for r in reports if r.rank == rank]
        return report_label(same[0]) if same else f"rank {rank}"
    return "whole run"


@dataclass
class RuleRow:
    """One rule's findings across the ranks of a run."""

    rule_id: str
    severity: str
    title: str
    impact_ns: int                           # the largest per-rank impact (ranks run side by side)
    total_ns: int                            # the sum over ranks
    per_rank: list[dict[str, Any]] = field(default_factory=list)   # {rank, impact_ns, share}
    findings: list[dict[str, Any]] = field(default_factory=list)   # finding dicts, largest impact first
    standout: str | None = None
    ranks: list[str] = field(default_factory=list)

    @property
    def is_minor(self) -> bool:
        return self.impact_ns < MINOR_NS


def rule_rows(findings: list[dict[str, Any]], reports: list[Report]) -> list[RuleRow]:
    """Findings grouped by rule, largest per-rank impact first; each finding gets its ``rank_label``."""
    rows: dict[str, RuleRow] = {}
    for f in findings:
        f["rank_label"] = rank_key(f, reports)
        row = rows.get(f["rule_id"])
        if row is None:
            row = rows[f["rule_id"]] = RuleRow(f["rule_id"], f["severity"], f["title"], 0, 0)
        row.findings.append(f)
        if SEVERITY_ORDER.get(f["severity"], 9) < SEVERITY_ORDER.get(row.severity, 9):
            row.severity = f["severity"]
    for row in rows.values():
        row.findings.sort(key=lambda f: -(f["impact_ns"] or 0))
        row.title = row.findings[0]["title"]
        sums: dict[str, int] = {}
        for f in row.findings:
            sums[f["rank_label"]] = sums.get(f["rank_label"], 0) + int(f["impact_ns"] or 0)
        ranked = sorted(sums.items(), key=lambda kv: -kv[1])
        row.total_ns = sum(sums.values())
        row.impact_ns = ranked[0][1] if ranked else 0
        row.per_rank = [{"rank": k, "impact_ns": v, "share": (v / row.total_ns) if row.total_ns else 0.0}
                        for k, v in ranked]
        row.ranks = [k for k, _ in ranked]
        if len(ranked) > 1 and ranked[0][1] > 0 and ranked[0][1] >= STANDOUT_RATIO * ranked[1][1]:
            row.standout = ranked[0][0]
    return sorted(rows.values(), key=lambda r: (-r.impact_ns, SEVERITY_ORDER.get(r.severity, 9), r.rule_id))


def impact_matrix(rows: list[RuleRow], reports: list[Report]) -> dict[str, Any] | None:
    """Rank x rule summed impact (ns) for runs with more than one rank; None otherwise."""
    ranks = [report_label(r) for r in reports if r.kind == ToolKind.NSYS]
    for row in rows:
        ranks += [k for k in row.ranks if k not in ranks]
    ranks = list(dict.fromkeys(ranks))
    if len(ranks) < 2 or not rows:
        return None
    cells = [[next((p["impact_ns"] for p in row.per_rank if p["rank"] == rank), None) for row in rows]
             for rank in ranks]
    top = max((c for line in cells for c in line if c), default=0)
    return {"ranks": ranks, "rules": [r.rule_id for r in rows], "cells": cells, "max_ns": top}
