"""Uploads: validate staged files by content, store them content-addressed, create queued Report rows,
commit, then enqueue their ingest. Nothing is stored when any file or field is bad."""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from analysis.api import check_thresholds, detect_kind
from analysis.errors import TraceError
from app.errors import ApiError
from app.models import RUN_SOURCES, Job, Report, ReportStatus, Run, RunStatus, utcnow
from app.services.jobs.leases import INGEST
from app.services.jobs.operations import reopen_run
from app.services.jobs.runs import THRESHOLDS_TAG, parse_window, refresh_status
from app.services.reads.run_repo import get_run
from app.services.storage import Staged, Storage, storage_for
from app.settings import Settings
from app.text import NO_CONTROL, has_control

logger = logging.getLogger(__name__)

# The patterns the OpenAPI document publishes (app.api.schemas) are these same strings.
JOB_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}$"
TAG_PATTERN = r"^[A-Za-z0-9_.:/-]{1,100}=" + NO_CONTROL + r"{0,500}$"
SHA_PATTERN = r"^[0-9a-fA-F]{4,64}$"
CLUSTER_PATTERN = "^" + NO_CONTROL + "{1,200}$"
JOB_RE = re.compile(JOB_PATTERN)
TAG_KEY_RE = re.compile(r"^[A-Za-z0-9_.:/-]{1,100}$")
SHA_RE = re.compile(SHA_PATTERN)
MAX_TAGS = 50
DEFAULT_JOB = "default"


@dataclass(frozen=True)
class RunMeta:
    """Validated run metadata from a form, query string or CLI."""

    job: str = DEFAULT_JOB
    tags: dict[str, str] | None = None
    git_sha: str | None = None
    cluster: str | None = None
    source: str = "api"
    window: str | None = None   # the analysis window (analysis.loops.window spec, canonical); None: the default


MAX_THRESHOLDS = 20
MAX_THRESHOLDS_CHARS = 2000   # the tag's value (20 overrides fit)
THRESHOLD_HELP = "RULE.name=NUMBER, e.g. GPU001.min_gap_us=200 (the thresholds are listed on the rules page)"


def parse_thresholds(items: list[str] | dict[str, Any] | None) -> dict[str, float]:
    """Threshold overrides (``RULE.name=NUMBER`` strings, or a mapping) checked against the rule catalogue
    exactly as the CLI's ``--threshold`` is; raises ApiError VALIDATION_ERROR naming the bad one."""
    if items is None:
        return {}
    pairs = list(items.items()) if isinstance(items, dict) else [str(t).partition("=")[::2] for t in items
                                                                  if str(t).strip()]
    raw: dict[str, Any] = {}
    for key, value in pairs:
        key = str(key).strip()
        if not key or isinstance(value, bool) or not isinstance(value, (str, int, float)):
            shown = f"{key}={value!r}"[:100]
            raise ApiError("VALIDATION_ERROR", "Invalid threshold override.",
                           {"fields": {"thresholds": f"{shown!r}: expected {THRESHOLD_HELP}"}})
        raw[key] = value
    if len(raw) > MAX_THRESHOLDS:
        raise ApiError("VALIDATION_ERROR", "Invalid threshold override.",
                       {"fields": {"thresholds": f"at most {MAX_THRESHOLDS} overrides"}})
    try:
        # Name, type and range, by the rule's own declaration: nothing out of range is stored or analysed.
        return check_thresholds(raw)
    except KeyError as exc:
        raise ApiError("VALIDATION_ERROR", "Invalid threshold override.",
                       {"fields": {"thresholds": str(exc.args[0])[:300]}}) from None


def thresholds_text(thresholds: dict[str, float]) -> str:
    """The canonical tag value: sorted ``RULE.name=VALUE`` pairs, space separated (``200``, not ``200.0``)."""
    return " ".join(f"{k}={v:g}" if v == float(f"{v:g}") else f"{k}={v!r}" for k, v in sorted(thresholds.items()))


def parse_meta(job: str | None, tags: list[str], git_sha: str | None, cluster: str | None,
               source: str = "api", window: str | None = None,
               thresholds: list[str] | dict[str, Any] | None = None) -> RunMeta:
    """Validate raw metadata; tags are ``key=value`` strings, ``thresholds`` ``RULE.name=NUMBER`` strings (or
    a mapping). Raises ApiError VALIDATION_ERROR."""
    bad: dict[str, str] = {}
    # Control characters are refused as sent, before the stripping of surrounding blanks below.
    for name, value in (("job", job), ("git_sha", git_sha), ("cluster", cluster), ("source", source)):
        if value is not None and has_control(value):
            bad[name] = "no control characters"
    if any(has_control(t) for t in tags):
        bad["tags"] = "no control characters"
    if bad:
        raise ApiError("VALIDATION_ERROR", "Invalid run metadata.", {"fields": bad})
    job = (job or DEFAULT_JOB).strip()
    if not JOB_RE.match(job):
        bad["job"] = "1-200 characters: letters, digits and . _ : / - (starting with a letter or digit)"
    parsed: dict[str, str] = {}
    for tag in tags:
        key, sep, value = tag.partition("=")
        if not sep or not TAG_KEY_RE.match(key) or len(value) > 500 or has_control(value):
            bad["tags"] = (f"each tag must be key=value (key: letters, digits, _ . : / -; value: at most 500 "
                           f"characters, no control characters); got {tag[:100]!r}")
            break
        parsed[key] = value.strip()
    if len(parsed) > MAX_TAGS:
        bad["tags"] = f"at most {MAX_TAGS} tags"
    git_sha = (git_sha or "").strip() or None
    if git_sha is not None and not SHA_RE.match(git_sha):
        bad["git_sha"] = "a hexadecimal commit id (4-64 characters)"
    cluster = (cluster or "").strip() or None
    if cluster is not None and (len(cluster) > 200 or has_control(cluster)):
        bad["cluster"] = "at most 200 characters, no control characters"
    if source not in RUN_SOURCES:
        bad["source"] = f"one of {', '.join(RUN_SOURCES)}"
    # A field sent empty is a client's mistake (a variable that expanded to nothing), not "the default":
    # leave the field out for that. The web form and `goodput upload` send only what was filled in.
    if window is not None and not str(window).strip():
        bad["window"] = "empty: leave the field out for the default window (steady)"
    if isinstance(thresholds, list) and any(not str(t).strip() for t in thresholds):
        bad["thresholds"] = f"an empty override: expected {THRESHOLD_HELP}"
    if bad:
        raise ApiError("VALIDATION_ERROR", "Invalid run metadata.", {"fields": bad})
    # Overrides sent as the reserved tag are checked like the thresholds field (and merged with it).
    overrides = parse_thresholds(parsed.pop(THRESHOLDS_TAG).split()) if THRESHOLDS_TAG in parsed else {}
    overrides.update(parse_thresholds(thresholds))
    if overrides:
        parsed[THRESHOLDS_TAG] = thresholds_text(overrides)
        if len(parsed[THRESHOLDS_TAG]) > MAX_THRESHOLDS_CHARS:
            raise ApiError("VALIDATION_ERROR", "Invalid threshold override.",
                           {"fields": {"thresholds": f"at most {MAX_THRESHOLDS_CHARS} characters in all"}})
    return RunMeta(job, parsed, git_sha.lower() if git_sha else None, cluster, source, parse_window(window))


@dataclass(frozen=True)
class Incoming:
    """One received file: the client's name (display only) and the staged bytes."""

    name: str
    staged: Staged


def _kind(incoming: Incoming) -> str:
    try:
        return detect_kind(incoming.staged.path, converted_elsewhere=True)
    except TraceError as exc:
        raise ApiError.from_trace_error(
            TraceError(exc.code, f"{incoming.name}: {exc.message}", {**exc.details, "file": incoming.name})
        ) from None


def _display_name(name: str) -> str:
    # Only the last path component of what the client sent, and never empty.
    base = re.split(r"[\\/]", name or "")[-1].strip()
    return base[:500] or "upload"


def _job(session: Session, name: str) -> Job:
    job = session.scalar(sa.select(Job).where(Job.name == name))
    if job is not None:
        return job
    # Two uploads may create the same job at once: INSERT ... ON CONFLICT DO NOTHING, in the request's own
    # transaction. Not a SAVEPOINT: under pysqlite one opened before the first write starts the transaction
    # itself, and its RELEASE commits, so a request refused later (a full disk) left the job row behind.
    dialect = session.get_bind().dialect.name
    insert = sqlite_insert if dialect == "sqlite" else pg_insert
    session.execute(insert(Job).values(name=name, created_at=utcnow()).on_conflict_do_nothing(index_elements=["name"]))
    return session.execute(sa.select(Job).where(Job.name == name)).scalar_one()


def _store(storage: Storage, staged: Staged, placed: list[str]) -> str:
    """``storage.store``, noting in ``placed`` a file this request put there (not one it found stored)."""
    key = storage.upload_key(staged)
    new = not storage.exists(key)
    key = storage.store(staged)
    if new:
        placed.append(key)
    return key


def _unplace(session: Session, storage: Storage, placed: list[str]) -> None:
    """After a refused commit (a full disk: 507): remove the files this request stored, unless a report of
    another request refers to one by now. Nothing is left for the hourly sweep."""
    session.rollback()
    for key in placed:
        try:
            if session.scalar(sa.select(sa.func.count()).select_from(Report).where(Report.upload_path == key)):
                continue
        except Exception:  # the database cannot say: the sweep decides later
            logger.warning("could not check whether an upload is referenced", exc_info=True)
            continue
        storage.remove(key)
    session.rollback()


def _add_report(session: Session, storage: Storage, run: Run, incoming: Incoming, kind: str,
                placed: list[str]) -> tuple[Report, bool]:
    existing = session.scalar(sa.select(Report).where(Report.run_id == run.id,
                                                      Report.sha256 == incoming.staged.sha256))
    if existing is not None and existing.status == ReportStatus.FAILED:
        # The same bytes sent again after a failure: a new attempt with the stored file renewed, not the
        # old failure returned (the file may have been removed, and Goodput may be newer).
        existing.upload_path = _store(storage, incoming.staged, placed)
        existing.kind, existing.status, existing.attempts = kind, ReportStatus.QUEUED, 0
        existing.error_code = existing.error_message = None
        INGEST.clear(existing)
        existing.progress = {}
        reopen_run(run)
        session.flush()
        return existing, True
    if existing is not None:
        incoming.staged.path.unlink(missing_ok=True)
        return existing, False
    report = Report(run_id=run.id, name=_display_name(incoming.name), kind=kind,
                    sha256=incoming.staged.sha256, size_bytes=incoming.staged.size_bytes,
                    status=ReportStatus.QUEUED, upload_path=_store(storage, incoming.staged, placed))
    session.add(report)
    session.flush()
    return report, True


@dataclass(frozen=True)
class Submitter:
    """Who uploads: the name shown (the owning person, else a service token's name) and the ids that let
    them delete the run later."""

    name: str | None
    user_id: int | None = None
    token_id: int | None = None


def _check_name(name: str) -> None:
    if has_control(name or ""):
        raise ApiError("VALIDATION_ERROR", "File names must not contain control characters.",
                       {"fields": {"name": "no control characters"}, "file": (name or "")[:100].encode(
                           "unicode_escape").decode("ascii")})


# An Idempotency-Key: what clients generate (a UUID, a scheduler's job and step id), printable ASCII.
_IDEMPOTENCY_KEY = re.compile(r"[!-~]{1,255}\Z")


def idempotency_digest(key: str | None, submitter: Submitter) -> str | None:
    """The stored form of an ``Idempotency-Key`` header (None without one): a digest of the key and who sent
    it, so one client's key never finds another's run. VALIDATION_ERROR for a malformed key."""
    if key is None:
        return None
    if not _IDEMPOTENCY_KEY.match(key):
        raise ApiError("VALIDATION_ERROR", "The Idempotency-Key header must be 1-255 printable ASCII characters "
                       "(a UUID, for example).", {"fields": {"Idempotency-Key": "1-255 printable ASCII characters"}})
    who = f"u{submitter.user_id}" if submitter.user_id is not None else f"t{submitter.token_id}:{submitter.name}"
    return hashlib.sha256(f"{who}\x00{key}".encode()).hexdigest()


def run_for_key(session: Session, digest: str | None) -> Run | None:
    """The run an earlier upload with the same key created (RUN_DELETED if it was deleted since)."""
    if digest is None:
        return None
    run = session.scalar(sa.select(Run).where(Run.idempotency_key == digest))
    if run is not None and run.deleted_at is not None:
        raise ApiError("RUN_DELETED", f"Run {run.id}, which an upload with this Idempotency-Key created, was "
                       "deleted; upload again with a new key.", {"run_id": run.id})
    return run


def create_run(session: Session, settings: Settings, meta: RunMeta, files: list[Incoming],
               submitter: str | Submitter | None, *, idempotency_key: str | None = None,
               ) -> tuple[Run, list[Report]]:
    """Create a run with its reports (deduplicated by content), commit, then enqueue each new ingest.

    ``idempotency_key`` (from ``idempotency_digest``): when another request with the same key committed its run
    first, that run is returned and nothing is created."""
    from app import queue

    if not isinstance(submitter, Submitter):
        submitter = Submitter(submitter)
    for incoming in files:
        _check_name(incoming.name)
    kinds = [_kind(f) for f in files]  # every file is checked before anything is stored
    storage = storage_for(settings)
    job = _job(session, meta.job)
    run = Run(job_id=job.id, tags=meta.tags or {}, git_sha=meta.git_sha, cluster=meta.cluster,
              submitter=submitter.name, submitter_user_id=submitter.user_id,
              submitter_token_id=submitter.token_id, source=meta.source, status=RunStatus.QUEUED,
              analysis_window=meta.window, idempotency_key=idempotency_key)
    session.add(run)
    try:
        session.flush()
    except IntegrityError:  # the same key at the same moment: the other request's run is the answer
        session.rollback()
        other = run_for_key(session, idempotency_key)
        if other is None:
            raise
        return other, list(other.reports)
    reports: list[Report] = []
    new_ids: list[int] = []
    placed: list[str] = []
    try:
        for incoming, kind in zip(files, kinds, strict=True):
            report, created = _add_report(session, storage, run, incoming, kind, placed)
            if report not in reports:
                reports.append(report)
            if created:
                new_ids.append(report.id)
        refresh_status(session, run)
        session.commit()
    except BaseException:
        _unplace(session, storage, placed)
        raise
    for report_id in new_ids:
        queue.enqueue_ingest(settings, report_id)
    logger.info("run created with %d report(s)", len(reports), extra={"run_id": run.id})
    return run, reports


def add_report(session: Session, settings: Settings, run_id: int, incoming: Incoming,
               ) -> tuple[Report, bool]:
    """Add one file to an existing run; the same bytes return the existing report (created False)."""
    from app import queue

    _check_name(incoming.name)
    run = get_run(session, run_id)
    kind = _kind(incoming)
    storage = storage_for(settings)
    placed: list[str] = []
    try:
        report, created = _add_report(session, storage, run, incoming, kind, placed)
        if created:
            refresh_status(session, run)
        session.commit()
    except IntegrityError:  # the same bytes uploaded twice at the same moment: the other one won
        session.rollback()
        other = session.scalar(sa.select(Report).where(Report.run_id == run_id,
                                                       Report.sha256 == incoming.staged.sha256))
        if other is None:
            _unplace(session, storage, placed)
            raise
        report = other
        created = False
    except BaseException:
        _unplace(session, storage, placed)
        raise
    if created:
        queue.enqueue_ingest(settings, report.id)
    return report, created
