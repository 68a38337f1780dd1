"""Job state in the metadata DB (SQLite and PostgreSQL): claims, leases, attempts, results, reconcile, purge."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from analysis.api import AnalysisResult, Breakdown, Evidence, FindingResult, ReportSummary, RuleStatus
from app.models import Finding, Report, Run, RunSummary, utcnow
from app.services.jobs import pipeline
from app.services.storage import storage_for
from tests.workers.conftest import make_run

OWNER_A = "host-a:1/task-a"
OWNER_B = "host-b:2/task-b"


def _report(session, rid):
    session.expire_all()
    return session.get(Report, rid)


def _run(session, run_id):
    session.expire_all()
    return session.get(Run, run_id)


def _publish(session, settings, rid, owner, content=b"duckdb"):
    out = pipeline.trace_path_for(settings, rid)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(content)
    info = {"tool_version": "2024.5.1", "counts": {"kernels": 3}, "rank": 7, "host": "node-7"}
    return pipeline.finish_ingest(session, rid, owner, out, "nsys", info, storage_for(settings))


def test_claim_is_exclusive_and_counts_attempts(session, settings):
    run_id, [rid] = make_run(session, settings, [("a.sqlite", b"A")])
    first = pipeline.claim_report(session, rid, OWNER_A, 60)
    assert first and first.upload_path.startswith("uploads/") and first.attempts == 1
    assert not pipeline.claim_report(session, rid, OWNER_B, 60)
    r = _report(session, rid)
    assert (r.status, r.attempts, r.lease_owner) == ("ingesting", 1, OWNER_A)
    assert r.lease_expires_at > utcnow() + timedelta(seconds=50)
    assert _run(session, run_id).status == "processing"


def test_redelivered_message_takes_its_job_back_and_cap_fails_it(session, settings):
    run_id, [rid] = make_run(session, settings, [("a.sqlite", b"A")])
    # The same task id (a message re-delivered after its worker died) may reclaim a live lease.
    for attempt in (1, 2, 3):
        claim = pipeline.claim_report(session, rid, f"host:{attempt}/same-task", 60, max_attempts=3)
        assert claim and claim.attempts == attempt
    fourth = pipeline.claim_report(session, rid, "host:4/same-task", 60, max_attempts=3)
    assert not fourth and fourth.analyze_run_id is None  # nothing left to analyze
    r = _report(session, rid)
    assert (r.status, r.error_code, r.attempts) == ("failed", "worker_crashed", 3)
    assert "3 times" in r.error_message
    run = _run(session, run_id)
    assert (run.analysis_status, run.status) == ("failed", "failed")
    assert "no report" in run.error


def test_finish_publishes_once_and_completes_the_run_on_the_last_report(session, settings):
    run_id, [r1, r2] = make_run(session, settings, [("r0.sqlite", b"0"), ("r1.sqlite", b"1")])
    assert pipeline.claim_report(session, r1, OWNER_A, 60)
    assert pipeline.claim_report(session, r2, OWNER_B, 60)
    pipeline.set_progress(session, r1, OWNER_A, "kernels", 5, 10)
    assert _report(session, r1).progress == {"stage": "kernels", "done": 5, "total": 10}
    assert _publish(session, settings, r1, OWNER_B) is None  # not the lease holder: dropped
    assert _report(session, r1).status == "ingesting"
    assert _publish(session, settings, r1, OWNER_A) is None   # the other report is still running
    r = _report(session, r1)
    assert (r.status, r.trace_path, r.tool_version, r.counts) == (
        "ready", f"reports/{r1}/trace.duckdb", "2024.5.1", {"kernels": 3})
    assert r.lease_owner is None
    assert (r.rank, r.host) == (0, "node-7")  # the upload's rank wins; the export fills in the host
    assert _publish(session, settings, r1, OWNER_A) is None   # a second publish changes nothing
    assert pipeline.fail_report(session, r2, "corrupt", "bad page", owner=OWNER_B) == run_id
    r = _report(session, r2)
    assert (r.status, r.error_code, r.error_message) == ("failed", "corrupt", "bad page")
    assert _run(session, run_id).analysis_status == "queued"


def _analysis_result(labels):
    def breakdown(i):
        return Breakdown(compute_ns=60, comm_overlapped_ns=0, comm_exposed_ns=0, memory_only_ns=i, idle_ns=40,
                         span_ns=100 + i, goodput_pct=60.0, rank=None, devices=())

    return AnalysisResult(
        window="steady",
        reports=tuple(ReportSummary(file=lab, tool="nsys", breakdown=breakdown(i)) for i, lab in enumerate(labels)),
        findings=(
            FindingResult(rule_id="GPU001", severity="warning", title="Idle", message="<b>gaps</b>", impact_ns=40,
                          impact_pct=40.0, advice="overlap", report=labels[0], rank=0,
                          evidence=(Evidence(start_ns=1),), evidence_total=7, phase="steady",
                          extra={"speedup_pct": 12.5}),
            FindingResult(rule_id="COMM001", severity="info", title="Exposed comm", message="m", impact_ns=5,
                          impact_pct=1.0, advice="a", report=None, rank=None, evidence=(), evidence_total=0,
                          phase="steady"),
        ),
        rules=(RuleStatus("GPU001", "ok"),),
    )


def test_analysis_replaces_findings_and_summaries(session, settings):
    run_id, [r1, r2] = make_run(session, settings, [("same.sqlite", b"0"), ("same.sqlite", b"1")])
    for rid in (r1, r2):
        assert pipeline.claim_report(session, rid, OWNER_A, 60)
    _publish(session, settings, r1, OWNER_A)
    assert _publish(session, settings, r2, OWNER_A) == run_id
    for round_ in (1, 2):  # re-analysis must leave exactly one set of results
        inputs = pipeline.claim_run_analysis(session, run_id, f"h:1/an-{round_}", 60)
        assert inputs.report_ids == [r1, r2]
        assert inputs.labels == [f"same.sqlite#{r1}", f"same.sqlite#{r2}"]  # duplicate names disambiguated
        assert not pipeline.claim_run_analysis(session, run_id, "h:2/other", 60)  # held
        assert pipeline.finish_run_analysis(session, run_id, f"h:1/an-{round_}", inputs, _analysis_result(inputs.labels))
        if round_ == 1:  # a new report landing later queues a fresh analysis
            session.execute(sa.update(Run).where(Run.id == run_id).values(analysis_status="queued"))
            session.commit()
    rows = session.execute(sa.select(Finding).where(Finding.run_id == run_id).order_by(Finding.position)).scalars().all()
    assert [(f.rule_id, f.report_id, f.position) for f in rows] == [("GPU001", r1, 0), ("COMM001", None, 1)]
    assert rows[0].extra == {"phase": "steady", "speedup_pct": 12.5} and rows[0].message == "<b>gaps</b>" and rows[0].evidence_total == 7
    sums = session.execute(sa.select(RunSummary).where(RunSummary.run_id == run_id)).scalars().all()
    by_report = {s.report_id: s for s in sums}
    assert set(by_report) == {r1, r2, None}
    assert (by_report[r1].span_ns, by_report[r1].compute_ns, by_report[r1].idle_ns) == (100, 60, 40)
    assert (by_report[r1].goodput_pct, by_report[r1].comm_exposed_ns) == (60.0, 0)
    assert (by_report[r1].finding_count, by_report[r1].top_impact_ns) == (1, 40)
    assert (by_report[None].span_ns, by_report[None].idle_ns, by_report[None].finding_count) == (201, 80, 2)
    assert by_report[None].goodput_pct == round(100 * 120 / 201, 3)
    run = _run(session, run_id)
    assert (run.analysis_status, run.status, run.analysis_attempts) == ("ready", "ready", 2)
    assert run.rule_statuses == [{"id": "GPU001", "status": "ok", "reason": None, "findings": 0}] and run.analyzed_at is not None


def test_analysis_waits_for_every_report(session, settings):
    run_id, [r1, _r2] = make_run(session, settings, [("a", b"0"), ("b", b"1")])
    assert pipeline.claim_report(session, r1, OWNER_A, 60)
    _publish(session, settings, r1, OWNER_A)
    session.execute(sa.update(Run).where(Run.id == run_id).values(analysis_status="queued"))
    session.commit()
    assert pipeline.claim_run_analysis(session, run_id, OWNER_A, 60) is None


def test_reconcile_requeues_expired_and_lost_jobs(session, settings):
    now = utcnow()
    _, [expired, exhausted, stale, fresh, running] = make_run(
        session, settings, [(n, n.encode()) for n in ("expired", "exhausted", "stale", "fresh", "running")])
    for rid in (expired, exhausted, running):
        assert pipeline.claim_report(session, rid, OWNER_A, 60)
    past = now - timedelta(seconds=5)
    session.execute(sa.update(Report).where(Report.id.in_([expired, exhausted])).values(lease_expires_at=past))
    session.execute(sa.update(Report).where(Report.id == exhausted).values(attempts=3))
    session.execute(sa.update(Report).where(Report.id == stale).values(updated_at=now - timedelta(seconds=120)))
    session.commit()
    todo = pipeline.reconcile(session, lease_seconds=60, max_attempts=3, now=now)
    assert sorted(todo.reports) == sorted([expired, stale])
    assert todo.runs == []
    assert (_report(session, expired).status, _report(session, expired).attempts) == ("queued", 1)
    assert (_report(session, exhausted).status, _report(session, exhausted).error_code) == ("failed", "worker_crashed")
    assert _report(session, running).status == "ingesting"
    assert _report(session, fresh).status == "queued"
    # Re-sent jobs are not re-sent again on the next tick, only after another lease period.
    assert pipeline.reconcile(session, lease_seconds=60, max_attempts=3, now=now).reports == []
    later = pipeline.reconcile(session, lease_seconds=60, max_attempts=3, now=now + timedelta(seconds=61))
    assert sorted(later.reports) == sorted([expired, stale, fresh, running])  # running: its lease ran out too


def test_reconcile_requeues_a_lost_analysis(session, settings):
    run_id, [rid] = make_run(session, settings, [("a", b"0")])
    assert pipeline.claim_report(session, rid, OWNER_A, 60)
    assert _publish(session, settings, rid, OWNER_A) == run_id
    assert pipeline.claim_run_analysis(session, run_id, OWNER_A, 60)
    now = utcnow()
    assert pipeline.reconcile(session, lease_seconds=60, now=now).runs == []  # lease still live
    todo = pipeline.reconcile(session, lease_seconds=60, now=now + timedelta(seconds=61))
    assert todo.runs == [run_id]
    assert _run(session, run_id).analysis_status == "queued"
    assert pipeline.claim_run_analysis(session, run_id, OWNER_B, 60).report_ids == [rid]
    assert _run(session, run_id).analysis_attempts == 2


def test_garbage_collection_removes_orphans_only(session, settings):
    _, [rid] = make_run(session, settings, [("k", b"kept")])
    orphan_dir = settings.data_dir / "reports" / "999999"
    orphan_dir.mkdir(parents=True)
    (orphan_dir / "trace.duckdb").write_bytes(b"x")
    orphan_upload = settings.data_dir / "uploads" / "ab" / ("ab" * 32)
    orphan_upload.parent.mkdir(parents=True)
    orphan_upload.write_bytes(b"y")
    assert pipeline.collect_garbage(session, settings) == 0  # young files may belong to an upload in flight
    assert pipeline.collect_garbage(session, settings, min_age_s=0) == 2
    assert not orphan_dir.exists() and not orphan_upload.exists()
    assert (settings.data_dir / _report(session, rid).upload_path).exists()


def test_purge_deletes_a_deleted_run_and_its_files(session, settings):
    keep_run, [keep] = make_run(session, settings, [("k", b"shared")])
    run_id, [rid, other] = make_run(session, settings, [("x", b"shared"), ("y", b"only-here")])
    for r in (keep, rid):
        assert pipeline.claim_report(session, r, OWNER_A, 60)
        _publish(session, settings, r, OWNER_A)
    assert pipeline.delete_run_rows(session, run_id) is None  # not marked deleted: kept
    session.execute(sa.update(Run).where(Run.id == run_id).values(deleted_at=utcnow(), status="deleted"))
    session.commit()
    gone = pipeline.delete_run_rows(session, run_id)
    assert sorted(g[0] for g in gone) == sorted([rid, other])
    assert _run(session, run_id) is None and _report(session, other) is None
    assert pipeline.remove_report_files(session, settings, gone) == 2  # reports/<rid> and the unshared upload
    assert pipeline.collect_garbage(session, settings, min_age_s=0) == 0
    assert not pipeline.trace_path_for(settings, rid).parent.exists()
    assert pipeline.trace_path_for(settings, keep).exists()
    remaining = sorted(p.name for p in (settings.data_dir / "uploads").glob("*/*"))
    assert remaining == [_report(session, keep).sha256]
    assert _run(session, keep_run).status == "processing"


def test_reports_finishing_together_queue_the_analysis_once(settings):
    """Two workers publish the last two reports at the same moment: exactly one of them queues the analysis."""
    import threading

    from workers.runtime import session_scope

    for _ in range(3):
        with session_scope(settings) as s:
            run_id, ids = make_run(s, settings, [(f"a{_}", f"a{_}".encode()), (f"b{_}", f"b{_}".encode())], job="race")
            for rid in ids:
                assert pipeline.claim_report(s, rid, OWNER_A, 60)
                out = pipeline.trace_path_for(settings, rid)
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(b"x")
        barrier = threading.Barrier(2)
        results: list[int | None] = []

        def publish(rid: int, barrier=barrier, results=results) -> None:
            with session_scope(settings) as s:
                barrier.wait()
                results.append(pipeline.finish_ingest(s, rid, OWNER_A, pipeline.trace_path_for(settings, rid),
                                                      "nsys", {}, storage_for(settings)))

        threads = [threading.Thread(target=publish, args=(rid,)) for rid in ids]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results, key=str) == sorted([run_id, None], key=str)
