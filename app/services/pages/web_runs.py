"""Read-side queries behind the UI's runs list: filters, sort, pagination and each run's headline numbers."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.models import Job, Run
from app.services.reads import run_repo
from app.services.reads.paging import MAX_PAGE
from app.services.reads.run_query import RunFilter, tag_filter
from app.services.reads.run_repo import RunPage

PAGE_SIZES = (25, 50, 100)
SORTS = ("created", "job", "status", "submitter")
HEADLINE_SORTS = ("gpu_time", "goodput", "exposed_comm", "critical")
# The form's sort names that the repository spells otherwise.
_SORT_KEYS = {"created": "created_at"}


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
            desc=args.get("order", "desc") != "asc", page=min(max(1, num("page", 1)), MAX_PAGE),
            page_size=size if size in PAGE_SIZES else 50,
        )


    def run_filter(self) -> RunFilter:
        """The shared filter (app.services.reads.run_query) this form's fields mean: an empty field is no
        condition, the dates are whole UTC days (``to`` included), a bare tag key asks for the key."""
        return RunFilter(
            job_contains=self.job or None, tags=tag_filter(self.tag),
            status=self.status or None, submitter=self.submitter or None,
            created_after=None if self.date_from is None else datetime.combine(self.date_from, time.min, UTC),
            # Up to the end of the last day there is (9999-12-31: no end at all, and no day after it).
            created_before=None if self.date_to is None or self.date_to == date.max else datetime.combine(
                self.date_to + timedelta(days=1), time.min, UTC),
        )


def list_runs(session: Session, filters: RunFilters) -> RunPage:
    """One page of runs (deleted ones excluded) with their headline numbers, filtered as the API filters
    (``RunFilter``) and sorted, from the one run query (``app.services.reads.run_repo``)."""
    return run_repo.list_runs(session, filters.run_filter(), sort=_SORT_KEYS.get(filters.sort, filters.sort),
                              desc=filters.desc, page=filters.page, page_size=filters.page_size, counts=True)


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
