"""Checks on names and text a client sends: no control characters (NUL breaks PostgreSQL, CR/LF headers, TAB
disappears in URLs), before anything is stored or queried."""

from __future__ import annotations

import re

from app.errors import ApiError

# C0 controls, DEL and C1 controls: never part of a name, tag, file name or path we keep or show.
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# The same class as a JSON Schema pattern fragment (ECMA-262), for the OpenAPI document.
NO_CONTROL = r"[^\u0000-\u001f\u007f-\u009f]"


def has_control(value: str) -> bool:
    return CONTROL_RE.search(value) is not None


def check_text(field: str, value: str | None) -> None:
    """Raise ApiError VALIDATION_ERROR (400) when ``value`` holds a control character."""
    if value is not None and has_control(value):
        raise ApiError("VALIDATION_ERROR", f"{field} must not contain control characters.",
                       {"field": field, "fields": {field: "no control characters (NUL, tab, newline, ...)"}})


def printable(value: str, limit: int) -> str:
    """``value`` without control characters, cut to ``limit`` characters (for keys we record, e.g. a name
    someone tried to sign in with)."""
    return CONTROL_RE.sub("", value or "")[:limit]
