"""`goodput upload` progress (bytes and speed per file, then the server's ingest and analysis with --wait) and
`goodput diff --server`, against a real web server and worker (real processes, Redis, SQLite)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import requests

from analysis import fmt
from tests.conftest import ROOT, corpus_file
from tests.e2e.services import free_port

pytestmark = [pytest.mark.slow, pytest.mark.services]

CMD = [sys.executable, "-c", "import sys; from goodput_cli.main import main; sys.exit(main())"]
A = corpus_file("cloverleaf-devsync.sqlite")
B = corpus_file("devsync-heavy-report13.sqlite")


def goodput(*args: str, token: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOODPUT_")}
    env["GOODPUT_TOKEN"] = token
    return subprocess.run([*CMD, *args], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)


def test_upload_progress_then_server_progress_and_diff_by_run_id(make_service):
    svc = make_service()
    svc.start_web()
    svc.start_worker()
    up = goodput("upload", str(A), str(B), "--server", svc.base, "--job", "cli", "--wait", "--timeout", "200",
                 token=svc.token)
    assert up.returncode == 0, up.stderr + svc.log_tail()
    lines = up.stderr.splitlines()
    for src in (A, B):  # one line per file: its bytes, its size, the speed
        size = fmt.size(src.stat().st_size)
        sent = [ln for ln in lines if ln.startswith(f"goodput: {src.name}: sent {size} of {size} (100 %) at ")]
        assert len(sent) == 1 and re.search(r"at [\d,.]+ [kMG]?B/s in [\d.]+ m?s$", sent[0]), lines
    # Then the server's view, as it changes: report states and the analysis, ending ready.
    server = [ln for ln in lines if re.match(r"goodput: run \d+: ", ln)]
    assert server and f"{A.name} ready" in server[-1] and server[-1].endswith("analysis ready"), lines
    # A line only when something changed: never the same line twice in a row. (A state may come back later:
    # a report's analysis sent back for the run's window is "analyzing" again after "ready".)
    assert all(a != b for a, b in zip(server, server[1:], strict=False)), lines
    run_a = int(up.stdout.strip().rsplit("/", 1)[1])
    # Two unrelated exports as one run: said at the end (issue #41), the upload itself succeeds
    assert any(ln.startswith(f"goodput: WARNING (clock_apart) in run {run_a}: ") for ln in lines), lines
    assert any(ln.startswith(f"goodput: WARNING (jobs_differ) in run {run_a}: ") for ln in lines), lines
    # ... and by the poll the 202's Location names (its ranks are known only after ingest, so the 202 cannot):
    # the same warnings as the summary, read by `upload --wait` from its last poll
    headers = {"Authorization": f"Bearer {svc.token}"}
    polled = requests.get(f"{svc.base}/api/v1/runs/{run_a}", headers=headers, timeout=30).json()
    summary = requests.get(f"{svc.base}/api/v1/runs/{run_a}/summary", headers=headers, timeout=30).json()
    assert {w["code"] for w in polled["run_warnings"]} >= {"clock_apart", "jobs_differ"}
    assert polled["run_warnings"] == summary["run_warnings"]
    for w in polled["run_warnings"]:
        assert f"goodput: WARNING ({w['code']}) in run {run_a}: {w['message']}" in lines

    quiet = goodput("upload", str(B), "--server", svc.base, "--job", "cli", "--wait", "--quiet", token=svc.token)
    assert quiet.returncode == 0 and quiet.stderr == ""
    run_b = int(quiet.stdout.strip().rsplit("/", 1)[1])

    diff = goodput("diff", str(run_a), str(run_b), "--server", svc.base, "--format", "json",
                   "--fail-on", "goodput:-1pt", token=svc.token)
    api = requests.get(f"{svc.base}/api/v1/compare?base={run_a}&head={run_b}",
                       headers={"Authorization": f"Bearer {svc.token}"}, timeout=30).json()
    got = json.loads(diff.stdout)
    gate = got.pop("gate")
    assert got == api
    want = 1 if api["breakdown"]["goodput_pct"]["delta"] <= -1 else 0
    assert diff.returncode == want and gate[0]["status"] == ("failed" if want else "passed")
    missing = goodput("diff", str(run_a), "999999", "--server", svc.base, token=svc.token)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "RUN_NOT_FOUND" in missing.stderr
    down = goodput("diff", "1", "2", "--server", f"http://127.0.0.1:{free_port()}", "--quiet", token="t")
    assert down.returncode == 1 and down.stderr.count("\n") == 1 and "gave up" in down.stderr


def test_upload_window_and_thresholds_are_recorded_and_a_bad_one_is_refused(make_service):
    svc = make_service()
    svc.start_web()
    bad = goodput("upload", str(A), "--server", svc.base, "--job", "cli-opts", "--threshold", "GPU001.nope=1",
                  token=svc.token)
    assert bad.returncode == 2, bad.stderr
    assert "VALIDATION_ERROR: Invalid threshold override. thresholds: rule GPU001 has no threshold 'nope'" in bad.stderr
    headers = {"Authorization": f"Bearer {svc.token}"}
    runs = requests.get(f"{svc.base}/api/v1/runs?job=cli-opts", headers=headers, timeout=30).json()
    assert runs["total"] == 0                      # nothing created
    ok = goodput("upload", str(A), "--server", svc.base, "--job", "cli-opts", "--window", "all", "--quiet",
                 "--threshold", "GPU001.min_gap_us=200", "--threshold", "COMM002.min_skew_us=5", token=svc.token)
    assert ok.returncode == 0, ok.stderr
    run_id = int(ok.stdout.strip().rsplit("/", 1)[1])
    run = requests.get(f"{svc.base}/api/v1/runs/{run_id}", headers=headers, timeout=30).json()
    assert run["analysis_window"] == "all"
    assert run["tags"] == {"goodput.thresholds": "COMM002.min_skew_us=5 GPU001.min_gap_us=200"}
