"""The one id guard: which integers can name a row, and the URL converter every id path parameter uses.

Ids are INTEGER columns (int4 on PostgreSQL), so a larger number names no row; handed to a driver it
overflows instead (SQLite past 2**63 - 1, psycopg past 2**31 - 1 against an int4 column). Routes take ids
through ``<id:name>``, which refuses such numbers while routing, so the view never runs and the answer is
the same 404 on both databases.
"""

from __future__ import annotations

import re

from werkzeug.exceptions import NotFound
from werkzeug.routing import IntegerConverter

MAX_ID = 2**31 - 1
# Python's int() and float() take any Unicode digit ("１", "٣") and underscores ("1_0"); a client's number is
# ASCII: the same text names the same row or value everywhere (logs, SQL, other clients).
_INT = re.compile(r"[+-]?[0-9]{1,30}")
_NUMBER = re.compile(r"[+-]?([0-9]{1,400}(\.[0-9]{0,400})?|\.[0-9]{1,400})([eE][+-]?[0-9]{1,4})?")


def ascii_int(text: str) -> int:
    """``int(text)`` for ASCII decimal digits with an optional sign only; ValueError otherwise."""
    if not _INT.fullmatch(text):
        raise ValueError(f"not an ASCII decimal integer: {text[:30]!r}")
    return int(text)


def ascii_float(text: str) -> float:
    """``float(text)`` for an ASCII decimal number (no inf, nan, Unicode digits or underscores)."""
    if not _NUMBER.fullmatch(text):
        raise ValueError(f"not an ASCII decimal number: {text[:30]!r}")
    return float(text)


def valid_id(value: int) -> bool:
    """True when ``value`` could be a row id (1 to ``MAX_ID``)."""
    return 0 < value <= MAX_ID


class IdConverter(IntegerConverter):
    """``<id:run_id>``: decimal digits naming a possible row id; other digits are a 404 at once.

    NotFound rather than werkzeug's ValidationError: with the latter the matcher goes on to the rules of
    the same path with other methods and answers 405 (``DELETE /runs/<too big>`` beside ``GET``).
    """

    regex = r"[0-9]+"  # IntegerConverter's \d+ matches every Unicode digit: "/tokens/１" revoked token 1

    def to_python(self, value: str) -> int:
        number = ascii_int(value)
        if not valid_id(number):
            raise NotFound(f"No row has the id {value[:30]}.")
        return number
