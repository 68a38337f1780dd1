"""JSON-safe copies of values for the metadata DB's JSON columns."""

from __future__ import annotations

from typing import Any


def jsonable(value: Any) -> Any:
    """JSON-safe copy (tuples to lists, paths and unknown objects to strings) for JSON columns."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)

