"""Comparing two runs of the service: the one comparison behind the API and the compare page. It gathers
each run's facts from the metadata DB and the reports' DuckDB files, leaves the comparison itself to
``analysis.views.compare`` (which `goodput diff` uses too), and adds the page's reading aids: headline deltas
(goodput in points), per-rank deltas, warnings when the runs are not alike, and the baseline choices."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

import sqlalchemy as sa
from sqlalchemy.orm import Session

from analysis.api import (
    DEFAULT_NOISE_PCT,
    Breakdown,
    CollectiveSplit,
    FindingJson,
    ReportInfo,
    RunComparison,
    RunFacts,
    ToolKind,
    compare_facts,
    run_facts,
)
from app.models import Finding, Report, ReportStatus, Run
from app.services.jobs.runs import get_run
from app.services.pages.web_findings import report_label
from app.services.pages.web_run import RunView, breakdown_of, run_view
from app.services.reads.findings import finding_to_dict
from app.services.reads.run_query import live
from app.services.reads.summaries import run_results
from app.services.storage import data_path
from app.settings import Settings

__all__ = ["DEFAULT_NOISE_PCT", "Comparison", "baseline_choices", "compare_runs", "previous_run", "run_facts_of"]

BASELINE_CHOICES = 30

KPIS = (  # (breakdown key, label, unit: "ns" durations | "pts" percentage points)
    ("span_ns", "GPU time (active span, all GPUs)", "ns"),
    ("goodput_pct", "goodput (compute share)", "pts"),
    ("comm_exposed_ns", "exposed communication", "ns"),
    ("idle_ns", "GPU idle", "ns"),
)


@dataclass(frozen=True)
class KpiDelta:
    """One headline number of both runs and its difference (compared − baseline)."""

    key: str
    label: str
    unit: str                    # "ns" | "pts" (goodput: the difference in points, no relative change)
    base: int | float | None
    head: int | float | None

    @property
    def delta(self) -> int | float | None:
        return None if self.base is None or self.head is None else self.head - self.base

    @property
    def delta_pct(self) -> float | None:
        d = self.delta
        return None if d is None or self.unit == "pts" or not self.base else 100.0 * d / self.base


@dataclass(frozen=True)
class RankDelta:
    rank: str                    # "rank N", else "report N" (reports matched by position)
    label: str
    kpis: list[KpiDelta]


@dataclass
class Comparison:
    """Two runs compared: ``diff`` is ``analysis.views.compare``'s difference head − base (the API's body); the
    rest is what the compare page draws beside it, from the same two runs."""

    diff: RunComparison
    base: RunView | None = None          # None: asked for the difference only (the API)
    head: RunView | None = None
    kpis: list[KpiDelta] = field(default_factory=list)
    ranks: list[RankDelta] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_api(self) -> RunComparison:
        """The API's ``Comparison`` (app/openapi.json)."""
        return self.diff


def run_facts_of(session: Session, settings: Settings, run_id: int) -> RunFacts:
    """One run as ``analysis.views.compare`` sees it: each ready report's analysis dict (its stored summary)
    with its DuckDB file (through ``Storage.resolve``), and the findings (API dicts, ranking order)."""
    run = get_run(session, run_id)
    results = run_results(session, run.id)
    ready = session.execute(sa.select(Report.id, Report.trace_path)
                            .where(Report.run_id == run.id, Report.status == ReportStatus.READY).order_by(Report.id))
    stored = [(results.reports[rid], path) for rid, path in ready if rid in results.reports and results.reports[rid].data]
    findings = session.scalars(sa.select(Finding).where(Finding.run_id == run.id).order_by(Finding.id))
    split = results.run.collectives
    # The stored summaries and split are the analysis' JSON read back: its reports[] objects and collectives.
    return run_facts(run.id, [cast("ReportInfo", dict(s.data)) for s, _ in stored],
                     [cast("FindingJson", finding_to_dict(f)) for f in findings],
                     [data_path(settings, path) if path else None for _, path in stored],
                     collectives=None if split is None else cast("CollectiveSplit", dict(split)))


def compare_runs(session: Session, settings: Settings, base_id: int, head_id: int, *,
                 noise_pct: float = DEFAULT_NOISE_PCT, with_views: bool = True) -> Comparison:
    """The difference head − base (see ``analysis.views.compare.compare``) with, ``with_views``, both runs' views and
    the page's reading aids; ApiError RUN_NOT_FOUND when either run is not there."""
    base, head = run_facts_of(session, settings, base_id), run_facts_of(session, settings, head_id)
    diff = compare_facts(base, head, noise_pct=noise_pct)
    if not with_views:
        return Comparison(diff)
    a, b = run_view(session, base_id), run_view(session, head_id)
    return Comparison(diff, a, b, kpi_deltas(a, b), rank_deltas(a, b), warnings(a, b))


def kpi_deltas(a: RunView, b: RunView) -> list[KpiDelta]:
    """Headline numbers of both runs and their difference (compared − baseline); goodput in points."""
    return [KpiDelta(key, label, unit, getattr(a.totals, key), getattr(b.totals, key)) for key, label, unit in KPIS]


def _per_rank(view: RunView) -> dict[str, tuple[str, Breakdown]]:
    out: dict[str, tuple[str, Breakdown]] = {}
    for i, report in enumerate(r for r in view.reports if r.kind == ToolKind.NSYS):
        bd = breakdown_of(view.results.summary(report.id))
        if bd is None:
            continue
        key = f"rank {report.rank}" if report.rank is not None else f"report {i + 1}"
        out[key] = (report_label(report), bd)
    return out


def rank_deltas(a: RunView, b: RunView) -> list[RankDelta]:
    """Per rank (matched by rank number, else by report order), each KPI of both runs and the difference."""
    ra, rb = _per_rank(a), _per_rank(b)
    rows = []
    for key in sorted(set(ra) | set(rb), key=lambda k: (k.split()[0], int(k.split()[1]))):
        (la, x), (lb, y) = ra.get(key, ("", None)), rb.get(key, ("", None))
        rows.append(RankDelta(key, lb or la or key, [KpiDelta(k, label, unit, getattr(x, k, None), getattr(y, k, None))
                                                     for k, label, unit in KPIS]))
    return rows


def warnings(a: RunView, b: RunView) -> list[str]:
    """Why the comparison may mislead: other job, other tools, other number of ranks."""
    out = []
    if a.job != b.job:
        out.append(f"The runs belong to different jobs ({a.job} and {b.job}).")
    ka, kb = sorted({r.kind for r in a.reports}), sorted({r.kind for r in b.reports})
    if ka != kb:
        out.append(f"The runs were profiled with different tools ({' + '.join(ka) or 'none'} and "
                   f"{' + '.join(kb) or 'none'}).")
    na, nb = sum(r.kind == ToolKind.NSYS for r in a.reports), sum(r.kind == ToolKind.NSYS for r in b.reports)
    if na != nb:
        out.append(f"The runs have different numbers of nsys reports ({na} and {nb}): totals add up different ranks.")
    return out


def previous_run(session: Session, run: Run) -> int | None:
    """The run of the same job created just before ``run`` (the default baseline)."""
    return session.scalar(
        sa.select(Run.id).where(Run.job_id == run.job_id, live(), Run.id != run.id,
                                sa.or_(Run.created_at < run.created_at,
                                       sa.and_(Run.created_at == run.created_at, Run.id < run.id)))
        .order_by(Run.created_at.desc(), Run.id.desc()).limit(1))


@dataclass(frozen=True)
class BaselineChoice:
    """A run the compare page offers as the baseline: its id and how the drop-down names it."""

    id: int
    label: str


def baseline_choices(session: Session, run: Run) -> list[BaselineChoice]:
    """Other runs of the same job, newest first, for the baseline drop-down."""
    rows = session.execute(
        sa.select(Run.id, Run.created_at, Run.git_sha).where(Run.job_id == run.job_id, live(),
                                                             Run.id != run.id)
        .order_by(Run.created_at.desc(), Run.id.desc()).limit(BASELINE_CHOICES)).all()
    return [BaselineChoice(r.id, f"#{r.id} · {r.created_at:%Y-%m-%d %H:%M}" + (f" · {r.git_sha[:10]}" if r.git_sha else ""))
            for r in rows]
