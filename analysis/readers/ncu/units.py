"""Numbers and units of Nsight Compute CSV cells, normalized to base units with the original text kept."""

from __future__ import annotations

import math
import re

# ncu prints numbers in the C locale with ',' thousands separators ("4,963,609,951.19"); exports that
# went through a spreadsheet or another locale may use '.', ' ', NBSP, narrow NBSP or "'" instead.
_PLAIN = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_EN = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_DE = re.compile(r"[+-]?\d{1,3}(?:\.\d{3})+(?:,\d+)?")
_SPACED = re.compile(r"[+-]?\d{1,3}(?:[ \u00a0\u202f']\d{3})+(?:[.,]\d+)?")
_DECIMAL_COMMA = re.compile(r"[+-]?\d+,\d+")

# Scale prefixes ncu's auto-scaling uses ("Kbyte", "Mbyte/second", "usecond", "Ghz").
_PREFIX = {"": 1.0, "K": 1e3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
           "m": 1e-3, "u": 1e-6, "n": 1e-9, "p": 1e-12}
_BINARY = {"Ki": 1024.0, "Mi": 1024.0**2, "Gi": 1024.0**3, "Ti": 1024.0**4}
# Base words and the unit name we store; everything else is kept as written.
_BASE = {"byte": "B", "second": "s", "hz": "Hz", "Hz": "Hz", "B": "B"}
_COUNTABLE = {"cycle", "inst", "warp", "sector", "request", "block", "thread", "register", "sample",
              "wavefront", "transaction", "SM", "instance", "bit", "flop"}
_SHORT_TIME = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def parse_number(text: str) -> float | None:
    """The numeric value of a cell, or None when it is not a number ('n/a', '', a name, NaN)."""
    t = text.strip()
    if not t:
        return None
    if _PLAIN.fullmatch(t):
        value = float(t)
    elif _EN.fullmatch(t):
        value = float(t.replace(",", ""))
    elif _DE.fullmatch(t):
        value = float(t.replace(".", "").replace(",", "."))
    elif _SPACED.fullmatch(t):
        body = re.sub(r"[ \u00a0\u202f']", "", t)
        value = float(body.replace(",", "."))
    elif _DECIMAL_COMMA.fullmatch(t):
        value = float(t.replace(",", "."))
    else:
        return None
    return value if math.isfinite(value) else None


def _word(word: str) -> tuple[str, float] | None:
    """A unit word ('Kbyte', 'usecond', 'cycle') as (base unit, factor), or None if unknown."""
    if word in _SHORT_TIME:
        return "s", _SHORT_TIME[word]
    if word in _BASE:
        return _BASE[word], 1.0
    if word in _COUNTABLE:
        return word, 1.0
    for pre, factor in _BINARY.items():
        rest = word[len(pre):]
        if word.startswith(pre) and rest in ("byte", "B"):
            return "B", factor
    pre, rest = word[:1], word[1:]
    if pre in _PREFIX and rest:
        if rest in _BASE:
            return _BASE[rest], _PREFIX[pre]
        if rest.lower() == "hz":
            return "Hz", _PREFIX[pre]
        if rest in _COUNTABLE:
            return rest, _PREFIX[pre]
    return None


def normalize_unit(unit: str) -> tuple[str, float]:
    """The base unit and the factor that converts a value in ``unit`` to it.

    Times become ns (the schema's time unit), sizes bytes, frequencies Hz, rates per second;
    an unknown unit is kept as written with factor 1.
    """
    u = unit.strip()
    if u in ("", "%"):
        return u, 1.0
    num, slash, den = u.partition("/")
    top = _word(num)
    if top is None:
        return u, 1.0
    base, factor = top
    if base == "s" and not slash:
        return "ns", factor * 1e9
    if not slash:
        return base, factor
    bottom = _word(den)
    if bottom is None:
        return f"{base}/{den}", factor
    dbase, dfactor = bottom
    # Round away binary noise (1/1e-9 is not exactly 1e9 in floating point).
    return f"{base}/{dbase}", float(f"{factor / dfactor:.12g}")


def normalize(text: str, unit: str) -> tuple[float | None, str]:
    """(value in base units or None, base unit) for one cell and its unit."""
    base, factor = normalize_unit(unit)
    value = parse_number(text)
    if value is None:
        return None, base
    scaled = value * factor
    return (scaled if math.isfinite(scaled) else None), base
