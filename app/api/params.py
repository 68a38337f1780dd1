"""Query parameters of /api/v1: one declaration per name (used to validate and to document)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from flask import request

from app.errors import ApiError
from app.ids import MAX_ID, ascii_float, ascii_int
from app.models import RUN_STATUSES
from app.services.jobs.runs import SORTS
from app.services.reads.paging import DEFAULT_PAGE_SIZE, MAX_PAGE, MAX_PAGE_SIZE
from app.services.runs.uploads import TAG_PATTERN
from app.text import NO_CONTROL

SEVERITIES = ("critical", "warning", "info")


@dataclass(frozen=True)
class Param:
    type: str                         # integer | number | string
    description: str
    default: Any = None
    minimum: float | None = None
    maximum: float | None = None
    enum: tuple[str, ...] | None = None
    format: str | None = None         # date-time
    repeat: bool = False              # may be given several times
    required: bool = False
    max_length: int = 500
    pattern: str | None = None        # for strings; default: no control characters

    def schema(self) -> dict[str, Any]:
        item: dict[str, Any] = {"type": self.type}
        for key, value in (("minimum", self.minimum), ("maximum", self.maximum), ("format", self.format),
                           ("default", self.default)):
            if value is not None:
                item[key] = value
        if self.enum:
            item["enum"] = list(self.enum)
        if self.type == "string" and not self.enum and not self.format:
            item["maxLength"] = self.max_length
            item["pattern"] = self.pattern or f"^{NO_CONTROL}*$"
        return {"type": "array", "items": item} if self.repeat else item


PARAMS: dict[str, Param] = {
    "page": Param("integer", "Page number, from 1.", 1, 1, MAX_PAGE),
    "page_size": Param("integer", "Items per page.", DEFAULT_PAGE_SIZE, 1, MAX_PAGE_SIZE),
    "job": Param("string", "Only runs of this job (exact name).", max_length=200),
    "tag": Param("string", "Only runs with this tag, as key=value; repeat to require several.", repeat=True,
                 max_length=602, pattern=TAG_PATTERN),
    "status": Param("string", "Only runs in this status.", enum=RUN_STATUSES),
    "submitter": Param("string", "Only runs uploaded by this user or token name.", max_length=200),
    "created_after": Param("string", "Only runs created at or after this time (ISO-8601).", format="date-time"),
    "created_before": Param("string", "Only runs created before this time (ISO-8601).", format="date-time"),
    "sort": Param("string", "Sort key; a leading '-' sorts descending.", "-created_at", enum=tuple(SORTS)),
    "severity": Param("string", "Only findings of these severities.", enum=SEVERITIES, repeat=True),
    "rule": Param("string", "Only findings of these rule ids.", repeat=True, max_length=20),
    "rank": Param("integer", "Only findings of this rank (across ranks: those with a part on it in per_rank).", minimum=0, maximum=1_000_000),
    "limit": Param("integer", "How many of the latest runs.", 100, 1, 1000),
    "base": Param("integer", "The run compared against.", minimum=1, maximum=MAX_ID, required=True),
    "head": Param("integer", "The run compared.", minimum=1, maximum=MAX_ID, required=True),
    "noise_pct": Param("number", "The floor on the effect size: a significant change of a median (per step, per "
                       "launch) smaller than this percentage is not a change.", 5.0, 0, 100),
}


def _bad(name: str, why: str) -> ApiError:
    return ApiError("VALIDATION_ERROR", f"Invalid query parameter {name!r}: {why}.", {"parameter": name})


def _one(name: str, p: Param, raw: str) -> Any:
    if p.type in ("integer", "number"):
        try:
            value: Any = ascii_int(raw) if p.type == "integer" else ascii_float(raw)
        except ValueError:
            raise _bad(name, f"not {'an integer' if p.type == 'integer' else 'a number'}") from None
        if not math.isfinite(value) or (p.minimum is not None and value < p.minimum) or (
                p.maximum is not None and value > p.maximum):
            raise _bad(name, f"must be between {p.minimum} and {p.maximum}")
        return value
    if p.enum and raw not in p.enum:
        raise _bad(name, f"must be one of {', '.join(p.enum)}")
    if p.format == "date-time":
        try:
            value = datetime.fromisoformat(raw.replace("Z", "+00:00"))
        except ValueError:
            raise _bad(name, "not an ISO-8601 date-time") from None
        try:
            return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        except OverflowError:  # 0001-01-01T00:00+00:01 is in year 0 in UTC
            raise _bad(name, "outside 0001-01-01 to 9999-12-31 in UTC") from None
    if len(raw) > p.max_length or "\x00" in raw:
        raise _bad(name, f"at most {p.max_length} characters")
    return raw


def parse_query(names: tuple[str, ...]) -> dict[str, Any]:
    """The named query parameters, validated and converted; absent ones get their default."""
    out: dict[str, Any] = {}
    for name in names:
        p = PARAMS[name]
        raws = request.args.getlist(name)
        if p.repeat:
            out[name] = [_one(name, p, r) for r in raws]
        elif raws:
            out[name] = _one(name, p, raws[-1])
        elif p.required:
            raise _bad(name, "required")
        else:
            out[name] = p.default
    return out


def parse_tags(values: list[str]) -> dict[str, str]:
    tags: dict[str, str] = {}
    for raw in values:
        key, sep, value = raw.partition("=")
        if not sep or not key:
            raise _bad("tag", "use key=value")
        tags[key] = value
    return tags
