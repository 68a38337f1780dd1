"""Checks on names and text a client sends: no control characters (NUL breaks PostgreSQL, CR/LF headers, TAB
disappears in URLs), before anything is stored or queried."""

from __future__ import annotations

import re
from typing import Any

from app.errors import ApiError

# C0 controls, DEL and C1 controls: never part of a name, tag, file name or path we keep or show. Nor are
# surrogates: in a Python str they are unpaired (a JSON "\\udfff", a command-line byte that is not UTF-8),
# and text holding one cannot be encoded to store or show it.
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_SURROGATE_RE = re.compile(r"[\ud800-\udfff]")
# The same class as a JSON Schema pattern fragment (ECMA-262), for the OpenAPI document.
NO_CONTROL = r"[^\u0000-\u001f\u007f-\u009f]"


def has_control(value: str) -> bool:
    return CONTROL_RE.search(value) is not None


def check_text(field: str, value: str | None) -> None:
    """Raise ApiError VALIDATION_ERROR (400) when ``value`` holds a control character or a surrogate."""
    if value is not None and has_control(value):
        raise ApiError("VALIDATION_ERROR", f"{field} must not contain control characters.",
                       {"field": field, "fields": {field: "no control characters (NUL, tab, newline, ...) "
                                                          "or unpaired surrogates"}})


def unencodable_path(value: Any, path: str = "") -> str | None:
    """Where in a parsed JSON value a string (key or value) holds an unpaired surrogate, as ``a.b[2]``; None
    when every string is valid Unicode. JSON's ``\\ud800`` escapes parse into such strings."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if _SURROGATE_RE.search(item):
                return where or "body"
        elif isinstance(item, dict):
            for key, sub in item.items():
                inner = f"{where}.{key}" if where else str(key)
                if _SURROGATE_RE.search(key):
                    return where or "body"
                stack.append((sub, inner))
        elif isinstance(item, list):
            stack.extend((sub, f"{where}[{i}]") for i, sub in enumerate(item))
    return None


def printable(value: str, limit: int) -> str:
    """``value`` without control characters, cut to ``limit`` characters (for keys we record, e.g. a name
    someone tried to sign in with)."""
    return CONTROL_RE.sub("", value or "")[:limit]
