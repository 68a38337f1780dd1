"""The analysis window through /api/v1: on upload, recorded on the run, and re-analysis of a
run with another window, processed by the real pipeline and analysis (in-process, no Celery)."""

from __future__ import annotations

import io

import duckdb
import sqlalchemy as sa

from app.models import Report
from tests.app.conftest import process_run, queued
from tests.conftest import corpus_file

CUPY = corpus_file("cupy-power-iteration.sqlite")   # an NVTX step loop with a start-up and a teardown


def upload(client, headers, path, **fields):
    r = client.post("/api/v1/runs", headers=headers, data={**fields, "files": [(io.BytesIO(path.read_bytes()), path.name)]})
    assert r.status_code == 202, r.json
    return r.json["id"]


def test_window_on_upload_is_recorded_and_used(client, auth, session, settings):
    run_id = upload(client, auth["write"], CUPY, job="w", window="all")
    result = process_run(settings, session, run_id)
    run = client.get(f"/api/v1/runs/{run_id}", headers=auth["read"]).json
    assert run["analysis_window"] == "all" and result["window"] == "all"
    assert result["reports"][0]["window"]["phase"] == "all"
    findings = client.get(f"/api/v1/runs/{run_id}/findings?page_size=200", headers=auth["read"]).json["items"]
    assert findings and all(f["extra"]["phase"] in ("all", "startup", "warmup") for f in findings)


def test_reanalysis_with_another_window(client, auth, session, settings, broker):
    run_id = upload(client, auth["write"], CUPY, job="w")
    first = process_run(settings, session, run_id)
    assert client.get(f"/api/v1/runs/{run_id}", headers=auth["read"]).json["analysis_window"] == "steady"
    assert first["reports"][0]["window"]["phase"] == "steady"
    broker.delete("light", "ingest")

    r = client.post(f"/api/v1/runs/{run_id}/analysis", headers=auth["write"], json={"window": "iterations:3-5"})
    assert r.status_code == 202 and r.json["analysis_window"] == "iterations:3-5"
    assert r.json["analysis_status"] == "queued" and r.headers["Location"].endswith(f"/api/v1/runs/{run_id}")
    assert queued(broker, "light") == [{"task": "analyze.run", "args": [run_id]}]

    second = process_run(settings, session, run_id)
    rep = second["reports"][0]
    assert rep["window"]["phase"] == "iterations"
    items = first["reports"][0]["iterations"]["items"]
    assert (rep["window"]["start_ns"], rep["window"]["end_ns"]) == (items[3]["start_ns"], items[6]["start_ns"])
    summary = client.get(f"/api/v1/runs/{run_id}/summary", headers=auth["read"]).json
    assert summary["totals"]["span_ns"] == rep["breakdown"]["span_ns"] < first["reports"][0]["breakdown"]["span_ns"]


def test_bad_windows_are_rejected(client, auth, session, settings):
    bad = client.post("/api/v1/runs", headers=auth["write"],
                      data={"window": "time:9-1", "files": [(io.BytesIO(CUPY.read_bytes()), CUPY.name)]})
    assert bad.status_code == 400 and "window" in bad.json["error"]["details"]["fields"]
    run_id = client.post("/api/v1/runs", headers=auth["write"], json={"job": "j"}).json["id"]
    r = client.post(f"/api/v1/runs/{run_id}/analysis", headers=auth["write"], json={"window": "bogus"})
    assert r.status_code == 400 and r.json["error"]["code"] == "VALIDATION_ERROR"
    assert client.post(f"/api/v1/runs/{run_id}/analysis", headers=auth["write"], json={}).status_code == 400
    assert client.post("/api/v1/runs/999999/analysis", headers=auth["write"], json={"window": "all"}).status_code == 404
    assert client.post(f"/api/v1/runs/{run_id}/analysis", headers=auth["read"], json={"window": "all"}).status_code == 403


def test_a_window_longer_than_its_column_is_refused_before_anything_is_stored():
    from app.errors import ApiError
    from app.services.jobs.runs import MAX_WINDOW_CHARS, parse_window

    assert parse_window("nvtx:" + "x" * (MAX_WINDOW_CHARS - 5)) is not None
    try:
        parse_window("nvtx:" + "x" * (MAX_WINDOW_CHARS - 4))
    except ApiError as exc:
        assert exc.code == "VALIDATION_ERROR" and "window" in exc.details["fields"]
    else:
        raise AssertionError("a 201-character window was accepted")


EXTREME_WINDOWS = ["time:0-" + "9" * 400, "time:0-1e400", "time:0-9223372036854775808ns", "nvtx:a\x00b",
                   "nvtx:\x7f", "nvtx:x\u0085", "iterations:0-" + "9" * 30, "time:0-" + "9" * 10_000, "nvtx:" + "n" * 300]


def test_extreme_windows_are_400_on_create_and_reanalysis_and_change_nothing(client, auth, session):
    run_id = client.post("/api/v1/runs", headers=auth["write"], json={"job": "j", "window": "all"}).json["id"]
    for window in EXTREME_WINDOWS:
        r = client.post("/api/v1/runs", headers=auth["write"], json={"job": "j", "window": window})
        assert r.status_code == 400 and "window" in r.json["error"]["details"]["fields"], (window[:40], r.json)
        r = client.post(f"/api/v1/runs/{run_id}/analysis", headers=auth["write"], json={"window": window})
        assert r.status_code == 400 and "window" in r.json["error"]["details"]["fields"], (window[:40], r.json)
    assert client.get("/api/v1/runs", headers=auth["read"]).json["total"] == 1
    assert client.get(f"/api/v1/runs/{run_id}", headers=auth["read"]).json["analysis_window"] == "all"


def test_reanalysis_with_an_nvtx_name_no_report_holds_is_refused_up_front(client, auth, session, settings, broker):
    run_id = upload(client, auth["write"], CUPY, job="w")
    process_run(settings, session, run_id)
    broker.delete("light", "ingest")
    before = client.get(f"/api/v1/runs/{run_id}", headers=auth["read"]).json
    r = client.post(f"/api/v1/runs/{run_id}/analysis", headers=auth["write"], json={"window": "nvtx:no such range"})
    assert r.status_code == 400 and "no NVTX range named 'no such range'" in r.json["error"]["details"]["fields"]["window"]
    after = client.get(f"/api/v1/runs/{run_id}", headers=auth["read"]).json
    assert (after["analysis_window"], after["analysis_status"]) == (before["analysis_window"], "ready")
    assert queued(broker, "light") == []
    # A name the report holds (digits read as '#', as for steps) is taken.
    con = duckdb.connect(str(settings.data_dir / session.scalar(sa.select(Report.trace_path))), read_only=True)
    name = con.execute("SELECT text FROM nvtx WHERE kind <> 'mark' LIMIT 1").fetchone()[0]
    con.close()
    r = client.post(f"/api/v1/runs/{run_id}/analysis", headers=auth["write"], json={"window": f"nvtx:{name}"})
    assert r.status_code == 202, r.json


def _report_facts(settings, session) -> tuple[int, int]:
    """(last end of any activity, iterations) of the run's one report, by SQL on its DuckDB file."""
    con = duckdb.connect(str(settings.data_dir / session.scalar(sa.select(Report.trace_path))), read_only=True)
    try:
        tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        # Every table a report's recorded activity lives in (host and GPU).
        union = " UNION ALL ".join(f"SELECT MAX(COALESCE(end_ns, start_ns)) e FROM {t}" for t in  # noqa: S608
                                   ("kernels", "memcpy", "memset", "cuda_api", "nvtx", "osrt", "sync") if t in tables)
        hi = con.execute(f"SELECT MAX(e) FROM ({union})").fetchone()[0]  # noqa: S608 - constants
        n = con.execute("SELECT count(*) FROM iterations").fetchone()[0]
    finally:
        con.close()
    return int(hi), int(n)


def test_reanalysis_outside_the_stored_reports_is_refused_naming_the_valid_range(client, auth, session, settings,
                                                                                  broker):
    run_id = upload(client, auth["write"], CUPY, job="w")
    process_run(settings, session, run_id)
    broker.delete("light", "ingest")
    hi, n = _report_facts(settings, session)
    for window, valid in ((f"iterations:0-{n}", f"({n} found; valid: iterations:A-B with 0 <= A <= B <= {n - 1})"),
                          ("loop:3", "valid: loop:0 to loop:0"),
                          (f"time:{hi}ns-{hi + 10**9}ns", f"valid: time:T0-T1 with T0 < {hi}ns"),
                          ("time:3600s-7200s", f"T0 < {hi}ns")):
        r = client.post(f"/api/v1/runs/{run_id}/analysis", headers=auth["write"], json={"window": window})
        assert r.status_code == 400 and r.json["error"]["code"] == "VALIDATION_ERROR", (window, r.json)
        assert valid in r.json["error"]["details"]["fields"]["window"] and valid in r.json["error"]["message"]
    after = client.get(f"/api/v1/runs/{run_id}", headers=auth["read"]).json
    assert (after["analysis_window"], after["analysis_status"]) == ("steady", "ready")
    assert queued(broker, "light") == []
    r = client.post(f"/api/v1/runs/{run_id}/analysis", headers=auth["write"], json={"window": f"iterations:0-{n - 1}"})
    assert r.status_code == 202, r.json

