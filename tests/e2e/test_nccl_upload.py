"""An NCCL debug log uploaded with an nsys export of the same run, through the API, the report PUT and
`goodput upload`, ingested and analyzed by a real Celery worker on Redis: the run's network path, joined
with the export, its NET findings ranked with the others, and typed errors for what is not a log."""

from __future__ import annotations

import os
import subprocess

import pytest

from goodput_cli.service import GOODPUT_CMD
from tests.conftest import corpus_dir, corpus_file
from tests.e2e.services import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.services]

AULT = corpus_dir() / "nccl" / "ZhiyiHu1999__DistributedSysLab_FS24__ault-2x2-shm-socket-tree-simple-2.17.log"
FAILED = corpus_dir() / "nccl" / "sparticlesteve__nersc-pytorch-testing__perlmutter-2x4-roce-ibv_create_cq-fail-2.7.log"


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_log_with_the_runs_export_through_the_worker(make_service, backend, tmp_path):
    from tests.nccl_planted import ault_log_of_ring_rank0

    svc = make_service(backend)
    svc.start_web()
    svc.start_worker()
    export = corpus_file("nccl-ring-2node-r0-ault43.sqlite")
    log = tmp_path / AULT.name  # the ault log with its rank 0 the export's process (planted)
    log.write_text(ault_log_of_ring_rank0())
    created = svc.upload([log, export], job="nccl-e2e")
    assert [r["status"] for r in created["reports"]] == ["queued", "queued"]
    run = svc.wait_run(created["id"])
    assert run["status"] == "ready", svc.log_tail()
    by_name = {r["name"]: r for r in run["reports"]}
    log, trace = by_name[AULT.name], by_name[export.name]
    assert (log["kind"], log["status"], log["error"], log["attempts"]) == ("nccl", "ready", None, 1)
    assert (trace["kind"], trace["status"]) == ("nsys", "ready")
    assert log["tool_version"] == "2.17.1" and log["counts"] == {"nodes": 2, "ranks": 4, "nics": 2, "warnings": 0}
    summary = svc.get(f"/runs/{run['id']}/summary")
    assert summary["analysis_status"] == "ready"
    path = summary["network_path"]
    assert path["report"] == AULT.name and [n["host"] for n in path["nodes"]] == ["ault43", "ault44"]
    assert path["joined"] == [{"report": export.name, "host": "ault43.cscs.ch", "rank": 0, "by": "host+pid",
                               "nccl_ranks": [0]}]
    assert "NCCL log" in summary["verdict"]["text"] and "holds NCCL rank 0" in summary["verdict"]["text"]
    findings = svc.get(f"/runs/{run['id']}/findings?page_size=200")["items"]
    ids = [f["rule_id"] for f in findings]
    assert "NET001" in ids and any(not i.startswith("NET") for i in ids)  # one ranked list, both kinds
    impacts = [f["impact_ns"] for f in findings]
    assert impacts == sorted(impacts, reverse=True)
    assert {r["id"]: r["status"] for r in summary["rules"]}["NET001"] == "ok"


def test_per_rank_logs_and_their_exports_through_the_worker(make_service, tmp_path):
    """The two ranks' NCCL_DEBUG_FILE logs with their nsys exports, through the API and a real worker: one path
    for the job, each link's achieved bandwidth next to its transport, a third job's log left out and warned of."""
    from tests.nccl_planted import ring_2node_rank_logs

    svc = make_service("sqlite")
    svc.start_web()
    svc.start_worker()
    logs = ring_2node_rank_logs(tmp_path)
    r0, r1 = corpus_file("nccl-ring-2node-r0-ault43.sqlite"), corpus_file("nccl-ring-2node-r1-ault44.sqlite")
    run = svc.wait_run(svc.upload([logs[0], r0, logs[1], r1, AULT], job="nccl-ranks")["id"])
    assert run["status"] == "ready", svc.log_tail()
    summary = svc.get(f"/runs/{run['id']}/summary")
    path = summary["network_path"]
    assert [f["file"] for f in path["files"]] == [logs[0].name, logs[1].name]
    assert [x["file"] for x in path["left_out"]] == [AULT.name]
    assert any(w["code"] == "nccl_logs_left_out" for w in summary["run_warnings"])
    assert {(k["sender"], k["receiver"]): k["transports"] for k in path["links"]} == {
        (0, 1): ["NET/Socket/0"], (1, 0): ["NET/Socket/0"]}
    assert all(k["bandwidth_bps"] > 0 for k in path["links"])


def test_a_log_alone_by_report_put_and_by_goodput_upload(make_service, tmp_path):
    svc = make_service()
    svc.start_web()
    svc.start_worker()
    # The report PUT: a log added to an existing run by name.
    run = svc.wait_run(svc.upload([corpus_file("vecadd-2026.sqlite")], job="nccl-put")["id"])
    put = svc.http.put(f"{svc.base}/api/v1/runs/{run['id']}/reports/{FAILED.name}", data=FAILED.read_bytes())
    assert put.status_code in (201, 202), put.text
    run = svc.wait_run(run["id"])
    assert run["status"] == "ready", svc.log_tail()
    summary = svc.get(f"/runs/{run['id']}/summary")
    assert summary["network_path"]["report"] == FAILED.name
    # The log's failure: ranks 3 and 7 logged ibv_create_cq first (LABELS.md).
    assert "ibv_create_cq" in summary["verdict"]["text"]
    # `goodput upload` of a log alone, as a scheduler's epilogue would send it.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOODPUT_") or k == "GOODPUT_CORPUS"}
    env.update(PYTHONPATH=str(ROOT), GOODPUT_TOKEN=svc.token)
    proc = subprocess.run([*GOODPUT_CMD, "upload", str(AULT), "--server", svc.base, "--job", "nccl-cli", "--wait",
                           "--timeout", "150", "--quiet"], env=env, capture_output=True, text=True, timeout=200)
    assert proc.returncode == 0, proc.stderr + svc.log_tail()
    run_id = int(proc.stdout.strip().splitlines()[-1].rsplit("/", 1)[1])
    assert svc.get(f"/runs/{run_id}/summary")["network_path"]["nodes"][1]["host"] == "ault44"
    # What is not a log is refused at upload with its typed code, nothing queued.
    junk = tmp_path / "junk.log"
    junk.write_text("just a program's output, no NCCL in it\n" * 200)
    refused = svc.http.post(f"{svc.base}/api/v1/runs", data={"job": "nccl-junk"},
                            files=[("files", (junk.name, junk.read_bytes()))])
    assert refused.status_code >= 400 and refused.json()["error"]["code"].lower() in ("unknown_format",
                                                                                     "unsupported_file")
