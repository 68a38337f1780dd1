"""Upload real exports through the API, let a real worker ingest and analyze them, read the results."""

from __future__ import annotations

import hashlib

import pytest

from analysis.diagnosis.rules.registry import default_registry
from tests.conftest import corpus_file
from tests.e2e.services import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.services]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_upload_ingest_analyze(make_service, backend):
    svc = make_service(backend)
    svc.start_web()
    svc.start_worker()
    path = corpus_file("vecadd-2026.sqlite")
    created = svc.upload([path], job="vecadd", tag="team=perf")
    assert [r["status"] for r in created["reports"]] == ["queued"]
    run = svc.wait_run(created["id"])
    assert run["status"] == "ready", svc.log_tail()
    [report] = run["reports"]
    assert (report["status"], report["attempts"], report["error"]) == ("ready", 1, None)
    assert report["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert report["tool_version"] and report["counts"]
    assert (svc.settings.data_dir / "reports" / str(report["id"]) / "trace.duckdb").is_file()
    findings = svc.get(f"/runs/{run['id']}/findings")
    assert findings["total"] == len(findings["items"]) or findings["total"] > len(findings["items"])
    impacts = [f["impact_ns"] for f in findings["items"]]
    assert impacts == sorted(impacts, reverse=True)
    summary = svc.get(f"/runs/{run['id']}/summary")
    assert summary["analysis_status"] == "ready"


def test_multi_rank_run_yields_run_level_results(make_service):
    svc = make_service()
    svc.start_web()
    svc.start_worker(concurrency=2)
    files = [corpus_file("nccl-ring-2node-r0-ault43.sqlite"), corpus_file("nccl-ring-2node-r1-ault44.sqlite")]
    run = svc.wait_run(svc.upload(files, job="nccl")["id"])
    assert run["status"] == "ready", svc.log_tail()
    assert [r["status"] for r in run["reports"]] == ["ready", "ready"]
    summary = svc.get(f"/runs/{run['id']}/summary")
    assert summary["analysis_status"] == "ready"
    findings = svc.get(f"/runs/{run['id']}/findings?page_size=200")["items"]
    if any(rule_id.startswith("COMM") for rule_id in default_registry().ids()):
        assert any(f["rule_id"].startswith("COMM") for f in findings), findings


def test_duplicate_upload_is_one_report(make_service):
    svc = make_service()
    svc.start_web()
    svc.start_worker()
    path = corpus_file("vecadd-2026.sqlite")
    created = svc.upload([path, path], job="dup")
    assert len(created["reports"]) == 1
    run = svc.wait_run(created["id"])
    again = svc.http.put(f"{svc.base}/api/v1/runs/{run['id']}/reports/{path.name}", data=path.read_bytes())
    assert again.status_code == 200 and again.json()["id"] == run["reports"][0]["id"]
    assert [r["id"] for r in svc.get(f"/runs/{run['id']}")["reports"]] == [run["reports"][0]["id"]]


def test_corrupt_file_fails_with_its_code(make_service, tmp_path):
    svc = make_service()
    svc.start_web()
    svc.start_worker()
    data = bytearray(corpus_file("vecadd-2026.sqlite").read_bytes())
    for off in range(len(data) // 3, len(data) // 3 + 40_000, 997):
        data[off] ^= 0xFF  # damage pages but keep the SQLite header, so only ingest can tell
    bad = tmp_path / "damaged.sqlite"
    bad.write_bytes(bytes(data))
    good = corpus_file("vecadd-2026.sqlite")
    run = svc.wait_run(svc.upload([bad, good], job="corrupt")["id"])
    by_name = {r["name"]: r for r in run["reports"]}
    assert by_name["damaged.sqlite"]["status"] == "failed"
    assert by_name["damaged.sqlite"]["error"]["code"] == "corrupt"
    assert by_name["damaged.sqlite"]["error"]["message"]
    assert by_name[good.name]["status"] == "ready"
    assert run["status"] == "ready"  # the good report was still analyzed


def test_deleting_a_run_purges_its_files(make_service):
    svc = make_service()
    svc.start_web()
    svc.start_worker()
    run = svc.wait_run(svc.upload([corpus_file("a30-mig.sqlite")], job="gone")["id"])
    [report] = run["reports"]
    report_dir = svc.settings.data_dir / "reports" / str(report["id"])
    uploads = list((svc.settings.data_dir / "uploads").glob(f"*/{report['sha256']}*"))
    assert report_dir.is_dir() and [p.name for p in uploads] == [f"{report['sha256']}.kept.sqlite"]
    resp = svc.http.delete(f"{svc.base}/api/v1/runs/{run['id']}")
    assert resp.status_code in (202, 204), resp.text
    assert svc.http.get(f"{svc.base}/api/v1/runs/{run['id']}").status_code == 404
    wait_for(lambda: not report_dir.exists() and not uploads[0].exists(), 30, "the purge", interval=0.3)
