"""The job page's metric picker: per-rule impact and per-kernel time of each run, per step when
every run counted steps; series in the shape ``JobTrends.series`` returns, with date and git sha per point."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from analysis.api import short_kernel_name
from app.models import Finding, RunSummary
from app.services.web_jobs import JobTrends

TOP_KERNELS = 10


def point_axis(p: Any) -> dict[str, Any]:
    """What the x axis says under a run: its date and short git sha."""
    return {"date": f"{p.created_at:%m-%d}", "sha": (p.git_sha or "")[:7]}


def metrics(session: Session, trends: JobTrends, href: Any) -> dict[str, dict[str, Any]]:
    """metric id -> series: ``rule:ID`` (that rule's impact in each run) and ``kernel:NAME`` (its time per run)."""
    ids = [p.run_id for p in trends.points]
    if not ids:
        return {}
    per_step = trends.per_iteration
    divisor = {p.run_id: (p.iterations or 1) if per_step else 1 for p in trends.points}
    analyzed = {p.run_id for p in trends.points if p.goodput_pct is not None}
    rules: dict[str, dict[int, int]] = {}
    for run_id, rule, total in session.execute(
            sa.select(Finding.run_id, Finding.rule_id, sa.func.sum(Finding.impact_ns))
            .where(Finding.run_id.in_(ids)).group_by(Finding.run_id, Finding.rule_id)):
        rules.setdefault(rule, {})[run_id] = int(total)
    kernels: dict[str, dict[int, int]] = {}
    for s in session.scalars(sa.select(RunSummary).where(RunSummary.run_id.in_(ids),
                                                        RunSummary.report_id.is_not(None))):
        for k in (s.data or {}).get("top_kernels") or []:
            acc = kernels.setdefault(k.get("name") or "", {})
            acc[s.run_id] = acc.get(s.run_id, 0) + int(k.get("total_ns") or 0)
    top = sorted(kernels, key=lambda n: -max(kernels[n].values()))[:TOP_KERNELS]
    suffix = " per step" if per_step else " per run"

    def series(label: str, values: dict[int, int]) -> dict[str, Any]:
        return {"label": label + suffix, "unit": "ns", "points": [
            {"x_label": f"#{p.run_id} {p.created_at:%Y-%m-%d %H:%M}", **point_axis(p),
             # A rule that did not fire in an analyzed run cost nothing there: 0, not a gap in the line.
             "value": (values.get(p.run_id, 0) / divisor[p.run_id]) if p.run_id in analyzed or p.run_id in values
             else None, "href": href(p.run_id), "regressed": False} for p in trends.points]}

    out = {f"rule:{r}": series(f"{r} impact", rules[r]) for r in sorted(rules)}
    out.update({f"kernel:{n}": series(f"kernel {short_kernel_name(n, 60)}", kernels[n]) for n in top})
    return out
