"""Fault tolerance with real processes: a killed worker, a poison file, a Redis that forgot its queues."""

from __future__ import annotations

import hashlib
import time

import pytest

from tests.conftest import corpus_file
from tests.e2e.services import wait_for
from tests.reliability.helpers import LANES_VERSION, OVERVIEW_VERSION

pytestmark = [pytest.mark.slow, pytest.mark.services]


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _report(svc, run_id):
    [report] = svc.get(f"/runs/{run_id}")["reports"]
    return report


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_worker_killed_during_ingest_finishes_exactly_once(make_service, backend):
    svc = make_service(backend)
    svc.start_web()
    path = corpus_file("vecadd-2026.sqlite")
    doomed = svc.start_worker(GOODPUT_TEST_SLOW=f"{_sha(path)}=60")  # holds the ingest until we kill it
    svc.start_beat()
    run_id = svc.upload([path], job="killed")["id"]
    wait_for(lambda: _report(svc, run_id)["status"] == "ingesting", 30, "the ingest to start")
    svc.kill_worker(doomed)
    assert _report(svc, run_id)["status"] == "ingesting"  # nobody knows yet: only the lease will tell
    svc.start_worker()
    run = svc.wait_run(run_id, timeout=90)
    assert run["status"] == "ready", svc.log_tail()
    [report] = run["reports"]
    assert (report["status"], report["attempts"], report["error"]) == ("ready", 2, None)
    findings = svc.get(f"/runs/{run_id}/findings?page_size=200")
    keys = [(f["rule_id"], f["report"], f["impact_ns"], f["title"]) for f in findings["items"]]
    assert len(keys) == len(set(keys)) == findings["total"]  # one result, not two
    time.sleep(2 * svc.settings.lease_seconds)  # reconcile keeps running: it must leave a finished job alone
    after = svc.get(f"/runs/{run_id}")
    assert (after["reports"][0]["attempts"], after["reports"][0]["status"], after["status"]) == (2, "ready", "ready")
    assert svc.get(f"/runs/{run_id}/findings?page_size=200")["total"] == findings["total"]
    report_dir = svc.settings.data_dir / "reports" / str(report["id"])
    # The trace, its timeline overview and its own analysis ; nothing of the killed attempt.
    names = sorted(p.name for p in report_dir.iterdir())
    assert names[1:] == ["trace.duckdb", f"trace.lanes-v{LANES_VERSION}.json",
                         f"trace.overview-v{OVERVIEW_VERSION}.parquet"] and names[0].startswith("analysis-")


def test_poison_file_fails_after_max_attempts_while_others_finish(make_service):
    svc = make_service()
    svc.start_web()
    poison = corpus_file("cupy-a100.sqlite")
    good = corpus_file("vecadd-2026.sqlite")
    svc.start_worker(concurrency=1, GOODPUT_TEST_POISON=_sha(poison))
    bad_run = svc.upload([poison], job="poison")["id"]
    good_run = svc.upload([good], job="fine")["id"]
    bad = svc.wait_run(bad_run, timeout=120)
    report = bad["reports"][0]
    assert (report["status"], report["attempts"]) == ("failed", 3), svc.log_tail()
    assert report["error"]["code"] == "worker_crashed"
    assert "3 times" in report["error"]["message"]
    assert bad["status"] == "failed"
    assert svc.wait_run(good_run)["status"] == "ready"
    assert svc.workers[0].poll() is None  # the worker survived its pool processes' deaths


def test_ingest_longer_than_its_lease_keeps_it(make_service):
    svc = make_service()
    svc.start_web()
    path = corpus_file("vecadd-2026.sqlite")
    lease = svc.settings.lease_seconds
    # Two pool processes and reconcile every second: a lease without heartbeat would be handed over.
    svc.start_worker(concurrency=2, GOODPUT_TEST_SLOW=f"{_sha(path)}={3 * lease}")
    svc.start_beat()
    run = svc.wait_run(svc.upload([path], job="slow")["id"], timeout=90)
    assert run["status"] == "ready", svc.log_tail()
    assert run["reports"][0]["attempts"] == 1


def test_redis_restart_under_a_busy_worker_loses_no_job(make_service, redis_server):
    svc = make_service()
    svc.start_web()
    first = corpus_file("vecadd-2026.sqlite")
    svc.start_worker(concurrency=1, GOODPUT_TEST_SLOW=f"{_sha(first)}=6")
    svc.start_beat()
    busy = svc.upload([first], job="busy")["id"]
    wait_for(lambda: _report(svc, busy)["status"] == "ingesting", 30, "the first ingest to start")
    waiting = [svc.upload([corpus_file(n)], job="busy")["id"] for n in ("a30-mig.sqlite", "cupy-a100.sqlite")]
    assert redis_server.queued("ingest") == 2  # prefetch 1: the busy worker took nothing else
    redis_server.restart()
    for run_id in [busy, *waiting]:
        run = svc.wait_run(run_id, timeout=120)
        assert run["status"] == "ready", svc.log_tail()
        assert run["reports"][0]["attempts"] == 1


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_an_ingest_holding_the_gil_is_stopped_by_the_hard_limit_and_fails_once_with_timeout(make_service, backend):
    """Issue #45 item 5: an ingest stuck in C code holding the GIL (the scrub's old quadratic search) runs no
    signal handler, deadline or heartbeat. The worker's main process kills it at the hard time limit, fails the
    report with ``timeout`` at once (no second attempt freezing the next process), and the next upload is
    ingested by the replacement pool process."""
    limit = 6  # hard limit 10 s (workers.tasks.time_limits); the lease outlives it, so no re-queue meanwhile
    svc = make_service(backend, ingest_timeout_seconds=limit, lease_seconds=30)
    svc.start_web()
    frozen, good = corpus_file("cupy-a100.sqlite"), corpus_file("vecadd-2026.sqlite")
    svc.start_worker(concurrency=1, GOODPUT_TEST_HOLD_GIL=_sha(frozen))
    svc.start_beat()
    started = time.monotonic()
    bad = svc.wait_run(svc.upload([frozen], job="frozen")["id"], timeout=60)
    elapsed = time.monotonic() - started
    [report] = bad["reports"]
    assert (report["status"], report["attempts"], report["error"]["code"]) == ("failed", 1, "timeout"), \
        svc.log_tail()
    assert "GOODPUT_INGEST_TIMEOUT_SECONDS" in report["error"]["message"]
    assert elapsed < 40, elapsed  # the search alone would hold the process for minutes
    assert svc.wait_run(svc.upload([good], job="after")["id"], timeout=60)["status"] == "ready", svc.log_tail()
    assert svc.workers[0].poll() is None


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_reconcile_leaves_the_files_of_a_retried_ingest_alone(make_service, backend):
    """Issue #45 item 3: after a worker was killed mid-ingest, attempt 2 runs under a live lease, but the sweep
    counted every report with attempts > 1 as a leftover and deleted attempt 2's temporary DuckDB file; the
    report ended failed/internal. Here attempt 2 holds its temporary file for several reconcile ticks."""
    svc = make_service(backend)
    svc.start_web()
    path = corpus_file("vecadd-2026.sqlite")
    sha = _sha(path)
    doomed = svc.start_worker(GOODPUT_TEST_HOLD_AFTER_COPY=f"{sha}=60")
    svc.start_beat()
    run_id = svc.upload([path], job="retried")["id"]
    report_id = _report(svc, run_id)["id"]
    folder = svc.settings.data_dir / "reports" / str(report_id)
    wait_for(lambda: folder.is_dir() and any(p.name.endswith(".tmp") for p in folder.iterdir()), 60,
             "the first attempt's temporary file")
    svc.kill_worker(doomed)
    # Two pool processes: reconcile (and its sweep) runs beside the held ingest, every second.
    svc.start_worker(concurrency=2, GOODPUT_TEST_HOLD_AFTER_COPY=f"{sha}={3 * svc.settings.lease_seconds}")
    run = svc.wait_run(run_id, timeout=120)
    [report] = run["reports"]
    assert (run["status"], report["status"], report["attempts"]) == ("ready", "ready", 2), svc.log_tail()
