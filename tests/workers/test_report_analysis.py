"""Per-report analysis job state on SQLite and PostgreSQL: the run-level step is queued and
claimed exactly once however many reports finish together; leases, crashes and stale analyses."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
import sqlalchemy as sa

from app.models import Report, Run, utcnow
from app.services.jobs import pipeline
from app.services.jobs import report_analysis as ra
from app.services.storage import storage_for
from tests.workers.conftest import make_run
from workers.runtime import session_scope

OWNERS = [f"host-{i}:{i}/task-{i}" for i in range(8)]


def _ingested(settings, files, job="fan") -> tuple[int, list[int]]:
    """A run whose reports are ingested and waiting for their own analysis (``analyzing``, no lease)."""
    with session_scope(settings) as s:
        run_id, ids = make_run(s, settings, files, job=job)
        for rid in ids:
            assert pipeline.claim_report(s, rid, OWNERS[0], 60)
            out = pipeline.trace_path_for(settings, rid)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(b"x")
            assert pipeline.finish_ingest(s, rid, OWNERS[0], out, "nsys", {}, storage_for(settings),
                                          then="analyzing") is None
            assert s.get(Report, rid).status == "analyzing"
    return run_id, ids


def _together(fns) -> list:
    """Run the callables in threads released at the same moment; their results in order."""
    barrier = threading.Barrier(len(fns))
    out: list = [None] * len(fns)

    def go(i):
        barrier.wait()
        out[i] = fns[i]()

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_reports_finishing_their_analysis_together_queue_and_claim_the_run_once(settings):
    for round_ in range(3):
        run_id, ids = _ingested(settings, [(f"r{round_}-{k}", f"{round_}-{k}".encode()) for k in range(4)],
                                job=f"race{round_}")
        for rid, owner in zip(ids, OWNERS, strict=False):
            with session_scope(settings) as s:
                claim = ra.claim_report_analysis(s, rid, owner, 60)
                assert claim and claim.run_id == run_id

        def finish(rid, owner):
            def f():
                with session_scope(settings) as s:
                    return ra.finish_report_analysis(s, rid, owner, f"reports/{rid}/analysis-x", "steady")
            return f

        queued = _together([finish(rid, owner) for rid, owner in zip(ids, OWNERS, strict=False)])
        assert sorted(queued, key=str) == sorted([run_id, None, None, None], key=str)

        def claim_run(owner, run_id=run_id):
            def f():
                with session_scope(settings) as s:
                    return pipeline.claim_run_analysis(s, run_id, owner, 60)
            return f

        claims = _together([claim_run(o) for o in OWNERS[:4]])
        won = [c for c in claims if c is not None]
        assert len(won) == 1 and won[0].report_ids == ids
        assert won[0].analysis_paths == [f"reports/{rid}/analysis-x" for rid in ids]
        with session_scope(settings) as s:
            run = s.get(Run, run_id)
            assert (run.analysis_status, run.analysis_attempts) == ("analyzing", 1)


def test_a_claimed_report_analysis_is_exclusive_and_a_redelivery_takes_it_back(session, settings):
    _, [rid] = _ingested(settings, [("a", b"a")])
    assert ra.claim_report_analysis(session, rid, OWNERS[1], 60)
    assert not ra.claim_report_analysis(session, rid, OWNERS[2], 60)         # held by a live lease
    assert ra.claim_report_analysis(session, rid, "other-host:9/task-1", 60)  # same message, delivered again
    session.expire_all()
    assert session.get(Report, rid).analysis_attempts == 2


def test_a_failed_rank_does_not_block_the_run_and_is_named(session, settings):
    run_id, [a, b] = _ingested(settings, [("rank0.sqlite", b"0"), ("rank1.sqlite", b"1")])
    assert ra.claim_report_analysis(session, a, OWNERS[1], 60)
    assert ra.claim_report_analysis(session, b, OWNERS[2], 60)
    assert pipeline.fail_report(session, b, "analysis_failed", "broken", owner=OWNERS[2]) is None
    assert ra.finish_report_analysis(session, a, OWNERS[1], "reports/x/analysis-a", "steady") == run_id
    assert [(m["report"], m["error_code"]) for m in ra.missing_reports(session, run_id)] == [
        ("rank1.sqlite", "analysis_failed")]
    from analysis.api import ReportSummary, missing_ranks

    def report(rank: int, world_size: int) -> ReportSummary:
        return ReportSummary.from_json({"file": f"r{rank}", "tool": "nsys", "rank": rank, "world_size": world_size})

    assert missing_ranks([report(0, 2)]) == [1]
    assert missing_ranks([report(0, 2), report(1, 4)]) == []  # disagree


def test_reconcile_resends_dead_and_lost_report_analyses_and_fails_exhausted_ones(session, settings):
    now = utcnow()
    run_id, [dead, lost, exhausted, live] = _ingested(settings, [(n, n.encode()) for n in
                                                                 ("dead", "lost", "exhausted", "live")])
    for rid in (dead, exhausted, live):
        assert ra.claim_report_analysis(session, rid, OWNERS[1], 60)
    past = now - timedelta(seconds=5)
    session.execute(sa.update(Report).where(Report.id.in_([dead, exhausted])).values(lease_expires_at=past))
    session.execute(sa.update(Report).where(Report.id == exhausted).values(analysis_attempts=3))
    session.execute(sa.update(Report).where(Report.id == lost).values(updated_at=now - timedelta(seconds=120)))
    session.commit()
    todo = pipeline.reconcile(session, lease_seconds=60, max_attempts=3, now=now)
    assert sorted(todo.analyses) == sorted([dead, lost]) and todo.reports == [] and todo.runs == []
    session.expire_all()
    assert (session.get(Report, exhausted).status, session.get(Report, exhausted).error_code) == (
        "failed", "worker_crashed")
    assert session.get(Report, dead).status == "analyzing" and session.get(Report, dead).lease_owner is None
    assert session.get(Report, live).lease_owner == OWNERS[1]
    assert ra.claim_report_analysis(session, dead, OWNERS[3], 60)


def test_stale_report_analyses_are_sent_back_before_the_run_level_step(session, settings):
    run_id, [a, b] = _ingested(settings, [("a", b"a"), ("b", b"b")])
    for rid, owner in ((a, OWNERS[1]), (b, OWNERS[2])):
        assert ra.claim_report_analysis(session, rid, owner, 60)
    assert ra.finish_report_analysis(session, a, OWNERS[1], "reports/a/analysis-1", "steady") is None
    assert ra.finish_report_analysis(session, b, OWNERS[2], "reports/b/analysis-1", "steady") == run_id
    # A re-analysis with another window: both reports need their own analysis for it first.
    session.execute(sa.update(Run).where(Run.id == run_id).values(analysis_window="all"))
    session.commit()
    assert pipeline.claim_run_analysis(session, run_id, OWNERS[3], 60)
    assert ra.stale_reports(session, run_id, "steady") == []
    assert ra.stale_reports(session, run_id, "all") == [a, b]
    assert ra.send_back(session, run_id, OWNERS[3], [a, b]) == [a, b]
    session.expire_all()
    run = session.get(Run, run_id)
    assert (run.analysis_status, run.analysis_attempts, run.status) == ("queued", 0, "processing")
    assert [session.get(Report, r).status for r in (a, b)] == ["analyzing", "analyzing"]
    assert pipeline.claim_run_analysis(session, run_id, OWNERS[4], 60) is None  # waits for its reports


@pytest.mark.parametrize("settings", ["sqlite"], indirect=True)
def test_an_ncu_report_is_linked_to_the_runs_nsys_kernels_in_the_run_level_step(session, settings, tmp_path):
    """Task bodies called directly: an nsys report analyzed on its own, an ncu report of the same run in the
    run-level step (its kernels' nsys time from the nsys report's facts): what the offline analysis gives."""
    from analysis.api import analyze
    from app.models import Finding
    from app.queue import ANALYZE_REPORT_TASK, ANALYZE_TASK, INGEST_TASK
    from tests.analysis.ncu_builders import long_csv, write
    from tests.analysis.test_ncu_link import LATENCY_70, NSYS, nsys_kernels
    from tests.conftest import corpus_file
    from workers.celery_app import make_celery

    tasks = make_celery(settings).tasks
    (name, (_, _, grid, block)), = nsys_kernels().items()  # linked by name, grid and block
    csv = write(tmp_path, long_csv(LATENCY_70, kernels=[{"Kernel Name": name, "Grid Size": f"({grid}, 1, 1)",
                                                         "Block Size": f"({block}, 1, 1)"}]))
    run_id, [ncu, nsys] = make_run(session, settings, [("kernels.csv", csv.read_bytes()),
                                                        (NSYS, corpus_file(NSYS).read_bytes())])
    assert tasks[INGEST_TASK](ncu) == "ready" and tasks[INGEST_TASK](nsys) == "ready"
    session.expire_all()
    assert (session.get(Report, ncu).status, session.get(Report, nsys).status) == ("ready", "analyzing")
    assert tasks[ANALYZE_REPORT_TASK](nsys) == "ready"
    assert tasks[ANALYZE_TASK](run_id) == "ready"
    traces = [settings.data_dir / session.get(Report, r).trace_path for r in (ncu, nsys)]
    expected = analyze(traces, labels=["kernels.csv", NSYS]).to_json()
    rows = session.scalars(sa.select(Finding).where(Finding.run_id == run_id).order_by(Finding.position)).all()
    assert [(f.rule_id, f.report, f.impact_ns, f.title) for f in rows] == [
        (f["rule_id"], f["report"], f["impact_ns"], f["title"]) for f in expected["findings"]]
    (ncu005,) = [f for f in rows if f.rule_id == "NCU005"]
    assert ncu005.extra["linked_to_nsys"] is True
