"""`goodput upload` against a server whose first response is lost after the run was committed (issue #45
item 3): the retry carries the same Idempotency-Key and gets the same run back, so exactly one run exists.
Real processes: the CLI as a subprocess, the app on a real HTTP server, a TCP proxy that drops one response."""

from __future__ import annotations

import socket
import threading

import pytest
import requests

from tests.cli.test_cli_upload_progress import goodput
from tests.conftest import corpus_file

pytestmark = [pytest.mark.slow, pytest.mark.services]


def _read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


class LosingProxy:
    """Forwards HTTP requests to ``target``; the first one's response is read from the server (so its work is
    done and committed) and then dropped: the client's connection is closed without an answer."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.dropped = 0
        self.forwarded = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            request = _read_request(conn)
            with socket.create_connection(self.target, timeout=60) as up:
                up.sendall(request)
                response = b""
                while chunk := up.recv(65536):
                    response += chunk
            if self.dropped == 0:
                self.dropped += 1
                return  # the server answered; the client never hears it
            self.forwarded += 1
            conn.sendall(response)

    def close(self) -> None:
        self.listener.close()


def test_a_retry_after_a_lost_response_does_not_create_a_second_run(make_service):
    svc = make_service()
    svc.start_web()
    host, port = svc.base.removeprefix("http://").split(":")
    proxy = LosingProxy((host, int(port)))
    try:
        up = goodput("upload", str(corpus_file("vecadd-2026.sqlite")), "--server", f"http://127.0.0.1:{proxy.port}",
                     "--job", "retried", token=svc.token)
    finally:
        proxy.close()
    assert up.returncode == 0, up.stderr
    assert proxy.dropped == 1 and proxy.forwarded == 1 and "retrying" in up.stderr
    runs = requests.get(f"{svc.base}/api/v1/runs?job=retried", headers={"Authorization": f"Bearer {svc.token}"},
                        timeout=30).json()
    assert runs["total"] == 1, runs
    assert up.stdout.strip().endswith(f"/runs/{runs['items'][0]['id']}")
