"""Read-side queries behind the UI's runs list: filters, sort, pagination and each run's headline numbers."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.models import Finding, Job, Report, Run, RunSummary
from app.services.run_query import RunFilter

PAGE_SIZES = (25, 50, 100)
SORTS = {
    "created": Run.created_at,
    "job": Job.name,
    "status": Run.status,
    "submitter": Run.submitter,
}
HEADLINE_SORTS = ("gpu_time", "goodput", "exposed_comm", "critical")


@dataclass(frozen=True)
class RunFilters:
    """What the runs list is filtered and sorted by (all optional; parsed from the query string)."""

    job: str = ""
    tag: str = ""            # "key=value" or a bare key
    submitter: str = ""
    status: str = ""
    date_from: date | None = None
    date_to: date | None = None
    sort: str = "created"
    desc: bool = True
    page: int = 1
    page_size: int = 50

    @classmethod
    def parse(cls, args: Any) -> RunFilters:
        def day(name: str) -> date | None:
            try:
                return date.fromisoformat(args.get(name, "")) if args.get(name) else None
            except ValueError:
                return None

        def num(name: str, default: int) -> int:
            try:
                return int(args.get(name, default))
            except (TypeError, ValueError):
                return default

        sort = args.get("sort", "created")
        size = num("page_size", 50)
        return cls(
            job=args.get("job", "").strip(), tag=args.get("tag", "").strip(),
            submitter=args.get("submitter", "").strip(), status=args.get("status", "").strip(),
            date_from=day("from"), date_to=day("to"),
            sort=sort if sort in SORTS or sort in HEADLINE_SORTS else "created",
            desc=args.get("order", "desc") != "asc", page=max(1, num("page", 1)),
            page_size=size if size in PAGE_SIZES else 50,
        )


    def run_filter(self) -> RunFilter:
        """The shared filter (app.services.run_query) this form's fields mean: an empty field is no
        condition, the dates are whole UTC days (``to`` included), a bare tag key asks for the key."""
        key, eq, value = self.tag.partition("=")
        return RunFilter(
            job=self.job or None, tags={key: value if eq else None} if self.tag else {},
            status=self.status or None, submitter=self.submitter or None,
            created_after=None if self.date_from is None else datetime.combine(self.date_from, time.min, UTC),
            created_before=None if self.date_to is None else datetime.combine(
                self.date_to + timedelta(days=1), time.min, UTC),
        )


@dataclass
class RunRow:
    id: int
    job: str
    status: str
    submitter: str | None
    created_at: datetime
    tags: dict[str, str]
    git_sha: str | None
    reports: int = 0
    gpu_time_ns: int | None = None
    goodput_pct: float | None = None
    exposed_comm_ns: int | None = None
    critical: int = 0


@dataclass
class RunPage:
    items: list[RunRow] = field(default_factory=list)
    total: int = 0
    page: int = 1
    page_size: int = 50

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.page_size))


def _headline_subquery() -> sa.Subquery:
    """Per run: the sums of its reports' breakdowns (GPU span, compute, exposed communication)."""
    return (
        sa.select(
            RunSummary.run_id.label("run_id"),
            sa.func.sum(RunSummary.span_ns).label("span_ns"),
            sa.func.sum(RunSummary.compute_ns).label("compute_ns"),
            sa.func.sum(RunSummary.comm_exposed_ns).label("comm_exposed_ns"),
        )
        .where(RunSummary.report_id.is_not(None))
        .group_by(RunSummary.run_id)
        .subquery("headline")
    )


def _critical_subquery() -> sa.Subquery:
    return (
        sa.select(Finding.run_id.label("run_id"), sa.func.count().label("critical"))
        .where(Finding.severity == "critical")
        .group_by(Finding.run_id)
        .subquery("critical")
    )


def list_runs(session: Session, filters: RunFilters) -> RunPage:
    """One page of runs (deleted ones excluded) with their headline numbers, filtered as the API filters
    (``RunFilter``) and sorted."""
    headline = _headline_subquery()
    critical = _critical_subquery()
    goodput = sa.case(
        (headline.c.span_ns > 0, 100.0 * headline.c.compute_ns / headline.c.span_ns), else_=None
    )
    base = (
        sa.select(Run.id)
        .join(Job, Job.id == Run.job_id)
        .outerjoin(headline, headline.c.run_id == Run.id)
        .outerjoin(critical, critical.c.run_id == Run.id)
        .where(*filters.run_filter().conditions())
    )
    total = session.scalar(sa.select(sa.func.count()).select_from(base.subquery())) or 0

    key = {
        "gpu_time": headline.c.span_ns, "goodput": goodput, "exposed_comm": headline.c.comm_exposed_ns,
        "critical": sa.func.coalesce(critical.c.critical, 0),
    }.get(filters.sort, SORTS.get(filters.sort, Run.created_at))
    order = [key.desc().nulls_last() if filters.desc else key.asc().nulls_last(),
             Run.id.desc() if filters.desc else Run.id.asc()]
    query = (
        base.with_only_columns(
            Run.id, Job.name, Run.status, Run.submitter, Run.created_at, Run.tags, Run.git_sha,
            headline.c.span_ns, goodput.label("goodput"), headline.c.comm_exposed_ns,
            sa.func.coalesce(critical.c.critical, 0),
        )
        .order_by(*order)
        .limit(filters.page_size)
        .offset((filters.page - 1) * filters.page_size)
    )
    items = [
        RunRow(id=r[0], job=r[1], status=r[2], submitter=r[3], created_at=r[4], tags=r[5] or {}, git_sha=r[6],
               gpu_time_ns=None if r[7] is None else int(r[7]), goodput_pct=None if r[8] is None else float(r[8]),
               exposed_comm_ns=None if r[9] is None else int(r[9]), critical=int(r[10]))
        for r in session.execute(query)
    ]
    if items:
        counts = dict(session.execute(
            sa.select(Report.run_id, sa.func.count()).where(Report.run_id.in_([i.id for i in items]))
            .group_by(Report.run_id)).all())
        for item in items:
            item.reports = counts.get(item.id, 0)
    return RunPage(items, total, filters.page, filters.page_size)


def job_names(session: Session, prefix: str = "", limit: int = 20) -> list[str]:
    """Existing job names (for completion in the upload form), most recently used first."""
    last = sa.func.max(Run.created_at)
    query = sa.select(Job.name).outerjoin(Run, Run.job_id == Job.id).group_by(Job.id, Job.name)
    if prefix:
        query = query.where(Job.name.startswith(prefix, autoescape=True))
    return list(session.scalars(query.order_by(last.desc().nulls_last(), Job.name).limit(limit)))


def submitters(session: Session, limit: int = 200) -> list[str]:
    return [s for s in session.scalars(
        sa.select(Run.submitter).where(Run.submitter.is_not(None)).distinct().order_by(Run.submitter).limit(limit)
    ) if s]
