"""Start and stop a real gunicorn serving ``app:create_app()`` for the service benchmarks: the command line
`goodput serve` (`make run`) runs, so the figures are those of the production configuration."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import requests

from goodput_cli.service import WEB_WORKERS, web_command


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Server:
    url: str
    pid: int

    def cpu_seconds(self) -> float:
        """User + system CPU of the gunicorn master and its workers so far."""
        ticks = os.sysconf("SC_CLK_TCK")
        total = 0
        pids = [self.pid]
        for task in Path(f"/proc/{self.pid}/task").iterdir():
            pids += [int(c) for c in (task / "children").read_text().split()]
        for pid in pids:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except FileNotFoundError:
                continue
            total += int(fields[11]) + int(fields[12])  # utime, stime
        return total / ticks


@contextmanager
def gunicorn(env: dict[str, str], *, workers: int = WEB_WORKERS):
    """Yield the Server (URL, pid) of the production gunicorn command running the app with ``env``; stopped on
    exit. Its access log (one line per request, as in production) goes to /dev/null."""
    port = free_port()
    proc = subprocess.Popen(web_command(f"127.0.0.1:{port}", workers), env={**os.environ, **env},
                            stdout=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(f"{url}/api/v1/health", timeout=15).status_code in (200, 503):
                    break
            except (requests.ConnectionError, requests.Timeout):
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("gunicorn did not start")
            time.sleep(0.2)
        yield Server(url, proc.pid)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
