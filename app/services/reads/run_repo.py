"""The run repository: the one query behind every runs list (the API's and the UI's), the typed row it
returns, and the one goodput formula.

A runs list row carries the run's headline numbers from its per-run summary (``RunSummary`` with no report:
the sums of its reports' breakdowns, written once by ``app.services.jobs.results``), so the API and the pages
read the same numbers from the same row. ``app.services.jobs.runs`` serializes pages for the API;
``app.services.pages.web_runs`` parses the page's form and renders them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from analysis.api import RuleStatus, Verdict, run_step_time
from app.errors import ApiError
from app.models import Finding, Job, Report, Run, RunSummary
from app.services.reads.reports import iso, report_to_dict
from app.services.reads.run_query import RunFilter, fetch_live, tag_filter
from app.services.reads.summaries import Headline, to_run_entity


def goodput_pct(compute_ns: int | None, span_ns: int | None) -> float | None:
    """Goodput: the share of the GPU span spent computing (communication it overlaps included), in percent
    to three decimals; None without a span. Every goodput the service stores or shows is this."""
    if not span_ns or compute_ns is None:
        return None
    return round(100.0 * compute_ns / span_ns, 3)


def get_run(session: Session, run_id: int, *, for_update: bool = False) -> Run:
    """The live run, or ApiError RUN_NOT_FOUND (deleted runs are gone for readers; an id no row can have is
    refused by the id guard before the database sees it)."""
    run = fetch_live(session, run_id, for_update=for_update)
    if run is None:
        raise ApiError("RUN_NOT_FOUND", f"Run {run_id} does not exist.", {"run_id": run_id})
    return run


def get_job(session: Session, name: str) -> Job:
    """The job named ``name``, or ApiError JOB_NOT_FOUND."""
    job = session.scalar(sa.select(Job).where(Job.name == name))
    if job is None:
        raise ApiError("JOB_NOT_FOUND", f"Job {name!r} does not exist.", {"job": name})
    return job


def headline(session: Session, run_id: int) -> Headline:
    """The run's headline numbers: its per-run summary row (the sums over its reports)."""
    return Headline.of(session.scalar(sa.select(RunSummary).where(RunSummary.run_id == run_id,
                                                                  RunSummary.report_id.is_(None))))


@dataclass
class RunInfo:
    """What every view of a run shows of it (a runs list's row, the run page, the API): who, what, its state."""

    id: int
    job: str
    tags: dict[str, str]
    git_sha: str | None
    cluster: str | None
    submitter: str | None
    source: str | None
    status: str
    analysis_status: str | None
    analysis_window: str
    analyzed_at: datetime | None
    error: str | None
    created_at: datetime

    @staticmethod
    def fields_of(run: Any, job: str) -> dict[str, Any]:
        """The fields of ``run`` (a Run or a row with its columns), as keyword arguments."""
        return {"id": run.id, "job": job, "tags": run.tags or {}, "git_sha": run.git_sha, "cluster": run.cluster,
                "submitter": run.submitter, "source": run.source, "status": run.status,
                "analysis_status": run.analysis_status, "analysis_window": run.analysis_window or "steady",
                "analyzed_at": run.analyzed_at, "error": run.error, "created_at": run.created_at}

    def info_api(self) -> dict[str, Any]:
        """These fields as the API writes them (``Run`` in app/openapi.json, less the headline numbers)."""
        return {
            "id": self.id, "job": self.job, "tags": self.tags, "git_sha": self.git_sha, "cluster": self.cluster,
            "submitter": self.submitter, "source": self.source, "status": self.status,
            "analysis_status": self.analysis_status, "analysis_window": self.analysis_window,
            "analyzed_at": iso(self.analyzed_at), "error": self.error, "created_at": iso(self.created_at),
        }


@dataclass(frozen=True)
class ReportView:
    """One report of a run as the run page lists it and the API returns it (``report_to_dict``)."""

    id: int
    name: str
    kind: str
    rank: int | None           # the column, else the export's (once ingested)
    host: str | None           # the column, else the export's
    status: str
    error_code: str | None
    error_message: str | None
    tool_version: str | None   # the column (the API's); ``shown_tool_version`` falls back to the export's
    shown_tool_version: str | None
    gpus: list[str]            # the export's GPUs by name ("GPU <id>" when it has none)
    size_bytes: int | None
    is_ready: bool             # its DuckDB file is published
    api: dict[str, Any]        # the API's ``Report`` item

    @classmethod
    def of(cls, report: Report) -> ReportView:
        api = report_to_dict(report)
        info = report.info or {}
        devices = [d for d in info.get("devices") or [] if isinstance(d, dict)]
        return cls(report.id, report.name, report.kind, api["rank"], api["host"], report.status, report.error_code,
                   report.error_message, report.tool_version, report.tool_version or info.get("tool_version"),
                   [str(d.get("name") or f"GPU {d.get('id', d.get('device', '?'))}") for d in devices],
                   report.size_bytes, bool(report.trace_path), api)


@dataclass(frozen=True)
class MissingReport:
    """A report the run's analysis went without (its ingest or analysis failed)."""

    report: str
    rank: int | None
    error_code: str | None


def _rule_status(data: Any) -> RuleStatus:
    d = data if isinstance(data, dict) else {}
    return RuleStatus(rule_id=str(d.get("id")), status=str(d.get("status") or ""), reason=d.get("reason"),
                      findings=int(d.get("findings") or 0))


@dataclass(kw_only=True)
class RunDetail(RunInfo):
    """A run with its reports, headline numbers and analysis state: what ``GET /api/v1/runs/{id}`` returns
    (``to_api``) and what the run page renders, built once by ``run_detail``."""

    headline: Headline
    reports: list[ReportView]                 # by rank, then id (the run page's order)
    rules: list[RuleStatus]                   # how each rule went on the last analysis
    analysis_attempts: int
    analysis_lease_owner: str | None
    analysis_lease_expires_at: datetime | None
    submitter_user_id: int | None             # who may change the run (``runs.may_delete``)
    submitter_token_id: int | None
    missing: list[MissingReport] = field(default_factory=list)
    missing_ranks: list[int] = field(default_factory=list)
    verdict: Verdict | None = None            # what bounds the run and what to do first (analysis.diagnosis.verdict)
    # What is missing or does not belong among its reports (analysis.run.mixed): missing ranks, other jobs, clocks.
    run_warnings: list[dict[str, Any]] = field(default_factory=list)

    @property
    def rule_errors(self) -> list[RuleStatus]:
        """Rules that crashed: the run is "ready with errors"."""
        return [r for r in self.rules if r.status == "error"]

    def to_api(self) -> dict[str, Any]:
        """The API's ``RunDetail`` (app/openapi.json): the run, its reports by id, its rules."""
        return {
            **self.info_api(), "goodput_pct": self.headline.goodput_pct, "finding_count": self.headline.finding_count,
            "top_impact_ns": self.headline.top_impact_ns,
            "reports": [r.api for r in sorted(self.reports, key=lambda r: r.id)],
            "rules": [r.to_json() for r in self.rules],
            "rule_errors": [{"id": r.rule_id, "reason": r.reason or ""} for r in self.rule_errors],
            "analysis_attempts": self.analysis_attempts,
            "analysis_lease_owner": self.analysis_lease_owner,
            "analysis_lease_expires_at": iso(self.analysis_lease_expires_at),
            # The upload's 202 cannot say them (ranks are known only after ingest): the poll does, once analyzed.
            "run_warnings": list(self.run_warnings),
        }


def run_detail(session: Session, run_id: int, *, run: Run | None = None, reports: list[Report] | None = None,
               summaries: list[RunSummary] | None = None) -> RunDetail:
    """The live run ``run_id`` with its reports and headline numbers (ApiError RUN_NOT_FOUND when it is not
    there); ``run``/``reports``/``summaries``: those rows (all the run's summaries) when the caller has read them."""
    run = run if run is not None else get_run(session, run_id)
    job = session.scalar(sa.select(Job.name).where(Job.id == run.job_id)) or ""
    if summaries is None:
        row = session.scalar(sa.select(RunSummary).where(RunSummary.run_id == run.id, RunSummary.report_id.is_(None)))
    else:
        row = next((s for s in summaries if s.report_id is None), None)
    if reports is None:
        reports = list(session.scalars(sa.select(Report).where(Report.run_id == run.id)
                                       .order_by(Report.rank, Report.id)))
    stored = to_run_entity(row)
    return RunDetail(
        **RunInfo.fields_of(run, job), headline=stored.headline, reports=[ReportView.of(r) for r in reports],
        rules=[_rule_status(r) for r in run.rule_statuses or []], analysis_attempts=run.analysis_attempts,
        analysis_lease_owner=run.analysis_lease_owner, analysis_lease_expires_at=run.analysis_lease_expires_at,
        submitter_user_id=run.submitter_user_id, submitter_token_id=run.submitter_token_id,
        missing=[MissingReport(str(m.get("report") or ""), m.get("rank"), m.get("error_code")) for m in stored.missing],
        missing_ranks=list(stored.missing_ranks), verdict=stored.verdict,
        run_warnings=[dict(w) for w in stored.run_warnings])


@dataclass
class RunRow(RunInfo):
    """One run of a runs list with its headline numbers (None: the run has no analysis yet)."""

    goodput_pct: float | None = None
    finding_count: int | None = None
    top_impact_ns: int | None = None
    gpu_time_ns: int | None = None       # the GPU span summed over the run's reports
    exposed_comm_ns: int | None = None
    critical: int = 0                    # critical findings (counted when the list asks for counts)
    reports: int = 0                     # reports (counted when the list asks for counts)

    def to_api(self) -> dict[str, Any]:
        """The API's ``RunSummary`` item (app/openapi.json)."""
        return {**self.info_api(), "goodput_pct": self.goodput_pct, "finding_count": self.finding_count,
                "top_impact_ns": self.top_impact_ns}


@dataclass
class RunPage:
    items: list[RunRow] = field(default_factory=list)
    total: int = 0
    page: int = 1
    page_size: int = 50

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.page_size))


# The columns a run list shows: plain column rows are several times cheaper to load than ORM entities.
_COLUMNS = (Run.id, Run.tags, Run.git_sha, Run.cluster, Run.submitter, Run.source, Run.status,
            Run.analysis_status, Run.analyzed_at, Run.error, Run.created_at, Run.analysis_window)


def _critical() -> sa.Subquery:
    return (sa.select(Finding.run_id.label("run_id"), sa.func.count().label("critical"))
            .where(Finding.severity == "critical").group_by(Finding.run_id).subquery("critical"))


def list_runs(session: Session, filters: RunFilter, *, sort: str = "created_at", desc: bool = True,
              tie_desc: bool | None = None, page: int = 1, page_size: int = 50, counts: bool = False) -> RunPage:
    """One page of the live runs matching every condition of ``filters``, ordered by ``sort`` (a key of
    ``SORT_KEYS``; empty values last) then by id (descending with ``tie_desc``, else as ``desc``).
    ``counts``: also count each run's reports and critical findings (and allow sorting by the latter)."""
    critical = _critical() if counts else None
    critical_n = sa.func.coalesce(critical.c.critical, 0) if critical is not None else sa.literal(0)
    keys: dict[str, Any] = {
        "created_at": Run.created_at, "id": Run.id, "status": Run.status, "job": Job.name,
        "submitter": Run.submitter, "gpu_time": RunSummary.span_ns, "goodput": RunSummary.goodput_pct,
        "exposed_comm": RunSummary.comm_exposed_ns, "critical": critical_n,
    }
    key = keys[sort]
    tie = desc if tie_desc is None else tie_desc
    conditions = filters.conditions()
    query = (
        sa.select(*_COLUMNS, Job.name.label("job"), RunSummary.goodput_pct, RunSummary.finding_count,
                  RunSummary.top_impact_ns, RunSummary.span_ns, RunSummary.comm_exposed_ns,
                  critical_n.label("critical"), sa.func.count().over().label("total"))
        .join(Job, Job.id == Run.job_id)
        .outerjoin(RunSummary, sa.and_(RunSummary.run_id == Run.id, RunSummary.report_id.is_(None)))
    )
    if critical is not None:
        query = query.outerjoin(critical, critical.c.run_id == Run.id)
    query = (query.where(*conditions)
             .order_by(key.desc().nulls_last() if desc else key.asc().nulls_last(),
                       Run.id.desc() if tie else Run.id.asc())
             .limit(page_size).offset((page - 1) * page_size))
    rows = session.execute(query).all()
    # The total rides along as a window over the same filter; only a page past the end needs a count.
    total = rows[0].total if rows else session.scalar(sa.select(sa.func.count(Run.id)).where(*conditions)) or 0
    items = [RunRow(
        **RunInfo.fields_of(r, r.job), goodput_pct=r.goodput_pct, finding_count=r.finding_count,
        top_impact_ns=r.top_impact_ns, gpu_time_ns=r.span_ns, exposed_comm_ns=r.comm_exposed_ns,
        critical=int(r.critical)) for r in rows]
    if counts and items:
        per_run = dict(session.execute(
            sa.select(Report.run_id, sa.func.count()).where(Report.run_id.in_([i.id for i in items]))
            .group_by(Report.run_id)).all())
        for item in items:
            item.reports = int(per_run.get(item.id, 0))
    return RunPage(items, int(total), page, page_size)


def _iterations(data: dict[str, Any]) -> int | None:
    """Steps the analysis counted in a report (from its summary), when it recorded any."""
    value = data.get("iterations")
    if isinstance(value, dict) and not value.get("reason"):   # analysis.diagnosis.summary: {"count", "range", ...}
        value = value.get("count")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


@dataclass(frozen=True)
class HistoryPoint:
    """One run of a job's history: when, from which commit, its headline numbers and its step time."""

    run_id: int
    created_at: datetime
    status: str
    git_sha: str | None
    tags: dict[str, str]
    rule_statuses: list[dict[str, Any]]
    headline: Headline
    iterations: int | None = None        # the most steps any of its reports counted
    step_time_ns: float | None = None    # the run page's step time (``analysis.api.run_step_time``)

    @property
    def analyzed(self) -> bool:
        """Whether the run has a time breakdown (its reports' summaries carry one)."""
        return self.headline.span_ns is not None

    def to_api(self) -> dict[str, Any]:
        """The API's ``JobHistory`` item (app/openapi.json)."""
        return {"run_id": self.run_id, "created_at": iso(self.created_at), "status": self.status,
                "git_sha": self.git_sha, "tags": self.tags, **self.headline.to_api()}


def job_history(session: Session, job: Job, *, limit: int, tag: str | None = None) -> list[HistoryPoint]:
    """The job's last ``limit`` live runs, oldest first (with ``tag``, "key=value" or a bare key, those
    carrying it, matched as every runs list matches tags), each with its headline numbers from its per-run
    summary and its step time from its reports' summaries. The API's job history and the job page read this."""
    rows = session.execute(
        sa.select(Run.id, Run.created_at, Run.status, Run.git_sha, Run.tags, Run.rule_statuses, RunSummary)
        .outerjoin(RunSummary, sa.and_(RunSummary.run_id == Run.id, RunSummary.report_id.is_(None)))
        .where(Run.job_id == job.id, *RunFilter(tags=tag_filter(tag or "")).conditions())
        .order_by(Run.created_at.desc(), Run.id.desc()).limit(limit)).all()
    points = []
    for r in reversed(rows):
        summary: RunSummary | None = r.RunSummary
        reports = [d for d in ((summary.data or {}).get("reports") or [] if summary is not None else [])
                   if isinstance(d, dict)]
        iterations = max((_iterations(d) or 0 for d in reports), default=0) or None
        points.append(HistoryPoint(r.id, r.created_at, r.status, r.git_sha, r.tags or {}, r.rule_statuses or [],
                                   Headline.of(summary), iterations, run_step_time(reports)))
    return points
