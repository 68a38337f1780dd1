"""A real `goodput serve` on 127.0.0.1, on SQLite and PostgreSQL, while 200 connections trickle their request
headers a byte at a time: /api/v1/health still answers, well before the tricklers time out (two trickling
clients used to freeze every request of the sync workers until then), and the tricklers are cut off once their
head is overdue; clients that send a head and stall their body hold no thread and are answered 408 and closed;
and a request line past the server's limit is the API's JSON 414, not an HTML page."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
import uuid

import pytest
import requests
import sqlalchemy as sa

from goodput_cli.service import GOODPUT_CMD, WEB_THREADS
from goodput_cli.web_worker import BODY_BUFFER_BYTES, BODY_IDLE_S, BODY_TIMEOUT_S, HEAD_TIMEOUT_S
from tests.dbs import PG_ADMIN_URL, pg_url
from tests.e2e.services import ROOT, free_port, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.services, pytest.mark.timeout(180)]

TRICKLERS = 200
_TOKENS: dict[int, str] = {}  # the admin token each served port printed


def _admin_headers(served) -> dict[str, str]:
    return {"Authorization": f"Bearer {_TOKENS[served[1]]}"}


def _healthy(server: str) -> bool:
    try:
        return requests.get(f"{server}/api/v1/health", timeout=5).status_code == 200
    except requests.RequestException:
        return False


@pytest.fixture(params=["sqlite", "postgresql"])
def served(request, tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOODPUT_")}
    env.update(PYTHONPATH=str(ROOT), GOODPUT_PORT=str(port), GOODPUT_HOST="127.0.0.1")
    database = None
    if request.param == "postgresql":
        database = f"goodput_slow_{uuid.uuid4().hex[:10]}"
        with sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT").connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{database}"'))
        env["GOODPUT_DATABASE_URL"] = pg_url(database)
    log_path = tmp_path / "serve.log"
    proc = subprocess.Popen([*GOODPUT_CMD, "serve", "--concurrency", "1"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=log_path.open("wb"), start_new_session=True)
    server = f"http://127.0.0.1:{port}"
    try:
        token = re.search(r"admin token \(shown once, keep it\): (\S+)", proc.stdout.readline().decode())
        assert token, log_path.read_text(errors="replace")
        wait_for(lambda: _healthy(server), 60, "the web server")
        _TOKENS[port] = token.group(1)
        yield server, port
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if database:
            with sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT").connect() as conn:
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))


def _closed(sock: socket.socket) -> bool:
    """Whether the server closed the connection (reads end, or reset)."""
    sock.settimeout(0.01)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def test_health_answers_while_200_connections_trickle_headers(served):
    server, port = served
    socks = []
    try:
        for _ in range(TRICKLERS):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"GET /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            socks.append(s)
        started = time.monotonic()
        timings = []
        while time.monotonic() - started < HEAD_TIMEOUT_S - 2:
            for s in socks:
                try:
                    s.sendall(b"X")  # one more byte of a header that never ends
                except OSError:
                    pass
            t0 = time.monotonic()
            resp = requests.get(f"{server}/api/v1/health", timeout=10)
            timings.append(time.monotonic() - t0)
            assert resp.status_code == 200
            time.sleep(0.5)
        # Not frozen by the tricklers: a frozen worker answers the first of these only when their heads are cut off,
        # HEAD_TIMEOUT_S after they connected; every answer comes in well under that (a bound, not a speed).
        assert len(timings) >= 2 and max(timings) < HEAD_TIMEOUT_S / 2, timings
        # Overdue heads are cut off: every trickler's connection is closed by the server.
        wait_for(lambda: all(_closed(s) for s in socks), HEAD_TIMEOUT_S + 10, "the tricklers to be cut off")
        assert _healthy(server)
    finally:
        for s in socks:
            s.close()


def _answer(sock: socket.socket, timeout: float) -> bytes:
    """Everything the server sends until it closes the connection (or ``timeout`` passes)."""
    sock.settimeout(timeout)
    out = b""
    try:
        while chunk := sock.recv(65536):
            out += chunk
    except OSError:
        pass
    return out


def test_stalled_bodies_hold_no_thread_and_are_answered_408(served):
    server, port = served
    stalled = 3 * WEB_THREADS  # more than the worker's threads: each holding one would starve everyone
    socks = []
    try:
        for i in range(stalled):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            body = b'{"job": "stalled"}'
            s.sendall(b"POST /api/v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Authorization: Bearer nope\r\nContent-Length: %d\r\n\r\n" % (len(body) + 100)
                      + body[: i % len(body)])  # some send nothing of the body, some a part
            socks.append(s)
        started = time.monotonic()
        timings = []
        while time.monotonic() - started < BODY_TIMEOUT_S - 2:
            t0 = time.monotonic()
            assert requests.get(f"{server}/api/v1/health", timeout=10).status_code == 200
            timings.append(time.monotonic() - t0)
            time.sleep(0.5)
        # No thread held: with every thread waiting on a stalled body the first of these would be answered only
        # when the bodies time out (BODY_TIMEOUT_S); every answer comes in well under that.
        assert len(timings) >= 2 and max(timings) < BODY_TIMEOUT_S / 2, timings
        answers = [_answer(s, BODY_TIMEOUT_S + 10) for s in socks]
        waited = time.monotonic() - started
        assert BODY_TIMEOUT_S - 1 <= waited < BODY_TIMEOUT_S + 10, waited
        for raw in answers:  # the whole answer, then the server closed the connection (recv gave b"")
            head, _, body = raw.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 408 "), raw[:200]
            assert b"Connection: close" in head and b"Content-Type: application/json" in head
            assert json.loads(body)["error"]["code"] == "REQUEST_TIMEOUT"
        assert all(_closed(s) for s in socks)
        assert _healthy(server)
        # Bodies that do arrive, below and above what the main loop reads first, are answered, and a kept-alive
        # connection serves the next request (gunicorn closes one whose unread body it cannot drain cheaply: the
        # largest goes alone).
        headers = {"Content-Type": "application/json", "Authorization": "Bearer nope"}
        with requests.Session() as http:
            for size in (10, BODY_BUFFER_BYTES - 1):
                r = http.post(f"{server}/api/v1/runs", data=b"x" * size, timeout=10, headers=headers)
                assert r.status_code == 401 and r.json()["error"]["code"] == "UNAUTHORIZED", (size, r.text[:200])
            assert http.get(f"{server}/api/v1/health", timeout=10).status_code == 200
        r = requests.post(f"{server}/api/v1/runs", data=b"x" * (3 * BODY_BUFFER_BYTES), timeout=10, headers=headers)
        assert r.status_code == 401 and r.json()["error"]["code"] == "UNAUTHORIZED", r.text[:200]
    finally:
        for s in socks:
            s.close()


@pytest.mark.parametrize("served", ["sqlite"], indirect=True)  # the socket's timeout: no database involved
def test_an_upload_body_that_stalls_in_a_thread_is_408_and_closed(served):
    server, port = served
    admin = _admin_headers(served)
    run_id = requests.post(f"{server}/api/v1/runs", json={"job": "stall"}, headers=admin, timeout=10).json()["id"]
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        # Past what the main loop reads first: a thread takes the request and reads the body until it stalls.
        s.sendall(f"PUT /api/v1/runs/{run_id}/reports/a.sqlite HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  f"Authorization: {admin['Authorization']}\r\nContent-Length: 10000000\r\n\r\n".encode()
                  + b"SQLite format 3\x00" + b"\x00" * (3 * BODY_BUFFER_BYTES))
        started = time.monotonic()
        raw = _answer(s, BODY_IDLE_S + 20)
        waited = time.monotonic() - started
    finally:
        s.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 ") and b"Connection: close" in head, raw[:300]
    assert json.loads(body)["error"]["code"] == "REQUEST_TIMEOUT"
    assert BODY_IDLE_S - 1 <= waited < BODY_IDLE_S + 15, waited
    run = requests.get(f"{server}/api/v1/runs/{run_id}", headers=admin, timeout=10).json()
    assert run["reports"] == []  # nothing stored
    assert _healthy(server)


def test_an_over_long_request_line_is_the_apis_json_414(served):
    server, _port = served
    for length in (4_100, 9_000, 70_000):
        resp = requests.get(f"{server}/api/v1/runs", params={"job": "j" * length}, timeout=10)
        assert resp.status_code == 414, (length, resp.text[:200])
        assert resp.headers["Content-Type"].startswith("application/json")
        assert resp.json()["error"]["code"] == "URI_TOO_LONG"
    assert _healthy(server)


def test_the_command_line_limit_is_the_workers():
    from goodput_cli import web_worker
    from goodput_cli.service import MAX_REQUEST_LINE, web_command

    assert MAX_REQUEST_LINE == web_worker.MAX_REQUEST_LINE
    assert web_command("127.0.0.1:1")[web_command("127.0.0.1:1").index("--limit-request-line") + 1] == "8190"


def _send_raw(port: int, data: bytes, *, half_close: bool = False) -> bytes:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        s.sendall(data)
        if half_close:
            s.shutdown(socket.SHUT_WR)  # the body ends here, cut short; the client still listens
        return _answer(s, 15)
    finally:
        s.close()


def test_malformed_and_aborted_chunked_bodies_are_400_json(served):
    """Issue #45 item 2: a broken chunk size, or a body cut off inside a chunk, was a 500 with a traceback on
    sign-in, sign-out, the JSON API and a report PUT; it is a 400 with the API's JSON error, the connection
    closed."""
    server, port = served
    admin = _admin_headers(served)["Authorization"]
    run_id = requests.post(f"{server}/api/v1/runs", json={"job": "chunks"}, headers={"Authorization": admin},
                           timeout=10).json()["id"]
    targets = [
        (b"POST /login", b"Content-Type: application/x-www-form-urlencoded\r\n"),
        (b"POST /logout", b"Content-Type: application/x-www-form-urlencoded\r\n"),
        (b"POST /api/v1/runs", b"Content-Type: application/json\r\nAuthorization: " + admin.encode() + b"\r\n"),
        (f"PUT /api/v1/runs/{run_id}/reports/a.sqlite".encode(), b"Authorization: " + admin.encode() + b"\r\n"),
    ]
    for line, headers in targets:
        head = line + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n" + headers + b"\r\n"
        for body, half in ((b"zz\r\nabc\r\n0\r\n\r\n", False), (b"5\r\nusern", True), (b"5\r\nusernXX\r\n", True)):
            raw = _send_raw(port, head + body, half_close=half)
            status, _, rest = raw.partition(b"\r\n")
            assert status.startswith(b"HTTP/1.1 400 "), (line, body, raw[:300])
            headers_part, _, payload = rest.partition(b"\r\n\r\n")
            assert b"Content-Type: application/json" in headers_part, (line, body, raw[:300])
            assert json.loads(payload)["error"]["code"] == "BAD_REQUEST", (line, body, payload[:300])
    assert requests.get(f"{server}/api/v1/runs/{run_id}", headers={"Authorization": admin},
                        timeout=10).json()["reports"] == []
    assert _healthy(server)


STALLERS = 60  # clients of each kind


def test_health_stays_fast_while_stalled_bodies_of_every_kind_hang(served):
    """Issue #45 item 1: 150 anonymous sign-ins announcing 10 MB and trickling a byte at a time kept
    /api/v1/health timing out, and so did chunked, Expect: 100-continue, PUT and multipart bodies stalled after
    70 KB. Now every body up to 1 MiB is read by the main loop before a thread is given (a larger one is
    refused unless it is an upload), and uploads get at most a share of the threads: with STALLERS clients of
    each kind hanging (and 40 that asked to close the connection but never read), health answers in under a
    second."""
    server, port = served
    admin = _admin_headers(served)["Authorization"].encode()
    run_id = requests.post(f"{server}/api/v1/runs", json={"job": "stall"}, headers={"Authorization": admin},
                           timeout=10).json()["id"]
    filler = b"username=" + b"x" * 70_000
    kinds = {
        "login-10MB": (b"POST /login HTTP/1.1\r\nHost: h\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                       b"Content-Length: 10000000\r\n\r\n" + filler),
        "login-trickle": (b"POST /login HTTP/1.1\r\nHost: h\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                          b"Content-Length: 200000\r\n\r\n" + filler),
        "login-chunked": (b"POST /login HTTP/1.1\r\nHost: h\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                          b"Transfer-Encoding: chunked\r\n\r\n5\r\nusern"),
        "json-chunked": (b"POST /api/v1/runs HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\n"
                         b"Authorization: " + admin + b"\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"job"),
        "json-expect": (b"POST /api/v1/runs HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\n"
                        b"Authorization: " + admin + b"\r\nExpect: 100-continue\r\nContent-Length: 100\r\n\r\n"),
        "put-upload": (f"PUT /api/v1/runs/{run_id}/reports/a.sqlite HTTP/1.1\r\nHost: h\r\n".encode()
                       + b"Authorization: " + admin + b"\r\nContent-Length: 10000000\r\n\r\nSQLite format 3\x00"
                       + bytes(70_000)),
        "multipart-upload": (b"POST /api/v1/runs HTTP/1.1\r\nHost: h\r\nAuthorization: " + admin + b"\r\n"
                             b"Content-Type: multipart/form-data; boundary=B\r\nContent-Length: 10000000\r\n\r\n"
                             b'--B\r\nContent-Disposition: form-data; name="files"; filename="a.sqlite"\r\n\r\n'
                             b"SQLite format 3\x00" + bytes(70_000)),
    }
    socks: dict[str, list[socket.socket]] = {k: [] for k in kinds}
    closers = []
    try:
        for kind, data in kinds.items():
            for _ in range(STALLERS):
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                s.setblocking(False)
                try:
                    s.send(data)  # as much as the socket takes; the rest never comes
                except BlockingIOError:
                    pass
                socks[kind].append(s)
        for _ in range(40):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"GET /api/v1/health HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
            closers.append(s)  # answered, never read, never closed: the server's graceful close lingers (it
            # waited up to 2 s on the main loop for each, 40 of them pushed a health check to 11.5 s)
        started = time.monotonic()
        timings = []
        while time.monotonic() - started < BODY_TIMEOUT_S - 1:
            for s in socks["login-trickle"]:
                try:
                    s.send(b"x")  # a byte at a time
                except OSError:
                    pass
            t0 = time.monotonic()
            assert requests.get(f"{server}/api/v1/health", timeout=10).status_code == 200
            timings.append(time.monotonic() - t0)
            time.sleep(0.3)
        assert len(timings) >= 10 and max(timings) < 1.0, timings
        # Refused at once: a sign-in cannot announce 10 MB. Small bodies that never complete: 408 from the main
        # loop once overdue, then closed.
        for s in socks["login-10MB"]:
            s.setblocking(True)
            head = _answer(s, 5).partition(b"\r\n")[0]
            assert head.startswith(b"HTTP/1.1 413 "), head
        for kind in ("login-trickle", "login-chunked", "json-chunked", "json-expect"):
            for s in socks[kind]:
                s.setblocking(True)
                raw = _answer(s, BODY_TIMEOUT_S + 10)
                if kind == "json-expect":
                    assert raw.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), raw[:100]
                    raw = raw[len(b"HTTP/1.1 100 Continue\r\n\r\n"):]
                assert raw.startswith(b"HTTP/1.1 408 ") or raw.startswith(b"HTTP/1.1 400 "), (kind, raw[:200])
        assert _healthy(server)
    finally:
        for s in [*closers, *(s for group in socks.values() for s in group)]:
            s.close()
