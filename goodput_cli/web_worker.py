"""The gunicorn worker `goodput serve` and docker-compose run: gunicorn's threaded worker (gthread), except that
a connection takes a thread only once its request head (request line and headers) has arrived whole.

gthread hands a connection to a thread as soon as its first byte arrives, and the thread then blocks reading
the rest: a few hundred clients that trickle their headers hold every thread and nothing else is answered.
Here the main loop reads heads without blocking, alongside its other sockets, and drops a connection whose
head is not complete within ``HEAD_TIMEOUT_S`` (or grows past ``MAX_HEAD_BYTES``); a thread reading a body
gives up after ``BODY_IDLE_S`` without a byte. A request line longer than the app's URI limit allows is
answered here with the API's JSON 414, not gunicorn's HTML page.
"""

from __future__ import annotations

import errno
import json
import selectors
import socket
import time
from functools import partial

from gunicorn.workers.gthread import TConn, ThreadWorker

# A head (request line and headers) must arrive whole within this many seconds of the connection or of the
# previous response on a kept-alive one.
HEAD_TIMEOUT_S = 10.0
# At most this many bytes of head: gunicorn's own limits (100 fields of 8190 bytes) with room to spare.
MAX_HEAD_BYTES = 64 * 1024
# Longest request line: the app answers URIs over 4,000 bytes itself (app.guards); the line adds the method
# and version.
MAX_REQUEST_LINE = 8190
# A thread reading a body (an upload) or writing a response gives up after this long without progress.
BODY_IDLE_S = 60.0


class _TimedSocket(socket.socket):
    """A client socket whose blocking mode has an idle timeout: gthread's threads set their sockets blocking
    (``setblocking(True)``), which would otherwise wait forever on a stalled client."""

    def setblocking(self, flag: bool) -> None:
        self.settimeout(BODY_IDLE_S if flag else 0.0)


def _json_response(status: int, reason: str, code: str, message: str) -> bytes:
    body = json.dumps({"error": {"code": code, "message": message, "details": {}}}).encode()
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode() + body


class HeadFirstWorker(ThreadWorker):
    """gthread, with request heads read by the main loop (see the module docstring)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._heads: dict[TConn, tuple[bytearray, float]] = {}  # connections still sending a head

    def accept(self, listener) -> None:
        if self.cfg.is_ssl:  # TLS reads its handshake first: gunicorn's own path
            super().accept(listener)
            return
        try:
            raw, addr = listener.accept()
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        self.nr_conns += 1
        sock = _TimedSocket(fileno=raw.detach())
        conn = TConn(self.cfg, sock, addr, listener.getsockname())
        self._await_head(conn)

    def on_client_socket_readable(self, conn, client) -> None:
        # A kept-alive connection's next request: its head is read here too, not by a blocked thread.
        self.poller.unregister(client)
        self.keepalived_conns.remove(conn)
        if self.cfg.is_ssl:
            self.enqueue_req(conn)
        else:
            self._await_head(conn)

    def _await_head(self, conn: TConn) -> None:
        conn.sock.setblocking(False)
        self._heads[conn] = (bytearray(), time.monotonic() + HEAD_TIMEOUT_S)
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_head_readable, conn))

    def _on_head_readable(self, conn: TConn, _sock) -> None:
        head, _deadline = self._heads[conn]
        try:
            data = conn.sock.recv(MAX_HEAD_BYTES + 1 - len(head))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        head += data
        line_end = head.find(b"\r\n")
        if line_end > MAX_REQUEST_LINE or (line_end < 0 and len(head) > MAX_REQUEST_LINE):
            self._refuse(conn, _json_response(414, "URI Too Long", "URI_TOO_LONG",
                                              "The request URI is longer than 4000 bytes."))
            return
        if b"\r\n\r\n" not in head and b"\n\n" not in head:
            if len(head) > MAX_HEAD_BYTES:
                self._refuse(conn, _json_response(431, "Request Header Fields Too Large", "BAD_REQUEST",
                                                  f"The request headers are longer than {MAX_HEAD_BYTES} bytes."))
            return
        # The head is whole: a thread parses it (from these bytes first) and runs the request.
        self.poller.unregister(conn.sock)
        del self._heads[conn]
        try:
            conn.init()
            conn.parser.unreader.unread(bytes(head))
        except Exception:
            self.nr_conns -= 1
            conn.close()
            return
        conn.data_ready = True
        self.enqueue_req(conn)

    def _refuse(self, conn: TConn, response: bytes) -> None:
        try:
            conn.sock.send(response)  # non-blocking: a small answer fits the socket's buffer
        except OSError:
            pass
        self._drop(conn)

    def _drop(self, conn: TConn) -> None:
        self._heads.pop(conn, None)
        try:
            self.poller.unregister(conn.sock)
        except (KeyError, ValueError, OSError):
            pass
        self.nr_conns -= 1
        conn.close()

    def murder_pending(self) -> None:
        super().murder_pending()
        now = time.monotonic()
        # A stopping worker does not wait for heads still arriving: they have no request to finish yet.
        for conn in [c for c, (_, deadline) in self._heads.items() if deadline <= now or not self.alive]:
            self._drop(conn)
