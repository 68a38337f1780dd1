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
