"""The gunicorn worker `goodput serve` and docker-compose run: gunicorn's threaded worker (gthread), except that
a connection takes a thread only once its request head (request line and headers) has arrived whole.

gthread hands a connection to a thread as soon as its first byte arrives, and the thread then blocks reading
the rest: a few hundred clients that trickle their headers hold every thread and nothing else is answered.
Here the main loop reads heads without blocking, alongside its other sockets, and drops a connection whose
head is not complete within ``HEAD_TIMEOUT_S`` (or grows past ``MAX_HEAD_BYTES``). The start of a body (its
first ``BODY_BUFFER_BYTES``: all of a JSON or form request) is read by the main loop too, and a client that
stalls before sending it is answered 408 and closed after ``BODY_TIMEOUT_S`` without ever taking a thread; a
thread reading the rest of a larger body (an upload) gives up after ``BODY_IDLE_S`` without a byte, and the app
answers 408 too. A request line longer than the app's URI limit allows is answered here with the API's JSON
414, not gunicorn's HTML page.
"""

from __future__ import annotations

import errno
import json
import re
import selectors
import socket
import time
from functools import partial

from gunicorn.workers.gthread import TConn, ThreadWorker

from app.errors import BodyTimeout

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
# The first bytes of a body the main loop reads before a thread takes the request, and how long after its head
# they may take to arrive: a client that stalls there is answered 408 without holding a thread.
BODY_BUFFER_BYTES = 64 * 1024
BODY_TIMEOUT_S = 10.0
_CONTENT_LENGTH = re.compile(rb"^content-length[ \t]*:[ \t]*(\d{1,18})[ \t]*\r?$", re.I | re.M)
_EXPECT_CONTINUE = re.compile(rb"^expect[ \t]*:[ \t]*100-continue", re.I | re.M)


class _TimedSocket(socket.socket):
    """A client socket whose blocking mode has an idle timeout: gthread's threads set their sockets blocking
    (``setblocking(True)``), which would otherwise wait forever on a stalled client."""

    def setblocking(self, flag: bool) -> None:
        self.settimeout(BODY_IDLE_S if flag else 0.0)

    request = None  # the gunicorn request a thread is handling on this socket

    # A read past the idle timeout is the client stalling its body: the app answers BodyTimeout with 408, and
    # the request is marked to close the connection (its response says so; nothing more is read from it).
    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        try:
            return super().recv(bufsize, flags)
        except TimeoutError as exc:
            raise self._stalled(exc) from None

    def recv_into(self, buffer, nbytes: int = 0, flags: int = 0) -> int:
        try:
            return super().recv_into(buffer, nbytes, flags)
        except TimeoutError as exc:
            raise self._stalled(exc) from None

    def _stalled(self, exc: TimeoutError) -> BodyTimeout:
        if self.request is not None:
            self.request.must_close = True
        return BodyTimeout(*exc.args)


def _json_response(status: int, reason: str, code: str, message: str) -> bytes:
    body = json.dumps({"error": {"code": code, "message": message, "details": {}}}).encode()
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode() + body


class HeadFirstWorker(ThreadWorker):
    """gthread, with request heads read by the main loop (see the module docstring)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._heads: dict[TConn, tuple[bytearray, float]] = {}  # connections still sending a head
        # Connections whose head is whole, still sending the start of their body: bytes wanted in all.
        self._wants: dict[TConn, int] = {}

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
        want = self._wants.get(conn)
        try:
            data = conn.sock.recv(MAX_HEAD_BYTES + 1 - len(head) if want is None else want - len(head))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        head += data
        if want is not None:
            if len(head) >= want:
                self._hand_over(conn, head)
            return
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
        # The head is whole: the start of its body next, then a thread parses both and runs the request.
        end = head.find(b"\r\n\r\n")
        end = head.find(b"\n\n") + 2 if end < 0 else end + 4
        length = _CONTENT_LENGTH.search(head, 0, end)
        if length is not None and int(length.group(1)) > 0 and not _EXPECT_CONTINUE.search(head, 0, end):
            want = end + min(int(length.group(1)), BODY_BUFFER_BYTES)
            if len(head) < want:
                self._wants[conn] = want
                self._heads[conn] = (head, time.monotonic() + BODY_TIMEOUT_S)
                return
        self._hand_over(conn, head)

    def _hand_over(self, conn: TConn, head: bytearray) -> None:
        """A thread parses the connection's request (from ``head`` first) and runs it."""
        self.poller.unregister(conn.sock)
        del self._heads[conn]
        self._wants.pop(conn, None)
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
        self._wants.pop(conn, None)
        try:
            self.poller.unregister(conn.sock)
        except (KeyError, ValueError, OSError):
            pass
        self.nr_conns -= 1
        conn.close()

    def handle_request(self, req, conn):
        if isinstance(conn.sock, _TimedSocket):
            conn.sock.request = req
        try:
            return super().handle_request(req, conn)
        finally:
            if isinstance(conn.sock, _TimedSocket):
                conn.sock.request = None

    def murder_pending(self) -> None:
        super().murder_pending()
        now = time.monotonic()
        # A stopping worker does not wait for heads still arriving: they have no request to finish yet.
        for conn in [c for c, (_, deadline) in self._heads.items() if deadline <= now or not self.alive]:
            if conn in self._wants and self.alive:  # a head, then a body that stalled: say why
                self._refuse(conn, _json_response(408, "Request Timeout", "REQUEST_TIMEOUT",
                                                  f"The request body did not arrive within {BODY_TIMEOUT_S:g} s."))
            else:
                self._drop(conn)
