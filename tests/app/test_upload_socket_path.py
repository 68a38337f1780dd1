"""The streaming PUT's socket path under gunicorn: bytes gunicorn already buffered plus the rest read straight
off the socket, hashed and stored exactly; keep-alive, pipelining, chunked and compressed bodies, the cap."""

from __future__ import annotations

import gzip
import hashlib
import http.client
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests
from gunicorn.http.body import Body, LengthReader
from gunicorn.http.unreader import SocketUnreader

from app.api.request import socket_body
from app.services.storage import CHUNK
from app.services.storage import LocalStorage as Storage

ROOT = Path(__file__).resolve().parents[2]
SQLITE_HEAD = b"SQLite format 3\x00"


def _body(size: int, seed: int = 0) -> bytes:
    """An SQLite-headed body whose bytes differ at every offset (a misplaced chunk changes the digest)."""
    block = hashlib.sha256(str(seed).encode()).digest() * 4096 + bytes(range(251))
    data = (block * (size // len(block) + 1))[: size - len(SQLITE_HEAD)]
    return SQLITE_HEAD + data


@pytest.mark.parametrize("read_first", [0, 5])
def test_socket_body_takes_buffered_bytes_then_the_socket_and_leaves_the_next_request(tmp_path, read_first):
    body = _body(3 * CHUNK + 12345)
    pipelined = b"GET /next HTTP/1.1\r\nHost: x\r\n\r\n"
    server, client = socket.socketpair()
    with server, client:
        unreader = SocketUnreader(server)
        unreader.unread(body[:70_000])  # what gunicorn's header read pulled in with the headers
        reader = LengthReader(unreader, len(body))
        wsgi_input = Body(reader)
        head = wsgi_input.read(read_first)  # a partial read leaves bytes in the Body's own buffer
        sender = threading.Thread(target=client.sendall, args=(body[70_000:] + pipelined,))
        sender.start()  # more than a socket buffer holds: sent while we receive
        fast = socket_body({"wsgi.input": wsgi_input, "gunicorn.socket": server})
        assert fast is not None and fast.length == len(body) - read_first
        sink = Storage(tmp_path).open_sink(10 * len(body), "x.sqlite")
        sink.receive(fast.readinto, fast.length)
        staged = sink.finish()
        sender.join()
        assert head + staged.path.read_bytes() == body
        assert staged.sha256 == hashlib.sha256(body[read_first:]).hexdigest()
        assert staged.size_bytes == len(body) - read_first
        # gunicorn's view stays exact: nothing left of this body, the next request intact and unread.
        assert reader.length == 0 and wsgi_input.read() == b""
        assert unreader.read(len(pipelined)) == pipelined


def test_socket_body_with_the_whole_body_and_the_next_request_already_buffered(tmp_path):
    body, pipelined = _body(5000), b"GET / HTTP/1.1\r\n\r\n"
    server, client = socket.socketpair()
    with server, client:
        unreader = SocketUnreader(server)
        unreader.unread(body + pipelined)
        reader = LengthReader(unreader, len(body))
        fast = socket_body({"wsgi.input": Body(reader), "gunicorn.socket": server})
        sink = Storage(tmp_path).open_sink(10_000, "x.sqlite")
        sink.receive(fast.readinto, fast.length)
        assert sink.finish().path.read_bytes() == body
        assert unreader.read() == pipelined


def test_socket_body_is_only_for_gunicorn_length_bodies():
    assert socket_body({"wsgi.input": object(), "gunicorn.socket": None}) is None
    server, client = socket.socketpair()
    with server, client:
        from gunicorn.http.body import ChunkedReader

        chunked = Body(ChunkedReader(None, SocketUnreader(server)))
        assert socket_body({"wsgi.input": chunked, "gunicorn.socket": server}) is None


def test_receive_truncated_body_fails_and_discard_leaves_nothing(tmp_path):
    data = [_body(1000)]
    sink = Storage(tmp_path).open_sink(10_000, "x.sqlite")

    def readinto(view):
        chunk = data.pop() if data else b""
        view[: len(chunk)] = chunk
        return len(chunk)

    with pytest.raises(Exception, match="ended before its Content-Length"):
        sink.receive(readinto, 2000)
    sink.discard()
    assert list((tmp_path / "staging").iterdir()) == []


def _receive(tmp_path, body: bytes, pieces: int = 7):
    """sink.receive() over a reader that returns at most ``pieces``-odd sizes, as a socket does."""
    sink = Storage(tmp_path).open_sink(10 * len(body), "x.sqlite")
    pos = 0

    def readinto(view):
        nonlocal pos
        n = min(len(view), len(body) - pos, 12_345 * pieces)
        view[:n] = body[pos: pos + n]
        pos += n
        return n

    sink.receive(readinto, len(body))
    return sink.finish()


@pytest.mark.parametrize("size", [4 * CHUNK, 4 * CHUNK + 4096, 3 * CHUNK + 1, 2 * CHUNK - 7, 100])
def test_receive_writes_full_chunks_direct_and_the_rest_buffered(tmp_path, monkeypatch, size):
    """Full pooled chunks go out with O_DIRECT (where the filesystem takes it); the sniffed first chunk
    and a short last one are written buffered. The stored bytes and digest are exact either way."""
    import app.services.storage.sink as storage

    direct_writes = []
    real_write = os.write

    def write(fd, data):
        import fcntl

        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            direct_writes.append(len(data))
        return real_write(fd, data)

    monkeypatch.setattr(storage.os, "write", write)
    body = _body(size, seed=size)
    staged = _receive(tmp_path, body)
    assert staged.path.read_bytes() == body and staged.size_bytes == size
    assert staged.sha256 == hashlib.sha256(body).hexdigest()
    assert all(n % storage.DIRECT_ALIGN == 0 for n in direct_writes)
    rest = max(0, size - CHUNK)  # the sniffed first chunk is never direct
    direct = rest - rest % CHUNK + (rest % CHUNK if rest % storage.DIRECT_ALIGN == 0 else 0)
    assert sum(direct_writes) == (direct if _takes_o_direct(tmp_path) else 0)


def _takes_o_direct(directory: Path) -> bool:
    import mmap

    try:
        fd = os.open(directory / "probe", os.O_WRONLY | os.O_CREAT | os.O_DIRECT)
    except OSError:
        return False
    try:
        return os.write(fd, mmap.mmap(-1, 4096)) == 4096
    except OSError:
        return False
    finally:
        os.close(fd)
        (directory / "probe").unlink()


@pytest.mark.parametrize("refuse", ["fcntl", "write"])
def test_receive_falls_back_to_buffered_writes_where_o_direct_is_refused(tmp_path, monkeypatch, refuse):
    import errno
    import fcntl

    import app.services.storage.sink as storage

    calls = []
    if refuse == "fcntl":  # a filesystem that refuses the flag
        real_fcntl = fcntl.fcntl

        def fake_fcntl(fd, cmd, arg=0):
            if cmd == fcntl.F_SETFL and arg & os.O_DIRECT:
                calls.append(cmd)
                raise OSError(errno.EINVAL, "Invalid argument")
            return real_fcntl(fd, cmd, arg)

        monkeypatch.setattr(storage.fcntl, "fcntl", fake_fcntl)
    else:  # one that takes the flag but not the write
        real_write = os.write

        def fake_write(fd, data):
            if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
                calls.append(len(data))
                raise OSError(errno.EINVAL, "Invalid argument")
            return real_write(fd, data)

        monkeypatch.setattr(storage.os, "write", fake_write)
    body = _body(5 * CHUNK + 999, seed=9)
    staged = _receive(tmp_path, body)
    assert staged.path.read_bytes() == body and staged.sha256 == hashlib.sha256(body).hexdigest()
    assert len(calls) == 1  # tried once, then buffered for the rest of the upload


def test_receive_write_error_is_raised_and_discard_leaves_nothing(tmp_path, monkeypatch):
    import errno

    import app.services.storage.sink as storage

    real_write = os.write
    written = []

    def full_disk(fd, data):
        if written:
            raise OSError(errno.ENOSPC, "No space left on device")
        written.append(len(data))
        return real_write(fd, data)

    monkeypatch.setattr(storage.os, "write", full_disk)
    sink = Storage(tmp_path).open_sink(1 << 30, "x.sqlite")
    body = _body(8 * CHUNK)
    pos = 0

    def readinto(view):
        nonlocal pos
        n = min(len(view), len(body) - pos)
        view[:n] = body[pos: pos + n]
        pos += n
        return n

    with pytest.raises(Exception, match="out of disk space"):
        sink.receive(readinto, len(body))
        sink.finish()
    sink.discard()
    assert list((tmp_path / "staging").iterdir()) == []


@pytest.fixture
def gunicorn_url(settings, tmp_path):
    port = _free_port()
    env = {**os.environ, "GOODPUT_DATA_DIR": str(settings.data_dir), "GOODPUT_DATABASE_URL": settings.database_url,
           "GOODPUT_BROKER_URL": settings.broker_url, "GOODPUT_SECRET_KEY": "test-secret",
           "GOODPUT_MAX_UPLOAD_BYTES": str(4 * CHUNK), "PYTHONPATH": str(ROOT)}
    log = (tmp_path / "gunicorn.log").open("wb")
    from goodput_cli.service import web_command

    proc = subprocess.Popen(web_command(f"127.0.0.1:{port}", 1),
                            env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                requests.get(f"{url}/api/v1/health", timeout=5)
                break
            except requests.ConnectionError:
                assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "gunicorn.log").read_text()
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


@pytest.mark.parametrize("backend", ["sqlite"])
def test_put_under_gunicorn(gunicorn_url, auth, settings):
    port = int(gunicorn_url.rsplit(":", 1)[1])
    headers = {**auth["write"], "Content-Type": "application/octet-stream"}
    run = requests.post(f"{gunicorn_url}/api/v1/runs", json={}, headers=auth["write"]).json()["id"]
    path = f"/api/v1/runs/{run}/reports"

    def stored(sha: str) -> bytes:
        # Stored names keep the upload's suffix after the SHA-256 (``<sha>.sqlite``, ``<sha>.nsys-rep``).
        (path,) = (settings.data_dir / "uploads" / sha[:2]).glob(f"{sha}*")
        return path.read_bytes()

    # Content-Length bodies on one kept-alive connection: the socket path, then a normal request after it.
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    for size in (3 * CHUNK + 777, 100):
        body = _body(size, seed=size)
        conn.request("PUT", f"{path}/a{size}.sqlite", body=body, headers=headers)
        resp = conn.getresponse()
        got = resp.read()
        assert resp.status == 202, got
        sha = hashlib.sha256(body).hexdigest()
        assert stored(sha) == body
    conn.request("GET", f"/api/v1/runs/{run}", headers=auth["write"])
    resp = conn.getresponse()
    assert resp.status == 200 and len(resp.read()) > 0
    conn.close()

    # Two requests sent at once: the body and the next request arrive in gunicorn's first read.
    body = _body(3000, seed=1)
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(f"PUT {path}/p.sqlite HTTP/1.1\r\nHost: x\r\n{head}Content-Length: {len(body)}\r\n\r\n".encode()
                     + body + f"GET /api/v1/runs/{run} HTTP/1.1\r\nHost: x\r\n{head}\r\n".encode())
        replies = b""
        while replies.count(b"HTTP/1.1 ") < 2 or not replies.endswith(b"}\n"):
            data = sock.recv(65536)
            assert data, replies
            replies += data
    assert replies.startswith(b"HTTP/1.1 202 ") and b"\nHTTP/1.1 200 " in replies, replies
    assert stored(hashlib.sha256(body).hexdigest()) == body

    # Chunked transfer (no Content-Length) takes the general path; gzip is decompressed on the socket path.
    body = _body(2 * CHUNK + 5, seed=2)
    r = requests.put(f"{gunicorn_url}{path}/c.sqlite", data=iter([body[:1000], body[1000:]]), headers=headers)
    assert r.status_code == 202 and r.json()["sha256"] == hashlib.sha256(body).hexdigest()
    # A decompressed SQLite file must start with a real SQLite header (app.services.storage.sink): 100 bytes
    # of one, stating no page count (as old writers do), so the length is not bounded by it.
    body = _body(2 * CHUNK + 9, seed=3)
    body = b"SQLite format 3\x00\x10\x00\x01\x01\x00\x40\x20\x20" + bytes(76) + body[100:]
    r = requests.put(f"{gunicorn_url}{path}/g.sqlite.gz", data=gzip.compress(body, 1), headers=headers)
    assert r.status_code == 202 and stored(r.json()["sha256"]) == body

    # Over the cap (within the Content-Length slack, so it is read): refused, nothing stored or staged.
    before = sorted((settings.data_dir / "uploads").rglob("*"))
    r = requests.put(f"{gunicorn_url}{path}/big.sqlite", data=_body(4 * CHUNK + 1000, seed=4), headers=headers)
    assert (r.status_code, r.json()["error"]["code"]) == (413, "TOO_LARGE")
    # A client that goes away mid-body: nothing is left behind either.
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(f"PUT {path}/cut.sqlite HTTP/1.1\r\nHost: x\r\n{head}Content-Length: {3 * CHUNK}\r\n\r\n".encode()
                     + _body(CHUNK, seed=5))
    r = requests.get(f"{gunicorn_url}/api/v1/runs/{run}", headers=auth["write"])
    assert r.status_code == 200 and len(r.json()["reports"]) == 5
    deadline = time.monotonic() + 10
    while list((settings.data_dir / "staging").iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list((settings.data_dir / "staging").iterdir()) == []
    assert sorted((settings.data_dir / "uploads").rglob("*")) == before


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
