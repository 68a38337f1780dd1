"""The analysis window end to end: a run uploaded with a window, then analyzed again with another one through the
API, by a real Celery worker process."""

from __future__ import annotations

from tests.conftest import corpus_file
from tests.e2e.services import wait_for


def test_upload_with_window_then_reanalyze(make_service):
    svc = make_service()
    svc.start_web()
    svc.start_worker()
    run = svc.wait_run(svc.upload([corpus_file("cupy-power-iteration.sqlite")], job="w", window="all")["id"])
    assert run["status"] == "ready" and run["analysis_window"] == "all", svc.log_tail()
    whole = svc.get(f"/runs/{run['id']}/summary")
    assert whole["reports"][0]["data"]["window"]["phase"] == "all"

    resp = svc.http.post(f"{svc.base}/api/v1/runs/{run['id']}/analysis", json={"window": "steady"})
    assert resp.status_code == 202, resp.text
    first_done = run["analyzed_at"]
    again = wait_for(lambda: (r := svc.get(f"/runs/{run['id']}"))["analysis_status"] == "ready"
                     and r["analyzed_at"] != first_done and r, 90, f"re-analysis\n{svc.log_tail()}", interval=0.3)
    assert again["analysis_window"] == "steady"
    steady = svc.get(f"/runs/{run['id']}/summary")
    rep = steady["reports"][0]["data"]
    assert rep["window"]["phase"] == "steady" and rep["iterations"]["source"] == "nvtx"
    assert steady["totals"]["span_ns"] < whole["totals"]["span_ns"]
    findings = svc.get(f"/runs/{run['id']}/findings?page_size=200")["items"]
    assert findings and {f["extra"]["phase"] for f in findings} <= {"steady", "startup", "warmup"}


def test_a_window_outside_the_report_is_bad_window_on_upload_and_refused_on_reanalysis(make_service):
    svc = make_service()
    svc.start_web()
    svc.start_worker()
    up = svc.upload([corpus_file("cupy-power-iteration.sqlite")], job="w", window="iterations:100000-100001")
    run = svc.wait_run(up["id"])
    # The worker process ends the report's analysis with the window's own message: no crash, no retries.
    report = run["reports"][0]
    assert (run["analysis_status"], report["status"], report["error"]["code"]) == ("failed", "failed",
                                                                                   "analysis_failed"), run
    message = report["error"]["message"]
    assert message.startswith("bad_window: ") and "valid: iterations:A-B" in message, message
    assert "crashed" not in str(run) and "UNKNOWN_FORMAT" not in str(run)
    # Re-analysis with another window the stored report lacks: refused up front; one it has: analysed.
    resp = svc.http.post(f"{svc.base}/api/v1/runs/{run['id']}/analysis", json={"window": "time:3600s-7200s"})
    assert resp.status_code == 400 and "holds none of the report" in resp.json()["error"]["details"]["fields"]["window"]
    resp = svc.http.post(f"{svc.base}/api/v1/runs/{run['id']}/analysis", json={"window": "iterations:2-4"})
    assert resp.status_code == 202, resp.text
    again = wait_for(lambda: (r := svc.get(f"/runs/{run['id']}"))["analysis_status"] in ("ready", "failed") and r,
                     90, f"re-analysis\n{svc.log_tail()}", interval=0.3)
    assert again["analysis_status"] == "ready" and again["analysis_window"] == "iterations:2-4", again
