"""Real service processes for end-to-end tests: a private redis-server, Celery worker and beat
subprocesses, and the Flask app on a real HTTP server thread. No eager mode, no mocks."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import requests

from app.settings import Settings
from goodput_cli.service import GOODPUT_CMD

ROOT = Path(__file__).resolve().parents[2]
TERMINAL_RUN = ("ready", "failed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


class RedisServer:
    """A redis-server on a spare port that keeps nothing on disk; restart() empties it like a crash."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.workdir)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import redis

        client = redis.Redis(port=self.port, socket_connect_timeout=0.5)
        wait_for(lambda: _ping(client), 10, "redis-server")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def restart(self) -> None:
        self.stop()
        self.start()

    def queued(self, queue: str) -> int:
        import redis

        return int(redis.Redis(port=self.port).llen(queue))


def _ping(client) -> bool:
    try:
        return bool(client.ping())
    except Exception:
        return False


class Service:
    """One deployment under test: settings, worker/beat processes, an HTTP server and an API token."""

    def __init__(self, settings: Settings, workdir: Path) -> None:
        self.settings = settings
        self.workdir = workdir
        self.workers: list[subprocess.Popen] = []
        self.beat: subprocess.Popen | None = None
        self.server = None
        self.base = ""
        self.token = ""
        self.http = requests.Session()

    def env(self, **hooks: str) -> dict[str, str]:
        env = dict(os.environ)
        for key in list(env):
            if key.startswith("GOODPUT_") and key != "GOODPUT_CORPUS":
                del env[key]
        s = self.settings
        env.update({
            "GOODPUT_DATA_DIR": str(s.data_dir), "GOODPUT_DATABASE_URL": s.resolved_database_url,
            "GOODPUT_BROKER_URL": s.resolved_broker_url, "GOODPUT_LEASE_SECONDS": str(s.lease_seconds),
            "GOODPUT_MAX_ATTEMPTS": str(s.max_attempts),
            "GOODPUT_INGEST_TIMEOUT_SECONDS": str(s.ingest_timeout_seconds),
            "GOODPUT_RECONCILE_INTERVAL_SECONDS": str(s.reconcile_interval_seconds),
            "PYTHONPATH": str(ROOT),
        })
        env.update(hooks)
        return env

    def start_worker(self, concurrency: int = 1, **hooks: str) -> subprocess.Popen:
        log = open(self.workdir / f"worker-{len(self.workers)}.log", "wb")
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "e2e" / "hooked_worker.py"), "--concurrency", str(concurrency),
             "--loglevel", "INFO"], env=self.env(**hooks), cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
        self.workers.append(proc)
        wait_for(lambda: b"ready." in (self.workdir / f"worker-{len(self.workers) - 1}.log").read_bytes()
                 or proc.poll() is not None, 60, "the worker to start")
        assert proc.poll() is None, self.log_tail()
        return proc

    def start_beat(self) -> None:
        log = open(self.workdir / "beat.log", "wb")
        self.beat = subprocess.Popen([*GOODPUT_CMD, "beat", "--loglevel", "INFO"],
                                     env=self.env(), cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def kill_worker(self, proc: subprocess.Popen) -> None:
        """SIGKILL the worker and everything it started, like a machine that lost power."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()

    def start_web(self) -> None:
        from werkzeug.serving import make_server

        from app import create_app

        app = create_app(self.settings)
        self.server = make_server("127.0.0.1", 0, app, threaded=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base = f"http://127.0.0.1:{self.server.server_port}"
        self.token = self._make_token()
        self.http.headers["Authorization"] = f"Bearer {self.token}"

    def _make_token(self) -> str:
        from app.db import engine_for, make_sessionmaker, session_scope
        from app.services.accounts.tokens import create_token

        engine = engine_for(self.settings)
        try:
            with session_scope(make_sessionmaker(engine)) as session:
                return create_token(session, "e2e", "write").token
        finally:
            engine.dispose()

    def upload(self, paths: list[Path], job: str = "e2e", **fields: str) -> dict[str, Any]:
        handles = [p.open("rb") for p in paths]
        try:
            resp = self.http.post(f"{self.base}/api/v1/runs", data={"job": job, **fields},
                                  files=[("files", (p.name, h)) for p, h in zip(paths, handles, strict=True)])
        finally:
            for h in handles:
                h.close()
        assert resp.status_code == 202, resp.text
        assert resp.headers["Location"].endswith(f"/api/v1/runs/{resp.json()['id']}")
        return resp.json()

    def get(self, path: str) -> Any:
        resp = self.http.get(f"{self.base}/api/v1{path}")
        assert resp.status_code == 200, resp.text
        return resp.json()

    def wait_run(self, run_id: int, timeout: float = 90) -> dict[str, Any]:
        return wait_for(lambda: (r := self.get(f"/runs/{run_id}"))["status"] in TERMINAL_RUN and r, timeout,
                        f"run {run_id} to finish\n{self.log_tail()}", interval=0.3)

    def log_tail(self) -> str:
        out = []
        for log in sorted(self.workdir.glob("*.log")):
            out.append(f"--- {log.name}\n" + log.read_text(errors="replace")[-3000:])
        return "\n".join(out)

    def close(self) -> None:
        for proc in [*self.workers, self.beat]:
            if proc is not None and proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(timeout=10)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    self.kill_worker(proc)
        if self.server is not None:
            self.server.shutdown()


def e2e_settings(data_dir: Path, database_url: str, broker_url: str, **overrides: Any) -> Settings:
    base = dict(data_dir=data_dir, database_url=database_url, broker_url=broker_url, lease_seconds=3,
                reconcile_interval_seconds=1, max_attempts=3, ingest_timeout_seconds=120)
    base.update(overrides)
    return replace(Settings(), **base)
