"""Task bodies on an NCCL debug log (called directly against a real metadata DB and broker, no eager mode): the
log is ingested, skips the per-report analysis (the run step analyzes it), and the run stores what the library
computes; a log that cannot be read fails with its typed code like any other report."""

from __future__ import annotations

import dataclasses
import json

import sqlalchemy as sa
from kombu import Connection

from analysis.api import analyze
from app.models import Report, Run, RunSummary
from app.queue import ANALYZE_TASK, INGEST_QUEUE, INGEST_TASK, LIGHT_QUEUE
from tests.conftest import corpus_dir
from tests.workers.conftest import make_run
from workers.celery_app import make_celery

LOG = corpus_dir() / "nccl" / "thomaslie210__NCCL_Test_Results__2x1-a100pcie-ib-gdr-on-allreduce-2.16.log"
BIG = corpus_dir() / "nccl" / "abhivijay96__nccl-tests__1x3-a100-p2pdirect-coll-alltoall-2.7.log"


def _queued(settings, queue: str) -> int:
    with Connection(settings.resolved_broker_url) as conn:
        return conn.SimpleQueue(queue).qsize()


def test_a_log_is_ingested_then_analyzed_in_the_run_step(session, settings):
    tasks = make_celery(settings).tasks
    run_id, [rid] = make_run(session, settings, [(LOG.name, LOG.read_bytes())])
    assert tasks[INGEST_TASK](rid) == "ready"
    session.expire_all()
    r = session.get(Report, rid)
    # No per-report analysis for a log: ready at once, the run's step queued on the light queue, nothing heavy.
    assert (r.kind, r.status, r.attempts, r.error_code, r.analysis_path) == ("nccl", "ready", 1, None, None)
    assert r.tool_version == "2.16.5" and r.counts["nodes"] == 2
    assert (_queued(settings, INGEST_QUEUE), _queued(settings, LIGHT_QUEUE)) == (0, 1)
    assert tasks[ANALYZE_TASK](run_id) == "ready"
    expected = analyze([settings.data_dir / r.trace_path], labels=[LOG.name]).to_json()
    total = session.execute(sa.select(RunSummary).where(RunSummary.run_id == run_id,
                                                        RunSummary.report_id.is_(None))).scalar_one()
    assert total.data["network_path"] == json.loads(json.dumps(expected["network_path"]))
    assert total.data.get("verdict") == expected.get("verdict")  # none: NCCL found nothing serious in this log
    run = session.get(Run, run_id)
    session.refresh(run)
    assert (run.status, run.analysis_status) == ("ready", "ready")
    assert [s["id"] for s in run.rule_statuses] == [s["id"] for s in expected["rules"]]


def test_a_log_that_takes_too_long_fails_with_its_typed_code(session, settings):
    slow = dataclasses.replace(settings, ingest_timeout_seconds=0)  # any read of the 4 MB log is too long
    tasks = make_celery(slow).tasks
    run_id, [rid] = make_run(session, slow, [(BIG.name, BIG.read_bytes())])
    assert tasks[INGEST_TASK](rid) == "timeout"
    session.expire_all()
    r = session.get(Report, rid)
    assert (r.status, r.error_code, r.attempts, r.trace_path) == ("failed", "timeout", 1, None)
    assert "GOODPUT_INGEST_TIMEOUT_SECONDS" in r.error_message or "took longer" in r.error_message
    assert not (slow.data_dir / "reports" / str(rid) / "trace.duckdb").exists()
    run = session.get(Run, run_id)
    session.refresh(run)
    assert run.status == "failed"
