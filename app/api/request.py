"""The request class: multipart file parts spool to ``data_dir/staging`` through the upload sink; malformed
multipart bodies, file names with control characters and oversized or too deeply nested JSON are 400s."""

from __future__ import annotations

import io
import json
import re
import socket
import ssl
from typing import IO, Any, cast

from flask import Request
from werkzeug.formparser import FormDataParser

from app.errors import ApiError
from app.settings import current_settings
from app.text import check_text, unencodable_path

# JSON bodies carry run metadata only: small and flat.
MAX_JSON_BYTES = 64 * 1024
MAX_JSON_DEPTH = 32
# The bytes the depth scan stops at: quotes and backslashes (strings), brackets and braces (nesting).
_JSON_SPECIAL = re.compile(rb'["\\\[\]{}]')


def json_depth(raw: bytes, limit: int | None = None) -> int:
    """The deepest nesting of arrays and objects in ``raw`` (strings skipped), without parsing it: the
    parser itself recurses, so a body is measured before it is parsed. One pass, linear in ``len(raw)``
    whatever the body holds (a regex over strings backtracks on an unterminated one, once per quote);
    stops as soon as ``limit`` is passed."""
    depth = deepest = 0
    in_string = False
    skip = -1  # the byte after a backslash inside a string: escaped, whatever it is
    for match in _JSON_SPECIAL.finditer(raw):
        at = match.start()
        if at == skip:
            continue
        char = raw[at]
        if in_string:
            if char == 0x5C:  # backslash
                skip = at + 1
            elif char == 0x22:  # quote
                in_string = False
        elif char == 0x22:
            in_string = True
        elif char in b"[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if limit is not None and deepest > limit:
                    break
        elif char in b"]}":
            depth -= 1
    return deepest


class GoodputRequest(Request):
    # Form fields (not files) above this are refused: metadata is small.
    max_form_memory_size = 1024 * 1024

    def make_form_data_parser(self) -> FormDataParser:
        # Werkzeug's parser is silent by default: a malformed body becomes an empty form, and an upload
        # of nothing. Ours raises, and _load_form_data turns that into a 400.
        return self.form_data_parser_class(
            stream_factory=self._get_file_stream, max_form_memory_size=self.max_form_memory_size,
            max_content_length=self.max_content_length, max_form_parts=self.max_form_parts,
            cls=self.parameter_storage_class, silent=False)

    def _load_form_data(self) -> None:
        try:
            super()._load_form_data()
        except ValueError as exc:
            raise ApiError("BAD_REQUEST", f"Malformed multipart/form-data body: {exc}.") from None
        if self.mimetype == "multipart/form-data":
            # Werkzeug decodes multipart fields with errors="replace": bytes that are not UTF-8 (an encoded
            # surrogate such as ED A0 80) arrive as U+FFFD, and would be stored as such. The JSON API refuses
            # the same text; so do we, naming the field.
            for key, value in self.form.items(multi=True):
                if "\ufffd" in key or "\ufffd" in value:
                    field = key.replace("\ufffd", "?")[:100]
                    raise ApiError("VALIDATION_ERROR", f"The form field '{field}' is not valid UTF-8 (or holds "
                                   "U+FFFD, the mark of text that was not).",
                                   {"fields": {field: "valid UTF-8 without U+FFFD"}})

    def get_json(self, force: bool = False, silent: bool = False, cache: bool = True) -> Any:
        """The JSON body, at most MAX_JSON_BYTES and MAX_JSON_DEPTH levels deep (ApiError 400 otherwise)."""
        if not (force or self.is_json):
            return super().get_json(force=force, silent=silent, cache=cache)
        if (self.content_length or 0) > MAX_JSON_BYTES:
            raise ApiError("BAD_REQUEST", f"The JSON body is larger than {MAX_JSON_BYTES} bytes.",
                           {"limit_bytes": MAX_JSON_BYTES})
        raw = self.stream.read(MAX_JSON_BYTES + 1)
        if len(raw) > MAX_JSON_BYTES:
            raise ApiError("BAD_REQUEST", f"The JSON body is larger than {MAX_JSON_BYTES} bytes.",
                           {"limit_bytes": MAX_JSON_BYTES})
        if json_depth(raw, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
            raise ApiError("BAD_REQUEST", f"The JSON body is nested deeper than {MAX_JSON_DEPTH} levels.",
                           {"limit_depth": MAX_JSON_DEPTH})
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):
            if silent:
                return None
            raise ApiError("BAD_REQUEST", "The body is not valid JSON.") from None
        where = unencodable_path(body)
        if where is not None:
            # Refused whatever the field: stored, such text breaks every page that shows it.
            raise ApiError("VALIDATION_ERROR", f"{where} holds an unpaired surrogate (\\ud800-\\udfff).",
                           {"field": where.split(".")[0].split("[")[0],
                            "fields": {where.split(".")[0].split("[")[0]: "valid Unicode text"}})
        return body

    def _get_file_stream(
        self, total_content_length: int | None, content_type: str | None,
        filename: str | None = None, content_length: int | None = None,
    ) -> IO[bytes]:
        # Werkzeug would spool to the system temp dir; ours hashes, decompresses and caps on the way in.
        from app.services.storage import storage_for

        check_text("file name", filename)  # before a byte of the part is stored
        settings = current_settings()
        sink = storage_for(settings).open_sink(settings.max_upload_bytes, filename or "")
        self.__dict__.setdefault("_upload_sinks", []).append(sink)
        # Werkzeug only writes, seeks to the start and closes: UploadSink is that file for it.
        return cast("IO[bytes]", sink)

    def close(self) -> None:
        # Staged parts a service did not move into uploads/ are removed: nothing stored on error.
        try:
            super().close()
        finally:
            for sink in self.__dict__.pop("_upload_sinks", []):
                sink.discard()


class SocketBody:
    """A Content-Length request body under gunicorn, read with ``recv_into`` straight from the client socket
    into the caller's buffer: gunicorn's own reader copies each chunk through three BytesIO buffers.

    The bytes gunicorn has already buffered come first; its reader's remaining length is kept equal to what
    is left on the socket, so on any error gunicorn drains (or closes) the connection exactly as if it had
    read the body itself, and a pipelined next request stays intact.
    """

    def __init__(self, sock: socket.socket, reader, prefix: bytes) -> None:
        self._sock = sock
        self._reader = reader
        self._prefix = memoryview(prefix)
        self.length = len(prefix) + reader.length

    def readinto(self, view: memoryview) -> int:
        if self._prefix:
            n = min(len(view), len(self._prefix))
            view[:n] = self._prefix[:n]
            self._prefix = self._prefix[n:]
            return n
        want = min(len(view), self._reader.length)
        if want == 0:
            return 0
        n = self._sock.recv_into(view, want)
        self._reader.length -= n
        return n


def socket_body(environ: dict) -> SocketBody | None:
    """The fast body reader when gunicorn serves a plain-socket request with a Content-Length and nothing
    has read past the body's buffered part; None otherwise (chunked, TLS, other servers, test clients)."""
    try:
        from gunicorn.http.body import Body, LengthReader
        from gunicorn.http.unreader import SocketUnreader
    except ImportError:
        return None
    body, sock = environ.get("wsgi.input"), environ.get("gunicorn.socket")
    # A plain socket (goodput's worker uses a subclass with an idle timeout); never TLS, whose bytes differ.
    if (not isinstance(sock, socket.socket) or isinstance(sock, ssl.SSLSocket) or not isinstance(body, Body)
            or getattr(body, "failed", True)):
        return None
    reader = body.reader
    # take_buffered and Body.failed exist in the gunicorn we pin (27); a version without them takes the
    # general path.
    if (not isinstance(reader, LengthReader) or not isinstance(reader.unreader, SocketUnreader)
            or not hasattr(reader.unreader, "take_buffered") or not isinstance(body.buf, io.BytesIO)):
        return None
    held = body.buf.getvalue()  # bytes the body already took from its reader
    body.buf = io.BytesIO()
    ahead = reader.unreader.take_buffered()  # bytes read off the socket, maybe past this body
    take = ahead[: reader.length]
    if len(ahead) > len(take):
        reader.unreader.unread(ahead[len(take):])  # the next pipelined request: gunicorn parses it
    reader.length -= len(take)
    return SocketBody(sock, reader, held + take)
