"""`goodput serve` as a real process tree: a worker, beat or web server killed with SIGKILL is restarted and
logged, a killed upload leaves no staged file, and only SIGTERM stops everything."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests

from goodput_cli.service import GOODPUT_CMD
from tests.conftest import corpus_file
from tests.e2e.services import ROOT, free_port, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.services, pytest.mark.timeout(300)]


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:
        return []


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except FileNotFoundError:
        return ""


def _child(serve: int, role: str) -> int | None:
    """The pid of serve's child in ``role`` (web, worker or beat)."""
    for pid in _children(serve):
        cmd = _cmdline(pid)
        if (role == "web" and "gunicorn" in cmd) or cmd.rstrip().endswith(f"main()) {role}") or \
                f"main()) {role} " in cmd:
            return pid
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def _healthy(server: str) -> bool:
    try:
        return requests.get(f"{server}/api/v1/health", timeout=5).status_code == 200
    except requests.RequestException:
        return False


def test_serve_restarts_killed_children_sweeps_a_killed_upload_and_stops_on_sigterm(tmp_path):
    port = free_port()
    server = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "serve.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOODPUT_")}
    env.update(PYTHONPATH=str(ROOT), GOODPUT_PORT=str(port), GOODPUT_LEASE_SECONDS="3",
               GOODPUT_RECONCILE_INTERVAL_SECONDS="1")
    proc = subprocess.Popen([*GOODPUT_CMD, "serve", "--workers", "1", "--concurrency", "1"], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=log_path.open("wb"), start_new_session=True)
    log = lambda: log_path.read_text(errors="replace")  # noqa: E731
    seen: set[int] = set()
    try:
        token = re.search(r"admin token \(shown once, keep it\): (\S+)", proc.stdout.readline().decode()).group(1)
        auth = {"Authorization": f"Bearer {token}"}
        wait_for(lambda: _healthy(server), 60, "the web server")
        roles = {role: wait_for(lambda r=role: _child(proc.pid, r), 30, f"the {role}") for role in
                 ("web", "worker", "beat")}
        seen.update(roles.values())

        # A worker killed like the OOM killer does: logged, restarted; the web server keeps serving.
        os.kill(roles["worker"], signal.SIGKILL)
        wait_for(lambda: f"worker (pid {roles['worker']}) was killed by signal 9" in log(), 20, "the log line")
        assert _healthy(server)
        worker = wait_for(lambda: (p := _child(proc.pid, "worker")) not in (None, roles["worker"]) and p, 30,
                          f"a new worker\n{log()}")
        seen.add(worker)
        assert "worker restarted (pid" in log()
        # ... and it works: an upload ends ready.
        with corpus_file("vecadd-2026.sqlite").open("rb") as fh:
            created = requests.post(f"{server}/api/v1/runs", headers=auth, data={"job": "j"},
                                    files=[("files", ("vecadd.sqlite", fh))], timeout=60)
        assert created.status_code == 202, created.text
        run_url = f"{server}/api/v1/runs/{created.json()['id']}"
        run = wait_for(lambda: (r := requests.get(run_url, headers=auth, timeout=10).json())["status"]
                       in ("ready", "failed") and r, 120, f"the run\n{log()}")
        assert run["status"] == "ready", log()

        # An upload whose web server dies mid-body: the partial staged file is removed by reconcile.
        staging = tmp_path / "data" / "staging"
        gate = threading.Event()

        def body():
            yield b"SQLite format 3\x00" + b"\x00" * 65536
            gate.wait(60)
            yield b"\x00"

        def send():
            try:
                requests.put(f"{run_url}/reports/late.sqlite", headers=auth, data=body(), timeout=60)
            except requests.RequestException:
                pass

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        wait_for(lambda: staging.is_dir() and any(staging.iterdir()), 30, "the staged upload")
        os.killpg(roles["web"], signal.SIGKILL)  # gunicorn and its workers, mid-request
        wait_for(lambda: f"web (pid {roles['web']}) was killed by signal 9" in log(), 20, "the web log line")
        wait_for(lambda: not any(staging.iterdir()), 30, f"the staged upload to be swept\n{log()}")
        gate.set()
        wait_for(lambda: _healthy(server), 60, "the restarted web server")
        seen.add(_child(proc.pid, "web"))

        # Beat too.
        os.kill(roles["beat"], signal.SIGKILL)
        beat = wait_for(lambda: (p := _child(proc.pid, "beat")) not in (None, roles["beat"]) and p, 30,
                        f"a new beat\n{log()}")
        seen.add(beat)
        assert proc.poll() is None  # serve itself never stopped
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    assert rc == 0, log()
    time.sleep(0.5)
    assert [p for p in seen if p and _alive(p)] == []
    assert not _healthy(server)
