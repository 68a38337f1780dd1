"""Task bodies called directly (no broker round trip, no eager mode) against a real metadata DB and exports."""

from __future__ import annotations

import json
import shutil
from datetime import timedelta

import pytest
import sqlalchemy as sa
from kombu import Connection

from analysis.api import analyze
from app.models import Finding, Report, Run, RunSummary, utcnow
from app.queue import (
    ANALYZE_REPORT_TASK,
    ANALYZE_TASK,
    INGEST_QUEUE,
    INGEST_TASK,
    LIGHT_QUEUE,
    PURGE_TASK,
    RECONCILE_TASK,
)
from tests.conftest import corpus_file
from tests.workers.conftest import make_run
from workers.celery_app import make_celery


def _queued(settings, queue: str) -> int:
    with Connection(settings.resolved_broker_url) as conn:
        return conn.SimpleQueue(queue).qsize()


def _report(session, rid) -> Report:
    session.expire_all()
    return session.get(Report, rid)


def test_ingest_then_analyze_store_what_the_library_computes(session, settings):
    tasks = make_celery(settings).tasks
    path = corpus_file("vecadd-2026.sqlite")
    run_id, [rid] = make_run(session, settings, [(path.name, path.read_bytes())])
    assert tasks[INGEST_TASK](rid) == "ready"
    r = _report(session, rid)
    # Ingested; its own analysis is queued next, on the heavy queue.
    assert (r.status, r.attempts, r.lease_owner, r.error_code) == ("analyzing", 1, None, None)
    assert r.progress["stage"] == "done" and r.counts and r.tool_version == r.info["tool_version"]
    trace = settings.data_dir / r.trace_path
    assert trace.is_file() and r.trace_path == f"reports/{rid}/trace.duckdb"
    assert (_queued(settings, INGEST_QUEUE), _queued(settings, LIGHT_QUEUE)) == (1, 0)
    assert tasks[INGEST_TASK](rid) == "skipped"  # a duplicate message changes nothing
    assert _report(session, rid).attempts == 1
    assert tasks[ANALYZE_REPORT_TASK](rid) == "ready"
    r = _report(session, rid)
    assert (r.status, r.analysis_attempts, r.lease_owner, r.analysis_window) == ("ready", 1, None, "steady")
    assert (settings.data_dir / r.analysis_path / "analysis.json").is_file()
    assert _queued(settings, LIGHT_QUEUE) == 1  # the run is complete: its run-level step was queued
    assert tasks[ANALYZE_REPORT_TASK](rid) == "skipped"

    assert tasks[ANALYZE_TASK](run_id) == "ready"
    expected = analyze([trace], labels=[path.name]).to_json()
    rows = session.execute(sa.select(Finding).where(Finding.run_id == run_id).order_by(Finding.position)).scalars().all()
    assert [(f.rule_id, f.impact_ns, f.title) for f in rows] == [
        (f["rule_id"], f["impact_ns"], f["title"]) for f in expected["findings"]]
    summary = session.execute(sa.select(RunSummary).where(RunSummary.run_id == run_id,
                                                          RunSummary.report_id == rid)).scalar_one()
    assert summary.data == json.loads(json.dumps(expected["reports"][0]))
    run = session.get(Run, run_id)
    session.refresh(run)
    assert (run.analysis_status, run.status) == ("ready", "ready")
    assert [r["id"] for r in run.rule_statuses] == [r["id"] for r in expected["rules"]]
    assert tasks[ANALYZE_TASK](run_id) == "skipped"  # already analyzed


def test_ingest_records_the_typed_error(session, settings):
    tasks = make_celery(settings).tasks
    data = bytearray(corpus_file("vecadd-2026.sqlite").read_bytes())
    for off in range(len(data) // 3, len(data) // 3 + 40_000, 997):
        data[off] ^= 0xFF  # damaged pages behind a valid header
    run_id, [rid] = make_run(session, settings, [("damaged.sqlite", bytes(data))])
    assert tasks[INGEST_TASK](rid) == "corrupt"
    r = _report(session, rid)
    assert (r.status, r.error_code, r.attempts) == ("failed", "corrupt", 1)
    assert r.error_message and r.trace_path is None
    run = session.get(Run, run_id)
    session.refresh(run)
    assert (run.status, run.analysis_status) == ("failed", "failed")
    assert not (settings.data_dir / "reports" / str(rid) / "trace.duckdb").exists()


@pytest.mark.parametrize("settings", ["sqlite"], indirect=True)
def test_a_lost_upload_is_a_typed_error_not_a_retry_loop(session, settings):
    tasks = make_celery(settings).tasks
    _, [rid] = make_run(session, settings, [("a.sqlite", b"whatever")])
    (settings.data_dir / _report(session, rid).upload_path).unlink()
    assert tasks[INGEST_TASK](rid) == "upload_missing"
    assert (_report(session, rid).status, _report(session, rid).error_code) == ("failed", "upload_missing")
    assert "upload the file again" in _report(session, rid).error_message


@pytest.mark.parametrize("settings", ["sqlite"], indirect=True)
def test_reconcile_task_sends_lost_jobs_again(session, settings):
    tasks = make_celery(settings).tasks
    _, [rid] = make_run(session, settings, [("a.sqlite", b"whatever")])
    session.execute(sa.update(Report).where(Report.id == rid).values(updated_at=utcnow() - timedelta(hours=1)))
    session.commit()
    assert tasks[RECONCILE_TASK]() == {"reports": [rid], "runs": [], "analyses": []}
    assert _queued(settings, INGEST_QUEUE) == 1
    with Connection(settings.resolved_broker_url) as conn:
        conn.SimpleQueue(INGEST_QUEUE).get(timeout=5).ack()
    broker = sa.create_engine(settings.resolved_broker_url.removeprefix("sqla+"))
    count = sa.text("SELECT count(*) FROM kombu_message")
    with broker.connect() as conn:
        assert conn.execute(count).scalar_one() == 1  # delivered, kept by kombu
    assert tasks[RECONCILE_TASK]() == {"reports": [], "runs": [], "analyses": []}
    with broker.connect() as conn:
        assert conn.execute(count).scalar_one() == 0  # pruned by reconcile
    broker.dispose()


@pytest.mark.parametrize("settings", ["sqlite"], indirect=True)
def test_purge_task_removes_a_deleted_run(session, settings):
    tasks = make_celery(settings).tasks
    path = corpus_file("a30-mig.sqlite")
    run_id, [rid] = make_run(session, settings, [(path.name, path.read_bytes())])
    assert tasks[INGEST_TASK](rid) == "ready"
    upload = settings.data_dir / _report(session, rid).upload_path
    assert tasks[PURGE_TASK](run_id) == 0  # a live run is never purged
    assert upload.exists()
    session.execute(sa.update(Run).where(Run.id == run_id).values(deleted_at=utcnow()))
    session.commit()
    assert tasks[PURGE_TASK](run_id) == 2
    session.expire_all()
    assert session.get(Run, run_id) is None and session.get(Report, rid) is None
    assert not upload.exists() and not (settings.data_dir / "reports" / str(rid)).exists()
    shutil.rmtree(settings.data_dir / "uploads", ignore_errors=True)


@pytest.mark.parametrize("settings", ["sqlite"], indirect=True)
def test_an_analysis_that_cannot_read_its_trace_fails_the_run_once(session, settings):
    tasks = make_celery(settings).tasks
    path = corpus_file("a30-mig.sqlite")
    run_id, [rid] = make_run(session, settings, [(path.name, path.read_bytes())])
    assert tasks[INGEST_TASK](rid) == "ready"
    (settings.data_dir / _report(session, rid).trace_path).write_bytes(b"not a duckdb file" * 100)
    # The report's own analysis fails it; with no other report, the run fails with it.
    assert tasks[ANALYZE_REPORT_TASK](rid) == "analysis_failed"
    r = _report(session, rid)
    assert (r.status, r.error_code, r.lease_owner) == ("failed", "analysis_failed", None)
    run = session.get(Run, run_id)
    session.refresh(run)
    assert (run.analysis_status, run.status, run.analysis_lease_owner) == ("failed", "failed", None)
    assert run.error
    assert tasks[ANALYZE_REPORT_TASK](rid) == "skipped"
    assert tasks[ANALYZE_TASK](run_id) == "skipped"  # a failed analysis is not retried by a stray message
