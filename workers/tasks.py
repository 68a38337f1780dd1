"""The Celery tasks: claim the job in the metadata DB, call `analysis` under a heartbeat, persist the outcome via
the pipeline, and on failure record the (code, message) ``workers.failures.classify`` gives."""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import Any

from celery import Celery, Task
from celery.exceptions import SoftTimeLimitExceeded

from analysis.errors import TraceError
from app.models import AnalysisStatus, ReportStatus
from app.queue import (
    ANALYZE_REPORT_TASK,
    ANALYZE_TASK,
    INGEST_TASK,
    PURGE_TASK,
    RECONCILE_TASK,
    enqueue_analyze,
    enqueue_analyze_report,
    enqueue_ingest,
)
from app.services.jobs import operations, pipeline
from app.services.storage import storage_for
from app.settings import Settings
from workers.failures import UNEXPECTED, Step, analysis_failure, classify
from workers.runtime import Heartbeat, prune_delivered_messages, session_scope

logger = logging.getLogger(__name__)


def worker_id(task: Task) -> str:
    """Lease owner: host and pid say who, the task id lets a re-delivered message take its job back."""
    return f"{socket.gethostname()}:{os.getpid()}/{task.request.id}"


def _settings(task: Task) -> Settings:
    return task.app.goodput_settings


def run_ingest(task: Task, report_id: int) -> str:
    """Body of ``ingest.report``: returns what happened (for logs and tests)."""
    from analysis.api import AnalysisStep, Limits, ToolKind, ingest, report_step

    settings = _settings(task)
    owner = worker_id(task)
    with session_scope(settings) as session:
        claim = pipeline.claim_report(session, report_id, owner, settings.lease_seconds,
                                      max_attempts=settings.max_attempts)
    if not claim or claim.upload_path is None:
        if claim.analyze_run_id is not None:  # attempts used up just now, which completed the run
            enqueue_analyze(settings, claim.analyze_run_id)
        return "skipped"
    storage = storage_for(settings)
    # We hold the lease: whatever a killed earlier attempt left in the report's folder can go.
    storage.remove_attempt_leftovers(report_id)
    src = operations.source_of(settings, claim.upload_path, claim.sha256)
    if src is None:
        with session_scope(settings) as session:
            run_id = pipeline.fail_report(session, report_id, "upload_missing",
                                          "the stored export is gone (deleted, or older than "
                                          "GOODPUT_KEEP_UPLOADS_DAYS); upload the file again", owner=owner)
        if run_id is not None:
            enqueue_analyze(settings, run_id)
        return "upload_missing"
    rel_src = storage.key_of(src)
    # The export is kept scrubbed of the job's environment; a kept copy is ingested as it is.
    from_kept = operations.is_kept_copy(rel_src)
    keep_rel = None if from_kept else storage.kept_path(claim.sha256)
    out = pipeline.trace_path_for(settings, report_id)
    limits = Limits(max_bytes=settings.max_upload_bytes, timeout_s=float(settings.ingest_timeout_seconds),
                    memory_bytes=settings.ingest_memory_bytes)
    last = [0.0]

    def progress(stage: str, done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] < 1.0 and done < total:
            return  # one row update a second is plenty for a progress bar
        last[0] = now
        try:
            with session_scope(settings) as s:
                pipeline.set_progress(s, report_id, owner, stage, done, total)
        except Exception:  # a progress bar is not worth failing an ingest for
            logger.warning("progress update failed", exc_info=True, extra={"report_id": report_id})

    failure: tuple[str, str] | None = None
    result = None
    with Heartbeat(settings, lambda s: pipeline.renew_report_lease(s, report_id, owner, settings.lease_seconds)):
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            result = ingest(src, out, limits=limits, progress=progress,
                            keep=storage.path(keep_rel) if keep_rel else None)
        except Exception as exc:
            failure = classify(exc, Step("ingest", settings.ingest_timeout_seconds, "GOODPUT_INGEST_TIMEOUT_SECONDS"))
            if failure[0] == "internal":
                logger.exception("ingest crashed", extra={"report_id": report_id})
        if failure is None and result is not None and result.tool == ToolKind.NSYS:
            # Under the lease and before the report is ready: a ready report has all its files.
            _prepare_overview(out, report_id)
    own_step = failure is None and result is not None and report_step(result.tool) is AnalysisStep.REPORT
    with session_scope(settings) as session:
        if failure is not None or result is None:
            code, message = failure or ("internal", UNEXPECTED)
            run_id = pipeline.fail_report(session, report_id, code, message, owner=owner)
        else:
            kept = rel_src if from_kept else keep_rel if result.kept is not None else None
            # Reports of a kind analyzed on its own (nsys) are analyzed next; the others (ncu, NCCL logs)
            # in the run-level step.
            run_id = pipeline.finish_ingest(session, report_id, owner, out, result.tool, result.info,
                                            storage, upload_path=kept,
                                            then=ReportStatus.ANALYZING if own_step else ReportStatus.READY)
        # The original upload goes once no report needs it: replaced by the scrubbed copy, or refused for good.
        operations.release_upload(session, settings, claim.upload_path)
    if run_id is not None:
        enqueue_analyze(settings, run_id)
    if failure is None and own_step:
        # If the publish above lost its lease, the claim of this message finds nothing to do.
        enqueue_analyze_report(settings, report_id)
    return failure[0] if failure else ReportStatus.READY


def _prepare_overview(path, report_id: int) -> None:
    """The run timeline's overview of the new report, built here so no page view waits for it;
    best effort: the web process builds a missing one on first use."""
    from analysis.api import prepare_overview

    try:
        prepare_overview(path)
    except Exception:
        logger.warning("timeline overview not built", exc_info=True, extra={"report_id": report_id})


def run_analyze_report(task: Task, report_id: int) -> str:
    """Body of ``analyze.report``: one report's own analysis and cross-rank facts, written
    beside its trace; the report becomes ready, and the run's last one queues the run-level step."""
    from analysis.api import analyze_report_into
    from app.services.jobs import report_analysis as ra

    settings = _settings(task)
    owner = worker_id(task)
    with session_scope(settings) as session:
        claim = ra.claim_report_analysis(session, report_id, owner, settings.lease_seconds,
                                         max_attempts=settings.max_attempts)
    if not claim or claim.trace_path is None:
        if claim.analyze_run_id is not None:  # attempts used up just now, which completed the run
            enqueue_analyze(settings, claim.analyze_run_id)
        return "skipped"
    storage = storage_for(settings)
    # Each attempt writes its own folder; the metadata DB names the published one.
    folder = storage.report_dir(report_id) / f"{ra.ANALYSIS_DIR}-{task.request.id or os.getpid()}"
    failure: tuple[str, str] | None = None
    try:
        with Heartbeat(settings, lambda s: ra.renew_lease(s, report_id, owner, settings.lease_seconds)):
            spec_text = analyze_report_into(pipeline.data_path(settings, claim.trace_path), claim.label, folder,
                                            window=claim.window, thresholds=claim.thresholds,
                                            memory_bytes=settings.analysis_memory_bytes)
    except Exception as exc:
        failure = analysis_failure(exc, Step("the report's analysis", LIGHT_TIME_LIMIT_S))
        _log_failure(exc, "report analysis", {"report_id": report_id})
    with session_scope(settings) as session:
        if failure is not None:
            ra.note_window(session, report_id, owner, _window_text(claim.window))
            run_id = pipeline.fail_report(session, report_id, failure[0], failure[1], owner=owner)
        else:
            run_id = ra.finish_report_analysis(session, report_id, owner,
                                               storage.key_of(folder), spec_text)
    if failure is None:
        _drop_old_analyses(storage.report_dir(report_id), keep=folder.name)
    if run_id is not None:
        enqueue_analyze(settings, run_id)
    return failure[0] if failure else ReportStatus.READY


def _drop_old_analyses(report_dir, keep: str) -> None:
    """Folders of earlier (or killed) analysis attempts of the report, once another is published."""
    import shutil

    from app.services.jobs.report_analysis import ANALYSIS_DIR

    for d in report_dir.glob(f"{ANALYSIS_DIR}-*"):
        if d.name != keep and d.is_dir():
            shutil.rmtree(d, ignore_errors=True)


def _run_level(settings: Settings, inputs: pipeline.AnalysisInputs, missing: list | None) -> Any:
    """The run-level step over the reports' published analyses; the kinds the run step analyses (ncu
    reports, linked to the nsys reports' kernel facts; NCCL logs) are analyzed here."""
    from analysis.api import AnalysisStep, RunReport, analyze_run_step, report_step

    reports = [RunReport(kind, pipeline.data_path(settings, path), label,
                         None if report_step(kind) is AnalysisStep.RUN or rel is None
                         else pipeline.data_path(settings, rel))
               for kind, path, label, rel in zip(inputs.kinds, inputs.paths, inputs.labels, inputs.analysis_paths,
                                                 strict=True)]
    return analyze_run_step(reports, window=inputs.window, thresholds=inputs.thresholds,
                            memory_bytes=settings.analysis_memory_bytes, missing=missing)


def run_analyze(task: Task, run_id: int) -> str:
    """Body of ``analyze.run``: the run-level step over the reports' own analyses, which
    replaces the run's findings; reports not yet analyzed for the run's window are sent to it first."""
    from app.services.jobs import report_analysis as ra

    settings = _settings(task)
    owner = worker_id(task)
    with session_scope(settings) as session:
        inputs = pipeline.claim_run_analysis(session, run_id, owner, settings.lease_seconds,
                                             max_attempts=settings.max_attempts)
    if inputs is None:
        return "skipped"
    with session_scope(settings) as session:
        stale = ra.stale_reports(session, run_id, _window_text(inputs.window))
        sent = ra.send_back(session, run_id, owner, stale) if stale else []
        missing = ra.missing_reports(session, run_id)
    if stale:
        for report_id in sent:
            enqueue_analyze_report(settings, report_id)
        return "sent_back"
    if not inputs.paths:
        with session_scope(settings) as session:
            pipeline.fail_run_analysis(session, run_id, owner, "no report of this run could be ingested")
        return AnalysisStatus.FAILED
    try:
        # Under a heartbeat like ingest: a long analysis keeps its lease, only a dead worker loses it.
        with Heartbeat(settings, lambda s: pipeline.renew_run_lease(s, run_id, owner, settings.lease_seconds)):
            result = _run_level(settings, inputs, missing)
    except Exception as exc:
        _log_failure(exc, "analysis", {"run_id": run_id})
        _code, message = analysis_failure(exc, Step("analysis", LIGHT_TIME_LIMIT_S))
        with session_scope(settings) as session:
            pipeline.fail_run_analysis(session, run_id, owner, message)
        return AnalysisStatus.FAILED
    with session_scope(settings) as session:
        pipeline.finish_run_analysis(session, run_id, owner, inputs, result)
    return AnalysisStatus.READY


def _log_failure(exc: BaseException, what: str, extra: dict[str, int]) -> None:
    """A trace problem or a time limit is the input's; anything else is ours and gets its traceback."""
    if isinstance(exc, (TraceError, SoftTimeLimitExceeded, OSError)):
        logger.warning("%s failed: %s", what, exc, extra=extra)
    else:
        logger.exception("%s crashed", what, extra=extra)


def _window_text(window: str | None) -> str:
    from analysis.api import window_text

    return window_text(window)


def run_reconcile(task: Task) -> dict[str, list[int]]:
    """Body of ``reconcile.leases``: re-queue expired leases and jobs a broker may have lost."""
    settings = _settings(task)
    with session_scope(settings) as session:
        todo = pipeline.reconcile(session, lease_seconds=settings.lease_seconds,
                                  max_attempts=settings.max_attempts)
    for report_id in todo.reports:
        enqueue_ingest(settings, report_id)
    for report_id in todo.analyses:
        enqueue_analyze_report(settings, report_id)
    for run_id in todo.runs:
        enqueue_analyze(settings, run_id)
    if todo.reports or todo.runs or todo.analyses:
        logger.info("reconcile re-queued reports %s, report analyses %s and runs %s", todo.reports,
                    todo.analyses, todo.runs)
    try:
        with session_scope(settings) as session:
            due = operations.upload_sweep_due(settings)
            swept = operations.sweep_leftovers(session, settings, uploads=due)
            if due:
                swept += operations.expire_uploads(session, settings)
        if swept:
            logger.info("reconcile removed %d leftover or expired files", swept)
    except Exception:  # file cleanup must never stop the re-queueing above from running next time
        logger.warning("sweeping leftovers failed", exc_info=True)
    prune_delivered_messages(settings)
    return {"reports": todo.reports, "runs": todo.runs, "analyses": todo.analyses}


def run_purge(task: Task, run_id: int) -> int:
    """Body of ``purge.run``: delete a deleted run's rows and every file no report refers to any more."""
    settings = _settings(task)
    with session_scope(settings) as session:
        gone = pipeline.delete_run_rows(session, run_id) or []
    with session_scope(settings) as session:
        removed = pipeline.remove_report_files(session, settings, gone)
    with session_scope(settings) as session:
        # Files orphaned by a crash between a row and its file (an hour old, so no upload in flight).
        return removed + pipeline.collect_garbage(session, settings)


# Time allowed to analyze or purge one run; both read the metadata DB and a few DuckDB files.
LIGHT_TIME_LIMIT_S = 900


def time_limits(limit: int) -> tuple[int, int]:
    """(soft, hard) Celery time limits of a task whose own deadline is ``limit`` seconds.

    The task's own deadline fires first; the soft limit (an exception in the task, which needs the task's
    thread to run Python) next; the hard one last. It is enforced by the worker's main process, which kills
    the pool process: the one limit that still holds when the task's thread is stuck in C code holding the GIL.
    """
    grace = min(30, max(2, limit // 10))
    return limit + grace, limit + 2 * grace


def _fail_killed(task: Task, exc: BaseException, task_id: str, report_id: int, what: str, limit_s: int,
                 setting: str | None) -> None:
    """``on_failure`` of the report tasks. Called in the worker's main process after the hard time limit
    killed the pool process running the task: the report is failed with ``timeout`` now (retrying would only
    freeze the next process for as long), if that task still holds it."""
    from celery.exceptions import TimeLimitExceeded

    if not isinstance(exc, TimeLimitExceeded):
        return  # anything else ended inside the task, which recorded it
    settings = _settings(task)
    message = f"{what} took longer than {limit_s} s" + (f" ({setting})" if setting else "") + \
        " and was stopped"
    try:
        with session_scope(settings) as session:
            run_id = pipeline.fail_report(session, int(report_id), "timeout", message, task_id=task_id)
        if run_id is not None:
            enqueue_analyze(settings, run_id)
        logger.warning("%s of report %s stopped at its hard time limit", what, report_id,
                       extra={"report_id": report_id, "task_id": task_id})
    except Exception:  # the lease then runs out and reconcile takes over
        logger.warning("could not fail a report after its time limit", exc_info=True,
                       extra={"report_id": report_id})


def register_tasks(app: Celery, *, ingest_limit: int, light_limit: int = LIGHT_TIME_LIMIT_S) -> None:
    """Register the five tasks on ``app`` under their explicit names."""
    # shared=False: register on this app only (a shared task would join every app made later).
    common = {"bind": True, "shared": False, "acks_late": True, "reject_on_worker_lost": True}

    ingest_soft, ingest_hard = time_limits(ingest_limit)
    light_soft, light_hard = time_limits(light_limit)

    def ingest_failed(self: Task, exc, task_id, args, kwargs, einfo) -> None:
        _fail_killed(self, exc, task_id, (list(args) or [kwargs.get("report_id")])[0], "ingest", ingest_hard,
                     "GOODPUT_INGEST_TIMEOUT_SECONDS")

    def report_analysis_failed(self: Task, exc, task_id, args, kwargs, einfo) -> None:
        _fail_killed(self, exc, task_id, (list(args) or [kwargs.get("report_id")])[0], "the report's analysis",
                     light_hard, None)

    @app.task(name=INGEST_TASK, soft_time_limit=ingest_soft, time_limit=ingest_hard, on_failure=ingest_failed,
              **common)
    def ingest_report(self: Task, report_id: int) -> str:
        return run_ingest(self, report_id)

    @app.task(name=ANALYZE_TASK, soft_time_limit=light_soft, time_limit=light_hard, **common)
    def analyze_run(self: Task, run_id: int) -> str:
        return run_analyze(self, run_id)

    @app.task(name=ANALYZE_REPORT_TASK, soft_time_limit=light_soft, time_limit=light_hard,
              on_failure=report_analysis_failed, **common)
    def analyze_report(self: Task, report_id: int) -> str:
        return run_analyze_report(self, report_id)

    @app.task(name=RECONCILE_TASK, soft_time_limit=120, time_limit=180, **common)
    def reconcile_leases(self: Task) -> dict[str, list[int]]:
        return run_reconcile(self)

    @app.task(name=PURGE_TASK, soft_time_limit=light_soft, time_limit=light_hard, **common)
    def purge_run(self: Task, run_id: int) -> int:
        return run_purge(self, run_id)

