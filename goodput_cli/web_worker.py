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

from gunicorn.http.errors import NoMoreData, ParseException
from gunicorn.workers.gthread import TConn, ThreadWorker

from analysis import fmt
from app.errors import BadBody, BodyTimeout

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
# ... or once, after RATE_GRACE_S, it has averaged less than MIN_BODY_RATE bytes a second (a trickle).
RATE_GRACE_S = 20.0
MIN_BODY_RATE = 16 * 1024
# The first bytes of a body the main loop reads before a thread takes the request, and how long after its head
# they may take to arrive: a client that stalls there is answered 408 without holding a thread.
BODY_BUFFER_BYTES = 64 * 1024
BODY_TIMEOUT_S = 10.0
# Bodies up to this size (every JSON or form request, sign-in included) are read whole by the main loop before a
# thread takes the request; a larger one is refused here (413) unless its route takes uploads, which gets its
# first BODY_BUFFER_BYTES here and the rest in a thread. Chunked bodies alike.
SMALL_BODY_BYTES = 1024 * 1024
_UPLOAD_ROUTE = re.compile(rb"(POST /api/v1/runs[ ?]|PUT /api/v1/runs/[^ /?]+/reports/[^ ?]+[ ?])")
_CONTENT_LENGTH = re.compile(rb"^content-length[ \t]*:[ \t]*(\d{1,18})[ \t]*\r?$", re.I | re.M)
_EXPECT_CONTINUE = re.compile(rb"^expect[ \t]*:[ \t]*100-continue", re.I | re.M)
_CHUNKED = re.compile(rb"^transfer-encoding[ \t]*:[^\r\n]*chunked", re.I | re.M)
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}(;[^\r\n]*)?\r\n")
CHUNKED = -1  # in _wants: read a chunked body until its last chunk


class _TimedSocket(socket.socket):
    """A client socket whose blocking mode has an idle timeout: gthread's threads set their sockets blocking
    (``setblocking(True)``), which would otherwise wait forever on a stalled client."""

    def setblocking(self, flag: bool) -> None:
        self.settimeout(BODY_IDLE_S if flag else 0.0)

    request = None  # the gunicorn request a thread is handling on this socket
    _since = 0.0  # when the thread took the request
    _got = 0  # body bytes the thread has read since

    def start_request(self, request) -> None:
        self.request, self._since, self._got = request, time.monotonic(), 0

    # A read past the idle timeout is the client stalling its body: the app answers BodyTimeout with 408, and
    # the request is marked to close the connection (its response says so; nothing more is read from it).
    # So is a body trickling in slower than MIN_BODY_RATE (a byte every few seconds resets an idle timeout).
    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        try:
            data = super().recv(bufsize, flags)
        except TimeoutError as exc:
            raise self._stalled(exc) from None
        self._check_rate(len(data))
        return data

    def recv_into(self, buffer, nbytes: int = 0, flags: int = 0) -> int:
        try:
            n = super().recv_into(buffer, nbytes, flags)
        except TimeoutError as exc:
            raise self._stalled(exc) from None
        self._check_rate(n)
        return n

    def _check_rate(self, n: int) -> None:
        if self.request is None:
            return
        self._got += n
        elapsed = time.monotonic() - self._since
        if elapsed > RATE_GRACE_S and self._got < MIN_BODY_RATE * elapsed:
            raise self._stalled(TimeoutError(f"the body arrives at {fmt.rate(self._got / elapsed)}"))

    def _stalled(self, exc: TimeoutError) -> BodyTimeout:
        if self.request is not None:
            self.request.must_close = True
        return BodyTimeout(*exc.args)


def _json_response(status: int, reason: str, code: str, message: str) -> bytes:
    body = json.dumps({"error": {"code": code, "message": message, "details": {}}}).encode()
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode() + body


# A closing connection's unread request bytes are drained for at most this long (RFC 9112 section 9.6), on the
# main loop's poller: gunicorn's own graceful close blocks the main loop up to 2 s per connection.
LINGER_S = 2.0
LINGER_BYTES = 64 * 1024
# Threads that may read upload bodies at once (per worker); further uploads wait, holding no thread, so a few
# slow or stalled uploads never take the threads every other request needs.
UPLOAD_THREADS = 8
# How long an upload may wait for one of those threads before it is answered 503.
UPLOAD_WAIT_S = 60.0


class _Conn(TConn):
    """gthread's connection, whose graceful close lingers on the worker's poller instead of blocking it."""

    def __init__(self, worker, *args) -> None:
        super().__init__(*args)
        self._worker = worker

    def close(self, graceful: bool = False) -> None:
        if graceful and self._worker.alive:
            self._worker.linger(self.sock)
        else:
            super().close(graceful)


class _GuardedInput:
    """``wsgi.input`` whose wire errors (a malformed or aborted chunked body: gunicorn's parse errors and
    NoMoreData) reach the app as ``BadBody``, which it answers 400 with a JSON error, not a 500."""

    def __init__(self, raw) -> None:
        self._raw = raw

    def _call(self, name: str, *args):
        try:
            return getattr(self._raw, name)(*args)
        except (ParseException, NoMoreData) as exc:
            raise BadBody(" ".join(str(exc).split())[:200] or type(exc).__name__) from None

    def read(self, *args):
        return self._call("read", *args)

    def readline(self, *args):
        return self._call("readline", *args)

    def readlines(self, *args):
        return self._call("readlines", *args)

    def __iter__(self):
        return self

    def __next__(self):
        line = self.readline()
        if not line:
            raise StopIteration
        return line


def _guard_input(app):
    def wsgi(environ, start_response):
        # Chunked bodies only: a Content-Length body keeps gunicorn's own reader (app.api.request.socket_body
        # reads an upload straight off the socket through it), and its short reads are the app's 400 already.
        if "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower():
            environ["wsgi.input"] = _GuardedInput(environ["wsgi.input"])
        return app(environ, start_response)

    return wsgi


class HeadFirstWorker(ThreadWorker):
    """gthread, with request heads read by the main loop (see the module docstring)."""

    def load_wsgi(self) -> None:
        super().load_wsgi()
        self.wsgi = _guard_input(self.wsgi)  # type: ignore[has-type]  # set by gunicorn's load_wsgi

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._lingering: dict[socket.socket, tuple[float, int]] = {}  # closing sockets: deadline, bytes drained
        self._uploads: set[TConn] = set()  # upload requests a thread is running
        self._waiting_uploads: list[tuple[TConn, bytearray, float]] = []  # uploads waiting for a thread
        self._heads: dict[TConn, tuple[bytearray, float]] = {}  # connections still sending a head
        # Connections whose head is whole, still sending the start of their body: bytes wanted in all.
        self._wants: dict[TConn, int] = {}
        self._body_starts: dict[TConn, int] = {}  # chunked bodies: where the body starts in the buffer

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
        conn = _Conn(self, self.cfg, sock, addr, listener.getsockname())
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

    def _on_head_readable(self, conn: TConn, sock) -> None:
        # An exception here would end the worker process (and every connection it holds): a bad request never may.
        try:
            self._read_head(conn, sock)
        except Exception:
            self.log.exception("reading a request head failed; connection dropped")
            if conn in self._heads:
                self._drop(conn)

    def _read_head(self, conn: TConn, _sock) -> None:
        head, _deadline = self._heads[conn]
        want = self._wants.get(conn)
        try:
            size = MAX_HEAD_BYTES + 1 - len(head) if want is None else 65536 if want == CHUNKED else want - len(head)
            data = conn.sock.recv(size)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            if want is not None:  # the body was cut short: the app says so (400) to a client still listening
                self._hand_over(conn, head)
            else:
                self._drop(conn)
            return
        head += data
        if want is not None:
            if want == CHUNKED:
                self._on_chunked(conn, head)
            elif len(head) >= want:
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
        # The head is whole: its body next (all of a small one, the start of an upload), then a thread parses
        # both and runs the request.
        end = head.find(b"\r\n\r\n")
        end = head.find(b"\n\n") + 2 if end < 0 else end + 4
        upload = _UPLOAD_ROUTE.match(head, 0, min(end, MAX_REQUEST_LINE)) is not None
        length = _CONTENT_LENGTH.search(head, 0, end)
        size = int(length.group(1)) if length is not None else 0  # read now: the head may be rewritten below
        chunked = _CHUNKED.search(head, 0, end) is not None
        if size > SMALL_BODY_BYTES and not upload and not chunked:
            self._refuse(conn, _json_response(413, "Content Too Large", "TOO_LARGE",
                                              f"The request body is larger than {SMALL_BODY_BYTES} bytes."))
            return
        if chunked or size > 0:
            if _EXPECT_CONTINUE.search(head, 0, end):
                # We read the body here, so we say "go on" here; the thread must not say it again.
                try:
                    conn.sock.send(b"HTTP/1.1 100 Continue\r\n\r\n")
                except OSError:
                    self._drop(conn)
                    return
                head[:end] = _EXPECT_CONTINUE.sub(b"X-Goodput-Continued: 100-continue", bytes(head[:end]))
                end = head.find(b"\r\n\r\n")
                end = head.find(b"\n\n") + 2 if end < 0 else end + 4
            self._heads[conn] = (head, time.monotonic() + BODY_TIMEOUT_S)
            if chunked:
                self._wants[conn] = CHUNKED
                self._body_starts[conn] = end
                self._on_chunked(conn, head)
                return
            want = end + (size if size <= SMALL_BODY_BYTES else BODY_BUFFER_BYTES)
            if len(head) < want:
                self._wants[conn] = want
                return
        self._hand_over(conn, head)

    def _on_chunked(self, conn: TConn, head: bytearray) -> None:
        """A chunked body: handed over once its last chunk is here (or its first size line is not one: the
        thread's parser answers 400); an upload's once its first BODY_BUFFER_BYTES are here; any other is
        refused past SMALL_BODY_BYTES."""
        start = self._body_starts[conn]
        size = len(head) - start
        first = bytes(head[start:start + 200])
        if first[:1] and (first[:1] not in b"0123456789abcdefABCDEF"
                          or (b"\r\n" in first and not _CHUNK_SIZE.match(first))):
            self._hand_over(conn, head)  # malformed from its first line: the parser says so
            return
        tail = bytes(head[max(start, len(head) - 4096):])
        if tail.endswith(b"\r\n\r\n") and (tail.endswith(b"0\r\n\r\n") or b"\r\n0\r\n" in tail
                                             or first.startswith(b"0\r\n")):
            self._hand_over(conn, head)
            return
        if _UPLOAD_ROUTE.match(bytes(head[:MAX_REQUEST_LINE])):
            if size >= BODY_BUFFER_BYTES:  # an upload's start, as with a Content-Length
                self._hand_over(conn, head)
        elif size > SMALL_BODY_BYTES:
            self._refuse(conn, _json_response(413, "Content Too Large", "TOO_LARGE",
                                              f"The request body is larger than {SMALL_BODY_BYTES} bytes."))

    def linger(self, sock: socket.socket) -> None:
        """Close ``sock`` gracefully without blocking: half-close, then drain what the client still sends
        on the poller until it closes, LINGER_BYTES or LINGER_S."""
        try:
            sock.shutdown(socket.SHUT_WR)
            sock.setblocking(False)
            self.poller.register(sock, selectors.EVENT_READ, self._on_linger_readable)
        except (OSError, ValueError, KeyError):
            sock.close()
            return
        self._lingering[sock] = (time.monotonic() + LINGER_S, 0)

    def _on_linger_readable(self, sock: socket.socket) -> None:
        deadline, drained = self._lingering.get(sock, (0.0, 0))
        try:
            data = sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        drained += len(data)
        if not data or drained >= LINGER_BYTES:
            self._end_linger(sock)
        else:
            self._lingering[sock] = (deadline, drained)

    def _end_linger(self, sock: socket.socket) -> None:
        self._lingering.pop(sock, None)
        try:
            self.poller.unregister(sock)
        except (KeyError, ValueError, OSError):
            pass
        sock.close()

    def finish_request(self, conn, fs) -> None:
        if conn in self._uploads:
            self._uploads.discard(conn)
            self._start_waiting_uploads()
        super().finish_request(conn, fs)

    def _start_waiting_uploads(self) -> None:
        while self._waiting_uploads and len(self._uploads) < UPLOAD_THREADS:
            conn, head, _ = self._waiting_uploads.pop(0)
            self._uploads.add(conn)
            self._submit(conn, head)

    def _hand_over(self, conn: TConn, head: bytearray) -> None:
        """A thread parses the connection's request (from ``head`` first) and runs it; an upload waits for one
        of the UPLOAD_THREADS (holding no thread meanwhile)."""
        self.poller.unregister(conn.sock)
        del self._heads[conn]
        self._wants.pop(conn, None)
        self._body_starts.pop(conn, None)
        if _UPLOAD_ROUTE.match(bytes(head[:MAX_REQUEST_LINE])):
            if len(self._uploads) >= UPLOAD_THREADS:
                self._waiting_uploads.append((conn, head, time.monotonic() + UPLOAD_WAIT_S))
                return
            self._uploads.add(conn)
        self._submit(conn, head)

    def _submit(self, conn: TConn, head: bytearray) -> None:
        try:
            conn.init()
            conn.parser.unreader.unread(bytes(head))
        except Exception:
            self.nr_conns -= 1
            conn.close()
            return
        conn.data_ready = True
        self.enqueue_req(conn)

    def _refuse(self, conn: TConn, response: bytes, registered: bool = True) -> None:
        try:
            conn.sock.send(response)  # non-blocking: a small answer fits the socket's buffer
        except OSError:
            pass
        if registered:
            self._drop(conn)
        else:
            self.nr_conns -= 1
            conn.close()

    def _drop(self, conn: TConn) -> None:
        self._heads.pop(conn, None)
        self._wants.pop(conn, None)
        self._body_starts.pop(conn, None)
        try:
            self.poller.unregister(conn.sock)
        except (KeyError, ValueError, OSError):
            pass
        self.nr_conns -= 1
        conn.close()

    def handle_request(self, req, conn):
        if isinstance(conn.sock, _TimedSocket):
            conn.sock.start_request(req)
        try:
            return super().handle_request(req, conn)
        finally:
            if isinstance(conn.sock, _TimedSocket):
                conn.sock.request = None

    def murder_pending(self) -> None:
        super().murder_pending()
        now = time.monotonic()
        for sock in [k for k, (deadline, _) in self._lingering.items() if deadline <= now or not self.alive]:
            self._end_linger(sock)
        for item in [w for w in self._waiting_uploads if w[2] <= now or not self.alive]:
            self._waiting_uploads.remove(item)
            self._refuse(item[0], _json_response(503, "Service Unavailable", "SERVICE_UNAVAILABLE",
                                                 "Too many uploads are being received; retry shortly."),
                         registered=False)
        # A stopping worker does not wait for heads still arriving: they have no request to finish yet.
        for conn in [c for c, (_, deadline) in self._heads.items() if deadline <= now or not self.alive]:
            if conn in self._wants and self.alive:  # a head, then a body that stalled: say why
                self._refuse(conn, _json_response(408, "Request Timeout", "REQUEST_TIMEOUT",
                                                  f"The request body did not arrive within {fmt.exact(BODY_TIMEOUT_S)} s."))
            else:
                self._drop(conn)
