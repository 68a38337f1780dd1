"""JSON written by the service never holds NaN or Infinity (not JSON: browsers, PostgreSQL's JSONB and strict
clients refuse them): a non-finite float is written as ``null``, in responses (``jsonify`` and templates'
``tojson``), downloads and the JSON columns of the metadata DB alike."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from flask.json.provider import DefaultJSONProvider


def finite(value: Any) -> Any:
    """``value`` with every non-finite float in it (nested in dicts, lists and tuples) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def dumps(obj: Any, *, default: Callable[[Any], Any] | None = None, **kwargs: Any) -> str:
    """``json.dumps`` with ``allow_nan=False`` that writes non-finite floats as null. The common case (none) is
    one plain pass; only a value holding one is walked (what ``default`` makes of an object included)."""
    try:
        return json.dumps(obj, allow_nan=False, default=default, **kwargs)
    except ValueError as exc:
        if not str(exc).startswith("Out of range float"):
            raise  # a circular structure: refused as json.dumps refuses it
    walked = None if default is None else (lambda o: finite(default(o)))
    return json.dumps(finite(obj), allow_nan=False, default=walked, **kwargs)


class FiniteJSONProvider(DefaultJSONProvider):
    """Flask's JSON provider (``app.json``) with ``dumps`` above: jsonify, ``tojson`` and error bodies."""

    sort_keys = False  # keep the documented key order

    def dumps(self, obj: Any, **kwargs: Any) -> str:
        kwargs.setdefault("default", self.default)
        kwargs.setdefault("ensure_ascii", self.ensure_ascii)
        kwargs.setdefault("sort_keys", self.sort_keys)
        return dumps(obj, **kwargs)
