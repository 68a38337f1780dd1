"""Read-side queries behind the job page: trends over a job's runs and regressions against the recent median."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from analysis.api import fmt
from app.models import Finding, Job
from app.services.reads import run_repo
from app.services.reads.run_repo import get_job
from app.services.reads.summaries import Headline

TREND_RUNS = 100        # most recent runs drawn
MEDIAN_WINDOW = 5       # a run is judged against the median of the runs just before it
# A regression is a drop of goodput by more than this many points, or a rise of the step time (GPU
# time per run when a run counted no steps) or exposed communication by more than this share, against that median.
GOODPUT_DROP_PTS = 5.0
RISE_PCT = 10.0


@dataclass(frozen=True)
class TopRule:
    """A rule with the most impact over the job's runs: its impact per run (a run's findings of the rule
    summed), median over the runs it fired in and in the latest of them."""

    rule_id: str
    title: str
    runs: int
    median_ns: int
    latest_ns: int
    latest_run: int


@dataclass
class JobPoint:
    run_id: int
    created_at: Any
    git_sha: str | None
    goodput_pct: float | None
    gpu_time_ns: int | None
    iterations: int | None
    gpu_time_per_iter_ns: float | None   # the run page's step time (every run has steps), else GPU time per run
    exposed_comm_ns: int | None
    regressed: list[str] = field(default_factory=list)       # why, in words
    regressed_on: list[str] = field(default_factory=list)    # which series: goodput | time | comm
    rule_errors: list[str] = field(default_factory=list)     # rules that crashed: "ready with errors"
    headline: Headline = field(default_factory=Headline)     # the run's headline numbers (its per-run summary)


@dataclass
class JobTrends:
    job: Job
    points: list[JobPoint]
    top_rules: list[TopRule]
    per_iteration: bool
    rule_impact: dict[str, dict[int, int]] = field(default_factory=dict)   # rule -> run id -> its findings' impact

    def series(self, attr: str, key: str, label: str, unit: str, href: Any) -> dict[str, Any]:
        """One trend chart's data: a point per run (``href(run_id)`` links it), regressions marked."""
        return {"label": label, "unit": unit, "points": [
            {"x_label": f"#{p.run_id} {p.created_at:%Y-%m-%d %H:%M}", "value": getattr(p, attr),
             "date": f"{p.created_at:%m-%d}", "time": f"{p.created_at:%H:%M}", "sha": (p.git_sha or "")[:7],
             "href": href(p.run_id), "regressed": key in p.regressed_on} for p in self.points]}


def _regressions(p: JobPoint, prev: list[JobPoint]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []

    def median(attr: str) -> float | None:
        vals = [getattr(q, attr) for q in prev if getattr(q, attr) is not None]
        return statistics.median(vals) if vals else None

    m = median("goodput_pct")
    if m is not None and p.goodput_pct is not None and p.goodput_pct < m - GOODPUT_DROP_PTS:
        out.append(("goodput", f"goodput {fmt.pct(p.goodput_pct)} vs median {fmt.pct(m)}"))
    for attr, series, label in (("gpu_time_per_iter_ns", "time", "step time"),
                                ("exposed_comm_ns", "comm", "exposed comm")):
        m = median(attr)
        v = getattr(p, attr)
        if m and v is not None and v > m * (1 + RISE_PCT / 100.0):
            out.append((series, f"{label} {fmt.signed(fmt.share(100.0 * (v - m) / m), v - m)} vs median"))
    return out


def _rule_errors(statuses: Any) -> list[str]:
    return [f"{r.get('id')}: {r.get('reason') or 'error'}" for r in statuses or [] if r.get("status") == "error"]


def job_trends(session: Session, name: str, tag: str | None = None) -> JobTrends:
    """The job's most recent runs (oldest first, those with ``tag`` when given) with headline numbers and
    regression marks."""
    job = get_job(session, name)
    history = run_repo.job_history(session, job, limit=TREND_RUNS, tag=tag)
    ids = [h.run_id for h in history]
    analyzed = [h for h in history if h.analyzed]
    # The run page's time per step when every analyzed run has one; else GPU time per run.
    per_iteration = bool(analyzed) and all(h.iterations and h.step_time_ns for h in analyzed)
    points: list[JobPoint] = []
    for h in history:
        if not h.analyzed:
            points.append(JobPoint(h.run_id, h.created_at, h.git_sha, None, None, None, None, None,
                                   rule_errors=_rule_errors(h.rule_statuses), headline=h.headline))
            continue
        p = JobPoint(h.run_id, h.created_at, h.git_sha, h.headline.goodput_pct, h.headline.span_ns, h.iterations,
                     h.step_time_ns if per_iteration else h.headline.span_ns,
                     h.headline.comm_exposed_ns or 0, rule_errors=_rule_errors(h.rule_statuses), headline=h.headline)
        found = _regressions(p, [q for q in points if q.goodput_pct is not None][-MEDIAN_WINDOW:])
        p.regressed = [why for _, why in found]
        p.regressed_on = [series for series, _ in found]
        points.append(p)
    # Impact per run (a rule's findings summed within a run, never across runs): median and latest.
    impact: dict[str, dict[int, int]] = {}
    titles: dict[str, str] = {}
    if ids:
        for run_id, rid, total, title in session.execute(
                sa.select(Finding.run_id, Finding.rule_id, sa.func.sum(Finding.impact_ns), sa.func.max(Finding.title))
                .where(Finding.run_id.in_(ids)).group_by(Finding.run_id, Finding.rule_id)):
            impact.setdefault(rid, {})[run_id] = int(total)
            titles[rid] = title
    latest = {rid: max(v, key=ids.index) for rid, v in impact.items()}
    top_rules = sorted((TopRule(rid, titles[rid], len(v), int(statistics.median(v.values())), v[latest[rid]],
                                latest[rid]) for rid, v in impact.items()), key=lambda r: -r.median_ns)[:10]
    return JobTrends(job, points, top_rules, bool(per_iteration), impact)
