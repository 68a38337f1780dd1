"""`goodput serve` (what `make run` runs) and `goodput upload` as a scheduler would use them, as real processes."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time

import pytest
import requests

from goodput_cli.service import GOODPUT_CMD
from tests.conftest import corpus_file
from tests.e2e.services import ROOT, free_port, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.services]

GOODPUT = GOODPUT_CMD


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOODPUT_") or k == "GOODPUT_CORPUS"}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


def _upload(server: str, token: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*GOODPUT, "upload", *args, "--server", server, "--job", "nightly", "--tag", "gpu=h100",
                           "--git-sha", "abc123"], env=_env(GOODPUT_TOKEN=token), capture_output=True, text=True,
                          timeout=180)


def test_serve_on_embedded_defaults_then_upload_and_stop(tmp_path):
    port = free_port()
    log = (tmp_path / "serve.log").open("wb")
    # Nothing configured but the port: SQLite and the SQLAlchemy broker under ./data, as on a fresh clone.
    proc = subprocess.Popen([*GOODPUT, "serve", "--workers", "1", "--concurrency", "1"], cwd=tmp_path,
                            env=_env(GOODPUT_PORT=str(port), GOODPUT_LEASE_SECONDS="5",
                                     GOODPUT_RECONCILE_INTERVAL_SECONDS="2"),
                            stdout=subprocess.PIPE, stderr=log, start_new_session=True)
    try:
        token_line = proc.stdout.readline().decode()
        match = re.search(r"admin token \(shown once, keep it\): (\S+)", token_line)
        assert match, token_line
        token = match.group(1)
        server = f"http://127.0.0.1:{port}"
        wait_for(lambda: _healthy(server), 60, "the web server")
        good = _upload(server, token, str(corpus_file("vecadd-2026.sqlite")), "--wait", "--timeout", "150")
        assert good.returncode == 0, good.stderr + (tmp_path / "serve.log").read_text()[-3000:]
        run_url = good.stdout.strip().splitlines()[-1]
        assert re.fullmatch(rf"{server}/runs/\d+", run_url)
        run = requests.get(f"{server}/api/v1/runs/{run_url.rsplit('/', 1)[1]}",
                           headers={"Authorization": f"Bearer {token}"}, timeout=10).json()
        assert (run["status"], run["tags"], run["git_sha"], run["source"]) == (
            "ready", {"gpu": "h100"}, "abc123", "cli")
        assert (tmp_path / "data" / "goodput.sqlite").is_file() and (tmp_path / "data" / "broker.sqlite").is_file()
    finally:
        proc.send_signal(signal.SIGINT)  # what Ctrl-C delivers
        try:
            rc = proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    assert rc == 0
    time.sleep(0.5)
    assert _healthy(f"http://127.0.0.1:{port}") is False
    # A second start keeps the first token: none is printed again.
    again = subprocess.run([*GOODPUT, "serve"], cwd=tmp_path, env=_env(GOODPUT_PORT="bad"), capture_output=True,
                           text=True, timeout=30)
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "GOODPUT_PORT" in again.stderr


def _healthy(server: str) -> bool:
    try:
        return requests.get(f"{server}/api/v1/health", timeout=10).status_code == 200
    except requests.RequestException:
        return False


def test_upload_exit_codes(make_service, tmp_path):
    svc = make_service()
    svc.start_web()
    svc.start_worker()
    damaged = bytearray(corpus_file("vecadd-2026.sqlite").read_bytes())
    for off in range(len(damaged) // 3, len(damaged) // 3 + 40_000, 997):
        damaged[off] ^= 0xFF
    bad = tmp_path / "damaged.sqlite"
    bad.write_bytes(bytes(damaged))
    failed = _upload(svc.base, svc.token, str(bad), "--wait")
    assert failed.returncode == 1
    assert "damaged.sqlite: corrupt:" in failed.stderr
    assert failed.stdout.strip().startswith(f"{svc.base}/runs/")
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    local = _upload(svc.base, svc.token, str(empty))  # caught before any byte is sent
    assert (local.returncode, local.stderr.count("\n")) == (2, 1) and "empty" in local.stderr
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)
    rejected = _upload(svc.base, svc.token, str(junk), "--quiet")  # the server's typed refusal
    assert (rejected.returncode, rejected.stderr.count("\n")) == (2, 1), rejected.stderr
    assert rejected.stderr.startswith("goodput: POST /api/v1/runs: NOT_SQLITE")
    unauthorized = _upload(svc.base, "gp_not-a-token", str(corpus_file("vecadd-2026.sqlite")), "--quiet")
    assert unauthorized.returncode == 2 and "UNAUTHORIZED" in unauthorized.stderr
    missing = _upload(svc.base, svc.token, str(tmp_path / "nope.sqlite"))
    assert (missing.returncode, missing.stderr.strip()) == (2, f"goodput: {tmp_path / 'nope.sqlite'}: no such file")
    # A server that is down is retried, then reported as one line with exit status 1.
    down = subprocess.run([*GOODPUT, "upload", str(corpus_file("vecadd-2026.sqlite")), "--server",
                           f"http://127.0.0.1:{free_port()}", "--job", "j", "--token", "t", "--quiet", "--retries", "2"],
                          env=_env(), capture_output=True, text=True, timeout=120)
    assert down.returncode == 1 and "gave up after 3 tries" in down.stderr
