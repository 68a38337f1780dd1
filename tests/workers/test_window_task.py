"""The analyze task reads the run's analysis window and stores what the library computes
for that window; a window the report cannot give fails the analysis with its message."""

from __future__ import annotations

import sqlalchemy as sa

from analysis.api import analyze
from app.models import Finding, Report, Run, RunSummary
from app.queue import ANALYZE_REPORT_TASK, ANALYZE_TASK, INGEST_TASK
from tests.conftest import corpus_file
from tests.workers.conftest import make_run
from workers.celery_app import make_celery


def test_analyze_task_uses_the_runs_window(session, settings):
    tasks = make_celery(settings).tasks
    path = corpus_file("cupy-power-iteration.sqlite")
    run_id, [rid] = make_run(session, settings, [(path.name, path.read_bytes())])
    session.execute(sa.update(Run).where(Run.id == run_id).values(analysis_window="iterations:2-4"))
    session.commit()
    assert tasks[INGEST_TASK](rid) == "ready"
    assert tasks[ANALYZE_REPORT_TASK](rid) == "ready"
    assert tasks[ANALYZE_TASK](run_id) == "ready"
    trace = settings.data_dir / f"reports/{rid}/trace.duckdb"
    expected = analyze([trace], labels=[path.name], window="iterations:2-4").to_json()
    rows = session.scalars(sa.select(Finding).where(Finding.run_id == run_id).order_by(Finding.position)).all()
    assert [(f.rule_id, f.impact_ns, f.extra.get("phase")) for f in rows] == [
        (f["rule_id"], f["impact_ns"], f["phase"]) for f in expected["findings"]]
    summary = session.scalar(sa.select(RunSummary).where(RunSummary.run_id == run_id, RunSummary.report_id == rid))
    assert summary.data["window"]["phase"] == "iterations"
    assert summary.span_ns == expected["reports"][0]["breakdown"]["span_ns"]


def test_a_window_the_report_lacks_fails_the_analysis(session, settings):
    tasks = make_celery(settings).tasks
    path = corpus_file("vecadd-2026.sqlite")
    run_id, [rid] = make_run(session, settings, [(path.name, path.read_bytes())])
    session.execute(sa.update(Run).where(Run.id == run_id).values(analysis_window="nvtx:no such range"))
    session.commit()
    assert tasks[INGEST_TASK](rid) == "ready"
    # The report's own analysis is where the window is resolved: it fails the report with the
    # message, and the run, which has no other report, with it.
    assert tasks[ANALYZE_REPORT_TASK](rid) == "analysis_failed"
    session.expire_all()
    report = session.get(Report, rid)
    assert report.status == "failed" and "no NVTX range named" in report.error_message
    run = session.get(Run, run_id)
    assert run.analysis_status == "failed"


def test_an_uploaded_window_outside_the_report_fails_its_analysis_with_bad_window_and_the_valid_range(session, settings):
    # An upload's window can only be checked once its report is ingested: the report's analysis ends with
    # bad_window naming what the report has (never a crash, a format error or a retry).
    tasks = make_celery(settings).tasks
    path = corpus_file("cupy-power-iteration.sqlite")
    for window, valid in (("iterations:100000-100001", "valid: iterations:A-B with 0 <= A <= B <= "),
                          ("time:3600s-7200s", "valid: time:T0-T1 with T0 < "), ("loop:5", "valid: loop:0 to loop:0")):
        run_id, [rid] = make_run(session, settings, [(path.name, path.read_bytes())])
        session.execute(sa.update(Run).where(Run.id == run_id).values(analysis_window=window))
        session.commit()
        assert tasks[INGEST_TASK](rid) == "ready"
        assert tasks[ANALYZE_REPORT_TASK](rid) == "analysis_failed"
        session.expire_all()
        report = session.get(Report, rid)
        assert (report.status, report.error_code) == ("failed", "analysis_failed"), window
        assert report.error_message.startswith("bad_window: ") and valid in report.error_message, report.error_message
        run = session.get(Run, run_id)
        assert run.analysis_status == "failed"
        # The run says what happened: ingested, and the window fits none (not "could not be ingested").
        assert run.error.startswith("the analysis window fits none of the run's reports") and "bad_window" in run.error
