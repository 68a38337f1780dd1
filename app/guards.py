"""Checks every request passes before routing: a bounded URI (414) and no control characters in the path or
the query (400), so no view, database or header ever sees them."""

from __future__ import annotations

from urllib.parse import quote

from flask import Flask, abort, request

from app.errors import ApiError
from app.text import has_control

# Longest request target (path and query, percent-encoded) we answer: below gunicorn's request-line limit
# (4094 bytes with method and version), so every over-long URI gets the same documented 414.
MAX_URI_BYTES = 4000
# Query parameters that are validated by their view instead (a bad `next` after sign-in goes to `/`).
_LENIENT = frozenset({"next"})


def _refuse(code: str, status: int, message: str):
    if request.path.startswith("/api/"):
        raise ApiError(code, message)
    abort(status, description=message)


def check_request() -> None:
    environ = request.environ
    target = len(quote(environ.get("PATH_INFO", ""), safe="/:@!$&'()*+,;=-._~")) + len(
        environ.get("QUERY_STRING", "")) + 1
    if target > MAX_URI_BYTES:
        _refuse("URI_TOO_LONG", 414, f"The request URI is longer than {MAX_URI_BYTES} bytes.")
    if has_control(request.path):
        _refuse("VALIDATION_ERROR", 400, "The path must not contain control characters.")
    for key, values in request.args.lists():
        if has_control(key) or (key not in _LENIENT and any(has_control(v) for v in values)):
            _refuse("VALIDATION_ERROR", 400, f"Query parameter {key[:50]!r} must not contain control characters.")


def init_app(app: Flask) -> None:
    app.before_request(check_request)
