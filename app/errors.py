"""Typed API errors, the one table mapping error codes to HTTP statuses, and the JSON error handlers."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import sqlalchemy as sa
from flask import Flask, g, jsonify, request
from werkzeug.exceptions import HTTPException

from analysis.errors import TraceError

logger = logging.getLogger(__name__)

# Every API error code and its HTTP status. Trace error codes (analysis.errors) appear upper-cased.
ERROR_STATUS: dict[str, int] = {
    "VALIDATION_ERROR": 400,
    "BAD_REQUEST": 400,
    "UNAUTHORIZED": 401,
    "FORBIDDEN": 403,
    "CSRF_FAILED": 403,
    "NOT_FOUND": 404,
    "RUN_NOT_FOUND": 404,
    "REPORT_NOT_FOUND": 404,
    "JOB_NOT_FOUND": 404,
    "TOKEN_NOT_FOUND": 404,
    "METHOD_NOT_ALLOWED": 405,
    "REQUEST_TIMEOUT": 408,
    "CONFLICT": 409,
    "URI_TOO_LONG": 414,
    "RUN_DELETED": 409,
    "NOTHING_TO_RETRY": 409,
    "TOO_LARGE": 413,
    "UNSUPPORTED_MEDIA_TYPE": 415,
    "EMPTY_FILE": 422,
    "NOT_SQLITE": 422,
    "UNKNOWN_FORMAT": 422,
    "NOT_NSYS_EXPORT": 422,
    "NOT_NCU_CSV": 422,
    "NOT_NCCL_LOG": 422,
    "NCU_REP_NEEDS_NCU": 422,
    "NSYS_REP_NEEDS_NSYS": 422,
    "CORRUPT": 422,
    "UNSAFE_SCHEMA": 422,
    "UNSUPPORTED_SCHEMA": 422,
    "BAD_COMPRESSION": 422,
    "BAD_WINDOW": 422,
    "NO_SPACE": 507,
    "INTERNAL": 500,
    "WORKER_CRASHED": 500,
    "TIMEOUT": 504,
    "SERVICE_UNAVAILABLE": 503,
}
_HTTP_CODES = {400: "BAD_REQUEST", 401: "UNAUTHORIZED", 403: "FORBIDDEN", 404: "NOT_FOUND",
               405: "METHOD_NOT_ALLOWED", 408: "REQUEST_TIMEOUT", 413: "TOO_LARGE", 414: "URI_TOO_LONG", 415: "UNSUPPORTED_MEDIA_TYPE"}
# Seconds a client is told to wait when the metadata DB is busy (a held lock, a lost connection).
BUSY_RETRY_AFTER_S = 2
# SQLSTATEs of PostgreSQL that mean "busy, try again": lock_timeout, statement cancelled, serialization
# failure, deadlock, too many connections, shutting down.
_PG_BUSY = {"55P03", "57014", "40001", "40P01", "53300", "57P01", "57P03"}


class CodedError(Exception):
    """An error raised below the web layer (storage) that carries an API error code (a key of ERROR_STATUS)
    and a message; the handlers here answer it as that code. Those layers import this module, never the
    reverse."""

    code = "INTERNAL"

    def __init__(self, message: str, details: dict[str, Any] | None = None, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.details = details or {}


class ApiError(Exception):
    """An error a client can act on: a stable code (a key of ERROR_STATUS), a message and details."""

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None,
                 headers: dict[str, str] | None = None) -> None:
        if code not in ERROR_STATUS:
            raise ValueError(f"unknown API error code {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details or {}
        self.headers = headers or {}

    @property
    def status(self) -> int:
        return ERROR_STATUS[self.code]

    @classmethod
    def from_storage_error(cls, exc: CodedError) -> ApiError:
        return cls(exc.code if exc.code in ERROR_STATUS else "INTERNAL", exc.message, exc.details)

    @classmethod
    def from_trace_error(cls, exc: TraceError) -> ApiError:
        """Every trace error code has its own API code (the table holds each, upper-cased)."""
        return cls(exc.code.upper(), exc.message, exc.details)


class BodyTimeout(TimeoutError):
    """The client stopped sending its request body: raised by the web worker's client socket when a read waits
    past its idle timeout (``goodput_cli.web_worker.BODY_IDLE_S``); answered 408 and the connection closed."""


class BadBody(ValueError):
    """The request body is malformed on the wire (a broken or aborted chunked encoding): raised by the web
    worker's request input (``goodput_cli.web_worker``) while the app reads it; answered 400 and the connection
    closed."""


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def _json_error(exc: ApiError):
    response = jsonify(error_body(exc.code, exc.message, exc.details))
    response.status_code = exc.status
    response.headers.update(exc.headers)
    if exc.status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="goodput"'
    return response


def is_busy(exc: BaseException) -> bool:
    """Whether a database error means "busy or unreachable for now" (503) rather than a bug (500)."""
    if isinstance(exc, sa.exc.TimeoutError):  # no pooled connection free in time
        return True
    if not isinstance(exc, sa.exc.OperationalError):
        return False
    orig = exc.orig
    state = getattr(orig, "sqlstate", None)
    if state is not None:
        return state in _PG_BUSY or state.startswith("08")  # 08xxx: connection exceptions
    text = str(orig).lower()
    if type(orig).__module__.startswith("sqlite3"):
        return "locked" in text or "busy" in text
    return exc.connection_invalidated or "connect" in text or "server closed" in text


def is_disk_full(exc: BaseException) -> bool:
    """Whether a database error means the metadata DB's disk is full (507, as a full upload disk is)."""
    if not isinstance(exc, sa.exc.OperationalError | sa.exc.InternalError):
        return False
    orig = exc.orig
    state = getattr(orig, "sqlstate", None)
    if state is not None:
        return state == "53100"  # PostgreSQL disk_full
    # SQLite's SQLITE_FULL: "database or disk is full" (also when max_page_count is reached).
    return type(orig).__module__.startswith("sqlite3") and "disk is full" in str(orig).lower()


def _wants_json() -> bool:
    return request.path.startswith("/api/")


def request_id() -> str:
    if "request_id" not in g:
        g.request_id = request.headers.get("X-Request-Id", "")[:64] or uuid.uuid4().hex
    return g.request_id


def init_app(app: Flask) -> None:
    """Register the handlers: typed errors always as JSON; HTTP and unexpected errors as JSON under /api/."""

    @app.errorhandler(ApiError)
    def _api_error(exc: ApiError):
        return _json_error(exc)

    @app.errorhandler(TraceError)
    def _trace_error(exc: TraceError):
        return _json_error(ApiError.from_trace_error(exc))

    @app.errorhandler(CodedError)
    def _storage_error(exc: CodedError):
        return _json_error(ApiError.from_storage_error(exc))

    @app.errorhandler(BodyTimeout)
    def _client_timeout(exc: BodyTimeout):
        # The client stalled while its body was read. Nothing was stored (staged parts are discarded); the
        # connection is closed.
        logger.warning("request body stalled: %s", request.path)
        message = "The request body stopped arriving; nothing was stored."
        response = _json_error(ApiError("REQUEST_TIMEOUT", message)) if _wants_json() else (message, 408)
        response = app.make_response(response)
        response.headers["Connection"] = "close"
        return response

    @app.errorhandler(BadBody)
    def _bad_body(exc: BadBody):
        logger.warning("malformed request body: %s: %s", request.path, exc)
        response = app.make_response(_json_error(ApiError("BAD_REQUEST", f"The request body is malformed: {exc}.")))
        response.headers["Connection"] = "close"
        return response

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException):
        if not _wants_json():
            return exc
        code = _HTTP_CODES.get(exc.code or 500, "BAD_REQUEST" if (exc.code or 500) < 500 else "INTERNAL")
        response = jsonify(error_body(code, exc.description or exc.name))
        response.status_code = exc.code or 500
        # Headers the exception carries (Allow on a 405, Retry-After) survive the JSON body.
        for name, value in exc.get_headers():
            if name.lower() != "content-type":
                response.headers[name] = value
        return response

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception):
        if is_disk_full(exc):
            logger.error("metadata DB disk full: %s", type(getattr(exc, "orig", exc)).__name__)
            message = "The server's disk is full; nothing was stored. Retry once space is freed."
            if not _wants_json():
                return message, 507, {"Content-Type": "text/plain"}
            return _json_error(ApiError("NO_SPACE", message))
        if is_busy(exc):
            logger.warning("metadata DB busy: %s", type(getattr(exc, "orig", exc)).__name__)
            message = "The database is busy; retry shortly."
            if not _wants_json():
                return message, 503, {"Retry-After": str(BUSY_RETRY_AFTER_S), "Content-Type": "text/plain"}
            response = jsonify(error_body("SERVICE_UNAVAILABLE", message, {"retry_after_s": BUSY_RETRY_AFTER_S}))
            response.status_code = 503
            response.headers["Retry-After"] = str(BUSY_RETRY_AFTER_S)
            return response
        rid = request_id()
        logger.exception("unexpected error", extra={"request_id": rid})
        body = error_body("INTERNAL", f"An unexpected error occurred (request id {rid}).", {"request_id": rid})
        if not _wants_json():
            return f"Internal error (request id {rid}).", 500
        response = jsonify(body)
        response.status_code = 500
        return response
