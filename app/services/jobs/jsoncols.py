"""JSON-safe copies of values for the metadata DB's JSON columns."""

from __future__ import annotations

import math
from typing import Any


def jsonable(value: Any) -> Any:
    """JSON-safe copy (tuples to lists, paths and unknown objects to strings) for JSON columns."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None  # NaN and infinities are not JSON: SQLite would store invalid text, PostgreSQL refuses it
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)

