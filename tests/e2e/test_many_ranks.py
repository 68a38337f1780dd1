"""Many-rank runs analyzed in parallel by the workers that exist, end to end with real worker
processes and Redis: one task per report right after its ingest, the run-level step once over the reports'
facts, the same findings as the offline CLI on the same files; a failed rank leaves the run analyzed with
the others and named; a worker killed in a report's analysis loses nothing."""

from __future__ import annotations

import json
import subprocess

import pytest
import sqlalchemy as sa

from app.db import engine_for
from goodput_cli.service import GOODPUT_CMD
from tests.analysis.many_ranks import COLLECTIVES, build_run
from tests.e2e.services import wait_for

N = 16
DELAYED = 11
FINDING_KEYS = ("rule_id", "severity", "title", "message", "impact_ns", "impact_pct", "advice", "evidence",
                "evidence_total", "report", "rank")


def _offline(files) -> dict:
    """`goodput analyze --format json` on the files, run in their folder so the labels are the file names."""
    out = subprocess.run([*GOODPUT_CMD, "analyze", "--format", "json", *[f.name for f in files]],
                         cwd=files[0].parent, capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout)


def _service_findings(svc, run_id: int) -> list[dict]:
    items, page = [], 1
    while True:
        got = svc.get(f"/runs/{run_id}/findings?page_size=200&page={page}")
        items += got["items"]
        if len(items) >= got["total"] or not got["items"]:
            break
        page += 1
    return [{**{k: f[k] for k in FINDING_KEYS}, **f["extra"]} for f in items]


def _run_row(svc, run_id: int):
    engine = engine_for(svc.settings)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text("SELECT analysis_attempts, analysis_status FROM runs WHERE id = :i"),
                                {"i": run_id}).one()
    finally:
        engine.dispose()


def _tasks_done(svc, worker: int, name: str) -> int:
    log = (svc.workdir / f"worker-{worker}.log").read_text(errors="replace")
    return sum(1 for line in log.splitlines() if f"Task {name}[" in line and "succeeded" in line)


def test_sixteen_ranks_fan_out_on_two_workers_equals_the_offline_cli(make_service, tmp_path) -> None:
    files = build_run(tmp_path / "ranks", n=N, delayed=DELAYED)
    svc = make_service("sqlite")
    svc.start_web()
    svc.start_worker()
    svc.start_worker()
    created = svc.upload(files, job="many")
    offline = _offline(files)
    run = svc.wait_run(created["id"], timeout=180)
    assert run["status"] == "ready", svc.log_tail()
    assert [r["status"] for r in run["reports"]] == ["ready"] * N
    # One analysis task per report, spread over both workers; the run-level step exactly once.
    per_worker = [_tasks_done(svc, w, "analyze.report") for w in (0, 1)]
    assert sum(per_worker) == N and min(per_worker) > 0, per_worker
    assert sum(_tasks_done(svc, w, "analyze.run") for w in (0, 1)) >= 1
    assert tuple(_run_row(svc, run["id"])) == (1, "ready")
    assert _service_findings(svc, run["id"]) == offline["findings"]
    summary = svc.get(f"/runs/{run['id']}/summary")
    assert summary["rules"] == offline["rules"]
    assert summary["missing_reports"] == []
    (straggler,) = [f for f in offline["findings"] if f["rule_id"] == "COMM002"]
    assert straggler["rank"] == DELAYED and f"at {COLLECTIVES} of {COLLECTIVES}" in straggler["title"]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_failed_rank_gives_a_partial_run_naming_it_then_the_retry_completes_it(make_service, tmp_path,
                                                                                backend) -> None:
    import hashlib

    files = build_run(tmp_path / "ranks", n=4, delayed=2)
    poisoned = hashlib.sha256(files[1].read_bytes()).hexdigest()
    svc = make_service(backend, max_attempts=1)
    svc.start_web()
    bad = svc.start_worker(GOODPUT_TEST_POISON=poisoned)
    created = svc.upload(files, job="partial")
    run = svc.wait_run(created["id"], timeout=120)
    assert run["status"] == "ready", svc.log_tail()
    states = {r["name"]: (r["status"], (r["error"] or {}).get("code")) for r in run["reports"]}
    assert states[files[1].name] == ("failed", "worker_crashed")
    summary = svc.get(f"/runs/{run['id']}/summary")
    # Its ingest failed, so the report never told its rank: the ranks present and their world size do.
    assert [(m["report"], m["error_code"]) for m in summary["missing_reports"]] == [(files[1].name, "worker_crashed")]
    assert summary["missing_ranks"] == [1]
    without = _service_findings(svc, run["id"])
    assert without == _offline([files[0], files[2], files[3]])["findings"]
    # The rank's report is retried on a healthy worker: the run is analyzed again with all four.
    svc.kill_worker(bad)
    svc.start_worker()
    resp = svc.http.post(f"{svc.base}/api/v1/runs/{run['id']}/retry")
    assert resp.status_code == 202, resp.text
    wait_for(lambda: (r := svc.get(f"/runs/{run['id']}"))["status"] == "ready"
             and all(x["status"] == "ready" for x in r["reports"]), 120, "the retried run", interval=0.3)
    summary = svc.get(f"/runs/{run['id']}/summary")
    assert summary["missing_reports"] == [] and summary["missing_ranks"] == []
    assert _service_findings(svc, run["id"]) == _offline(files)["findings"]


def test_worker_killed_in_a_reports_analysis_loses_nothing(make_service, tmp_path) -> None:
    files = build_run(tmp_path / "ranks", n=4, delayed=3)
    svc = make_service("sqlite")
    svc.start_web()
    svc.start_worker(concurrency=2, GOODPUT_TEST_KILL_ANALYSIS=files[2].name)
    created = svc.upload(files, job="killed")
    run = svc.wait_run(created["id"], timeout=120)
    assert run["status"] == "ready", svc.log_tail()
    assert (svc.settings.data_dir / f"killed-analysis-{files[2].name}").exists()  # it did die in there
    assert [r["status"] for r in run["reports"]] == ["ready"] * 4
    assert _service_findings(svc, run["id"]) == _offline(files)["findings"]
    assert svc.get(f"/runs/{run['id']}/summary")["missing_reports"] == []
    # The killed attempt's folder is gone once another attempt published the report's analysis.
    for r in run["reports"]:
        folders = list((svc.settings.data_dir / "reports" / str(r["id"])).glob("analysis-*"))
        assert len(folders) == 1, folders
