"""The one read path for runs: which runs readers see, how a run is fetched, and the filter every runs list
(the API's and the UI's) applies, so the same filter gives the same runs wherever it is asked."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.ids import valid_id
from app.models import RUN_STATUSES, Job, Report, Run

# The keys an upload accepts (app.services.runs.uploads.TAG_KEY_RE); a filter on any other key matches no run.
_TAG_KEY = re.compile(r"^[A-Za-z0-9_.:/-]{1,100}$")


def live() -> sa.ColumnElement[bool]:
    """Runs readers see: a deleted run is gone at once, before the purge removes its rows."""
    return Run.deleted_at.is_(None)


def of_live_run() -> sa.ColumnElement[bool]:
    """The report (``Report``) belongs to a live run: a job of a deleted run is not claimed nor sent again."""
    return sa.exists().where(Run.id == Report.run_id, live())


def fetch_live(session: Session, run_id: int, *, for_update: bool = False) -> Run | None:
    """The run if it exists and is not deleted, else None (ids beyond the column's range included:
    drivers would overflow on them)."""
    if not valid_id(run_id):
        return None
    query = sa.select(Run).where(Run.id == run_id, live())
    if for_update:
        query = query.with_for_update()
    return session.scalar(query)


def tag_condition(key: str, value: str | None) -> sa.ColumnElement[bool]:
    """Runs whose tag ``key`` equals ``value`` (or, with None, that carry the key at all).

    Uploads strip a tag's value before storing it, so the filter's value is stripped the same way; the
    ``->>``/``json_extract`` text comparison reads identically on PostgreSQL (JSONB) and SQLite.
    """
    key = key.strip()
    if not _TAG_KEY.match(key):
        return sa.false()
    text = Run.tags[key].as_string()
    return text.is_not(None) if value is None else text == value.strip()


def tag_filter(text: str) -> dict[str, str | None]:
    """The pages' one-field tag filter as ``RunFilter.tags``: "key=value", a bare "key" (the run carries
    the key), or nothing."""
    if not text:
        return {}
    key, eq, value = text.partition("=")
    return {key: value if eq else None}


@dataclass(frozen=True)
class RunFilter:
    """What a runs list is filtered by; every field optional (None: no condition)."""

    job: str | None = None
    job_contains: str | None = None  # the runs list's job field: any job whose name holds this (any case)
    tags: Mapping[str, str | None] = field(default_factory=dict)  # value None: the key is present
    status: str | None = None
    submitter: str | None = None
    created_after: datetime | None = None   # inclusive
    created_before: datetime | None = None  # exclusive

    def conditions(self) -> list[sa.ColumnElement[bool]]:
        """The WHERE clauses of this filter, the liveness condition first."""
        out: list[Any] = [live()]
        if self.job is not None:
            # A subquery rather than a join: callers join Job or not, the condition reads the same.
            out.append(Run.job_id == sa.select(Job.id).where(Job.name == self.job).scalar_subquery())
        if self.job_contains is not None:
            out.append(Run.job_id.in_(sa.select(Job.id).where(
                sa.func.lower(Job.name).contains(self.job_contains.lower(), autoescape=True))))
        out.extend(tag_condition(key, value) for key, value in self.tags.items())
        if self.status is not None:
            # A status no run can have matches nothing (the column refuses to bind an unknown one).
            out.append(Run.status == self.status if self.status in RUN_STATUSES else sa.false())
        if self.submitter is not None:
            out.append(Run.submitter == self.submitter)
        if self.created_after is not None:
            out.append(Run.created_at >= self.created_after)
        if self.created_before is not None:
            out.append(Run.created_at < self.created_before)
        return out
