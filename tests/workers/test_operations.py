"""Operations on SQLite and PostgreSQL with real files: leftovers swept, uploads released and expired, retry,
re-ingest (the services, the task bodies and the `goodput retry|reanalyze|reingest` commands)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from kombu import Connection

from app.errors import ApiError
from app.models import Report, Run, utcnow
from app.queue import (
    ANALYZE_REPORT_TASK,
    ANALYZE_TASK,
    INGEST_QUEUE,
    INGEST_TASK,
    LIGHT_QUEUE,
    RECONCILE_TASK,
)
from app.services.jobs import operations, pipeline
from app.services.storage import LocalStorage as Storage
from goodput_cli.main import main
from tests.conftest import ROOT, corpus_file
from tests.workers.conftest import make_run
from workers.celery_app import make_celery

OWNER = "host-a:1/task-a"


def _queued(settings, queue: str) -> int:
    with Connection(settings.resolved_broker_url) as conn:
        return conn.SimpleQueue(queue).qsize()


def _report(session, rid) -> Report:
    session.expire_all()
    return session.get(Report, rid)


def _set(session, rid, **values) -> None:
    session.execute(sa.update(Report).where(Report.id == rid).values(**values))
    session.commit()


def _killed_upload(storage: Storage) -> Path:
    """A staged file left by a web process SIGKILLed while receiving it (a real process, really killed)."""
    code = ("import os, signal, sys; from app.services.storage import LocalStorage as Storage; "
            f"sink = Storage({str(storage.root)!r}).open_sink(10**6, 'x.sqlite'); "
            "sink.write(b'SQLite format 3' + bytes(1) + b'partial'); print(sink.path, flush=True); "
            "os.kill(os.getpid(), signal.SIGKILL)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == -signal.SIGKILL, done.stderr
    path = Path(done.stdout.strip())
    assert path.is_file()
    return path


def _old(path, seconds=7200) -> None:
    past = time.time() - seconds
    os.utime(path, (past, past))


def test_sweep_removes_leftovers_of_dead_attempts_and_uploads_but_not_live_ones(session, settings):
    settings = replace(settings, lease_seconds=5)
    storage = Storage(settings.data_dir)
    run_id, [dead, live, failed] = make_run(session, settings, [("a", b"A"), ("b", b"B"), ("c", b"C")])
    # `dead`: its worker was killed (lease expired, re-queued); `live`: being ingested right now.
    _set(session, dead, status="queued", attempts=1)
    assert pipeline.claim_report(session, live, OWNER, 600)
    _set(session, failed, status="failed", error_code="corrupt", attempts=1)
    for rid in (dead, live):
        folder = storage.report_dir(rid)
        folder.mkdir(parents=True)
        (folder / ".trace.duckdb.0a1b.tmp").write_bytes(b"partial")
        (folder / ".trace.duckdb.0a1b.tmp.spill").mkdir()
        for f in folder.iterdir():
            _old(f, 60)  # a dead attempt stopped writing at least a lease ago
    # Staging: one upload whose receiving process was killed, one still streaming, one received in full and
    # waiting for the rest of its multipart request (its file is finished, not yet stored).
    abandoned = _killed_upload(storage)
    streaming = storage.open_sink(10**6, "y.sqlite")
    streaming.write(b"SQLite format 3\x00still coming")
    waiting = storage.open_sink(10**6, "z.sqlite")
    waiting.write(b"SQLite format 3\x00complete")
    waiting.finish()
    for staged in (abandoned, streaming.path, waiting.path):
        _old(staged, 60)
    raw_failed = settings.data_dir / _report(session, failed).upload_path  # refused for good: not needed
    try:
        assert operations.sweep_leftovers(session, settings) == 2 + 1 + 0  # raw_failed is recent: kept a while
        assert [p.name for p in storage.report_dir(dead).iterdir()] == []
        assert sorted(p.name for p in storage.report_dir(live).iterdir()) == [
            ".trace.duckdb.0a1b.tmp", ".trace.duckdb.0a1b.tmp.spill"]
        assert not abandoned.exists() and streaming.path.exists() and waiting.path.exists()
        _old(raw_failed, 600)
        assert operations.sweep_leftovers(session, settings) == 1
        assert not raw_failed.exists()
        assert (settings.data_dir / _report(session, dead).upload_path).exists()  # still needed
    finally:
        streaming.discard()
        waiting.discard()


def test_sweep_keeps_the_files_of_a_later_attempt_holding_a_live_lease(session, settings):
    """Issue #45 item 3: after a killed first attempt, attempt 2 holds a live lease; the sweep counted every
    report with attempts > 1 as a suspect and deleted attempt 2's temporary DuckDB file under it. Files
    changed since the sweep looked (an attempt that claimed the report meanwhile) are kept too."""
    settings = replace(settings, lease_seconds=5)
    storage = Storage(settings.data_dir)
    _, [second, queued, after] = make_run(session, settings, [("a", b"A"), ("b", b"B"), ("c", b"C")])
    _set(session, second, status="queued", attempts=1)
    assert pipeline.claim_report(session, second, OWNER, 600).attempts == 2
    _set(session, queued, status="queued", attempts=1)
    _set(session, after, status="ready", attempts=2)
    files = {}
    for rid in (second, queued, after):
        folder = storage.report_dir(rid)
        folder.mkdir(parents=True)
        files[rid] = folder / ".trace.duckdb.5e6f.tmp"
        files[rid].write_bytes(b"being written")
        _old(files[rid], 600)  # written once, long ago (a long ingest's scrubbed copy, a spill file)
    fresh = storage.report_dir(queued) / ".trace.duckdb.9c9c.tmp"
    fresh.write_bytes(b"an attempt that claimed it a moment ago")
    assert operations.sweep_leftovers(session, settings, uploads=False) == 2
    assert files[second].exists() and fresh.exists()
    assert not files[queued].exists() and not files[after].exists()
    assert _report(session, second).status == "ingesting"


def test_sweep_removes_the_kept_copy_temporaries_a_killed_scrub_left(session, settings):
    """Issue #45 follow-up: a worker killed while its scrub child wrote the kept copy leaves
    ``uploads/<sha[:2]>/.<sha>.kept.sqlite.<tag>.work.tmp`` (and its journal) beside the uploads, outside the
    report's folder; once the report is ready after a second attempt they went unswept. They go now, unless a
    live ingest of the same bytes (another report of the same upload) may be writing them."""
    settings = replace(settings, lease_seconds=5)
    storage = Storage(settings.data_dir)
    _, [done, twin] = make_run(session, settings, [("a", b"A"), ("b", b"B")])
    _, [live] = make_run(session, settings, [("b2", b"B")])  # the same bytes in another run
    _set(session, done, status="ready", attempts=2)
    _set(session, twin, status="ready", attempts=2)
    assert pipeline.claim_report(session, live, OWNER, 600)  # same bytes as `twin`, being ingested
    left = {}
    for rid in (done, twin):
        sha = _report(session, rid).sha256
        kept = settings.data_dir / storage.kept_path(sha)
        kept.parent.mkdir(parents=True, exist_ok=True)
        left[rid] = [kept.parent / f".{kept.name}.0a1b.work.tmp", kept.parent / f".{kept.name}.0a1b.work.tmp-journal",
                     kept.parent / f".{kept.name}.0a1b.tmp"]
        for f in left[rid]:
            f.write_bytes(b"half a scrubbed copy")
            _old(f, 60)
    upload = settings.data_dir / _report(session, done).upload_path
    assert operations.sweep_leftovers(session, settings, uploads=False) == 3
    assert not any(f.exists() for f in left[done]) and upload.exists()
    assert all(f.exists() for f in left[twin])


def test_an_upload_is_released_once_no_report_needs_it(session, settings):
    _, [a] = make_run(session, settings, [("a", b"same")])
    _, [b] = make_run(session, settings, [("a", b"same")])  # the same bytes in another run: one file
    rel = _report(session, a).upload_path
    _set(session, a, status="ready", upload_path="uploads/xx/kept")
    assert not operations.release_upload(session, settings, rel)  # b is still queued on it
    _set(session, b, status="failed", error_code="no_space")
    assert not operations.release_upload(session, settings, rel)  # b may be retried
    _set(session, b, error_code="not_nsys_export")
    assert operations.release_upload(session, settings, rel)
    assert not (settings.data_dir / rel).exists()


def test_exports_past_their_retention_are_deleted_and_then_cannot_be_retried(session, settings):
    run_id, [old, young] = make_run(session, settings, [("a", b"old"), ("b", b"young")])
    _set(session, old, status="failed", error_code="no_space", created_at=utcnow() - timedelta(days=3))
    _set(session, young, status="failed", error_code="no_space")
    assert operations.expire_uploads(session, settings) == 0  # default: keep
    kept = replace(settings, keep_uploads_days=2)
    assert operations.expire_uploads(session, kept) == 1
    assert not (settings.data_dir / _report(session, old).upload_path).exists()
    assert (settings.data_dir / _report(session, young).upload_path).exists()
    out = operations.retry_run(session, settings, run_id)
    assert (out.reports, out.missing) == ([young], [old])


def test_retry_requeues_transient_failures_only_and_a_failed_analysis(session, settings):
    run_id, [crashed, bad] = make_run(session, settings, [("a", b"A"), ("b", b"B")])
    _set(session, crashed, status="failed", error_code="worker_crashed", attempts=3, error_message="died")
    _set(session, bad, status="failed", error_code="corrupt", attempts=1)
    out = operations.retry_run(session, settings, run_id)
    assert out.reports == [crashed] and out.analyze_run is None
    r = _report(session, crashed)
    assert (r.status, r.attempts, r.error_code, r.error_message) == ("queued", 0, None, None)
    assert _report(session, bad).status == "failed"
    assert _queued(settings, INGEST_QUEUE) == 1
    assert session.get(Run, run_id).status == "processing"
    with pytest.raises(ApiError) as err:  # only the permanent failure is left
        operations.retry_run(session, settings, run_id)
    assert err.value.code == "NOTHING_TO_RETRY" and err.value.status == 409
    _set(session, crashed, status="ready")
    session.execute(sa.update(Run).where(Run.id == run_id).values(analysis_status="failed", analysis_attempts=3,
                                                                  error="the analysis crashed its worker 3 times"))
    session.commit()
    out = operations.retry_run(session, settings, run_id)
    assert out.analyze_run == run_id and _queued(settings, LIGHT_QUEUE) == 1
    session.expire_all()
    run = session.get(Run, run_id)
    assert (run.analysis_status, run.analysis_attempts, run.error) == ("queued", 0, None)


def test_a_report_failed_for_space_is_retried_from_the_cli_and_ingests(session, settings, monkeypatch, capsys):
    tasks = make_celery(settings).tasks
    path = corpus_file("vecadd-2026.sqlite")
    run_id, [rid] = make_run(session, settings, [(path.name, path.read_bytes())])
    _set(session, rid, status="failed", error_code="no_space", attempts=1)
    monkeypatch.setenv("GOODPUT_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("GOODPUT_DATA_DIR", str(settings.data_dir))
    assert main(["retry", str(run_id)]) == 0
    assert f"reports {rid} queued for ingest again" in capsys.readouterr().out
    assert tasks[INGEST_TASK](rid) == "ready"
    assert main(["retry", str(run_id)]) == 2
    assert "nothing to retry" in capsys.readouterr().err
    assert main(["retry", "999999"]) == 2


def test_reingest_rebuilds_every_report_from_its_kept_export(session, settings, monkeypatch, capsys):
    tasks = make_celery(settings).tasks
    path = corpus_file("a30-mig.sqlite")
    run_id, [rid] = make_run(session, settings, [(path.name, path.read_bytes())])
    raw = settings.data_dir / _report(session, rid).upload_path
    assert tasks[INGEST_TASK](rid) == "ready"
    assert tasks[ANALYZE_REPORT_TASK](rid) == "ready"
    r = _report(session, rid)
    assert r.upload_path == Storage(settings.data_dir).kept_path(r.sha256) and not raw.exists()
    counts = r.counts
    _, [gone] = make_run(session, settings, [("x.sqlite", b"whatever")])
    _set(session, gone, status="ready")
    (settings.data_dir / _report(session, gone).upload_path).unlink()
    monkeypatch.setenv("GOODPUT_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("GOODPUT_DATA_DIR", str(settings.data_dir))
    assert main(["reingest"]) == 0
    captured = capsys.readouterr()
    assert "1 report(s) queued" in captured.out and "skipped" in captured.err and str(gone) in captured.err
    assert _report(session, rid).status == "queued"
    assert tasks[INGEST_TASK](rid) == "ready"
    r = _report(session, rid)
    assert (r.status, r.attempts, r.counts, r.analysis_path) == ("analyzing", 1, counts, None)  # a new trace
    assert tasks[ANALYZE_REPORT_TASK](rid) == "ready"
    r = _report(session, rid)
    assert (r.status, r.attempts, r.counts) == ("ready", 1, counts)
    assert (settings.data_dir / r.upload_path).is_file()  # a kept copy is ingested as it is, not copied again


def test_reconcile_task_sweeps_a_killed_attempt_and_an_abandoned_upload(session, settings):
    settings = replace(settings, lease_seconds=1)
    tasks = make_celery(settings).tasks
    storage = Storage(settings.data_dir)
    _, [rid] = make_run(session, settings, [("a", b"A")])
    _set(session, rid, status="ingesting", attempts=1, lease_owner=OWNER,
         lease_expires_at=utcnow() - timedelta(seconds=30))
    folder = storage.report_dir(rid)
    folder.mkdir(parents=True)
    (folder / ".trace.duckdb.feed.tmp").write_bytes(b"partial")
    _old(folder / ".trace.duckdb.feed.tmp", 30)  # last written by the attempt whose lease ran out 30 s ago
    staged = _killed_upload(storage)
    _old(staged, 5)
    assert tasks[RECONCILE_TASK]() == {"reports": [rid], "runs": [], "analyses": []}
    assert list(folder.iterdir()) == [] and not staged.exists()


def test_the_same_bytes_in_a_later_run_are_ingested_from_the_kept_copy(session, settings):
    tasks = make_celery(settings).tasks
    path = corpus_file("a30-mig.sqlite")
    _, [first] = make_run(session, settings, [(path.name, path.read_bytes())])
    assert tasks[INGEST_TASK](first) == "ready"
    kept = settings.data_dir / _report(session, first).upload_path
    stamp = kept.stat().st_mtime_ns
    _, [second] = make_run(session, settings, [(path.name, path.read_bytes())])  # the original stored again
    raw = settings.data_dir / _report(session, second).upload_path
    assert raw.exists() and raw != kept
    assert tasks[INGEST_TASK](second) == "ready"
    r = _report(session, second)
    assert settings.data_dir / r.upload_path == kept and kept.stat().st_mtime_ns == stamp  # not copied again
    assert not raw.exists() and r.counts == _report(session, first).counts


def test_attempt_leftovers_go_but_the_published_trace_and_its_overview_stay(tmp_path):
    # Reconcile sweeps every report no lease holds: it must not delete the timeline overview the ingest
    # published beside the trace (the run page would rebuild it on every view).
    from analysis.views.run_overview import lanes_path, overview_path
    from app.services.storage import TRACE_NAME
    from app.services.storage import LocalStorage as Storage

    storage = Storage(tmp_path)
    folder = storage.report_dir(7)
    folder.mkdir(parents=True)
    trace = folder / TRACE_NAME
    for name in (TRACE_NAME, overview_path(trace).name, lanes_path(trace).name, f".{TRACE_NAME}.abc.tmp",
                 f".{TRACE_NAME}.abc.tmp.wal", f".{overview_path(trace).name}.123.tmp"):
        (folder / name).write_bytes(b"x")
    (folder / f".{TRACE_NAME}.abc.tmp.spill").mkdir()
    assert storage.remove_attempt_leftovers(7) == 4
    assert sorted(p.name for p in folder.iterdir()) == sorted([TRACE_NAME, overview_path(trace).name,
                                                               lanes_path(trace).name])


def test_reanalyze_from_the_cli_checks_the_window_against_the_stored_report(session, settings, monkeypatch, capsys):
    tasks = make_celery(settings).tasks
    path = corpus_file("cupy-power-iteration.sqlite")
    run_id, [rid] = make_run(session, settings, [(path.name, path.read_bytes())])
    assert tasks[INGEST_TASK](rid) == "ready"
    assert tasks[ANALYZE_REPORT_TASK](rid) == "ready"
    assert tasks[ANALYZE_TASK](run_id) == "ready"
    monkeypatch.setenv("GOODPUT_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("GOODPUT_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("GOODPUT_BROKER_URL", settings.broker_url)
    capsys.readouterr()
    queued = _queued(settings, LIGHT_QUEUE)
    for window, why in (("iterations:0-100000", "valid: iterations:A-B with 0 <= A <= B <= "),
                        ("time:3600s-7200s", "holds none of the report"), ("nvtx:nope", "no NVTX range named"),
                        ("bogus", "is not one of")):
        assert main(["reanalyze", str(run_id), "--window", window]) == 2, window
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and why in err and "Traceback" not in err, err
    assert main(["reanalyze", str(2**70), "--window", "all"]) == 2
    assert main(["reanalyze", "999999", "--window", "all"]) == 2
    session.expire_all()
    assert (session.get(Run, run_id).analysis_window, _queued(settings, LIGHT_QUEUE)) == (None, queued)
    assert main(["reanalyze", str(run_id), "--window", "iterations:2-4"]) == 0
    assert "window iterations:2-4 queued" in capsys.readouterr().out
    assert _queued(settings, LIGHT_QUEUE) == queued + 1
