"""How Goodput writes numbers for people, in one place for the CLI, the pages and the findings' text:
three significant digits with the unit chosen for the value ("26.8 s", "4.21 ms", "546 ns", "1.23 GB").

Machine-readable output (JSON, CSV) keeps the exact integers; these strings are for reading only.
"""

from __future__ import annotations

import math

_DURATIONS = ((1e9, "s"), (1e6, "ms"), (1e3, "µs"))
_SIZES = ("B", "kB", "MB", "GB", "TB", "PB")
MISSING = "–"


def sig3(x: float) -> str:
    """``x`` with three significant digits and no exponent: "26.8", "1.23", "0.0123", "312"; from 999.5
    on, whole numbers with thousands separators ("4,210")."""
    a = abs(x)
    if a == 0:
        return "0.00"
    if a >= 999.5:
        return f"{x:,.0f}"
    decade = math.floor(math.log10(a))
    decimals = 2 - decade
    if round(a, decimals) >= 10 ** (decade + 1):  # 9.996 is "10.0", not "10.00"
        decimals -= 1
    return f"{x:.{max(decimals, 0)}f}"


def _finite(x: float | int | None) -> bool:
    return x is not None and not isinstance(x, bool) and math.isfinite(float(x))


def duration(ns: float | int | None) -> str:
    """A duration given in nanoseconds: "26.8 s", "4.21 ms", "12.0 µs", "546 ns"."""
    if not _finite(ns):
        return MISSING
    v = float(ns)  # type: ignore[arg-type]
    a = abs(v)
    for div, unit in _DURATIONS:
        # 999.96 µs rounds to "1.00 ms", never "1000 µs"
        if a >= div * 0.9995:
            return f"{sig3(v / div)} {unit}"
    return f"{v:.0f} ns"


def size(n: float | int | None) -> str:
    """A size in bytes, decimal units: "512 B", "1.23 MB", "16.0 GB"."""
    if not _finite(n):
        return MISSING
    v = float(n)  # type: ignore[arg-type]
    for unit in _SIZES:
        if abs(v) < 999.5 or unit == _SIZES[-1]:
            return f"{v:.0f} B" if unit == "B" else f"{sig3(v)} {unit}"
        v /= 1000
    raise AssertionError("unreachable")


def rate(bytes_per_s: float | int | None) -> str:
    """A bandwidth in bytes per second: "12.3 GB/s"."""
    text = size(bytes_per_s)
    return text if text == MISSING else f"{text}/s"


def pct(x: float | int | None) -> str:
    """A percentage given as a number of percent: "12.3 %", "0.4 %", "100.0 %"; from 1,000 % on whole
    numbers with thousands separators ("10,972 %")."""
    if not _finite(x):
        return MISSING
    v = float(x)  # type: ignore[arg-type]
    return f"{v:,.0f} %" if abs(v) >= 999.95 else f"{v:.1f} %"


def signed(text: str, x: float | int | None) -> str:
    """``text`` (a formatted ``x``) with "+" in front when ``x`` is positive: a change, "+18.1 ms"."""
    return f"+{text}" if _finite(x) and float(x) > 0 else text  # type: ignore[arg-type]


def si(x: float | int | None, unit: str) -> str:
    """A rate or amount with a decimal prefix and three significant digits: "1.23 TFLOP/s", "196 GB/s"."""
    if not _finite(x):
        return MISSING
    v = float(x)  # type: ignore[arg-type]
    for prefix in ("", "k", "M", "G", "T", "P"):
        if abs(v) < 999.5 or prefix == "P":
            return f"{sig3(v) if v else '0'} {prefix}{unit}"
        v /= 1000
    raise AssertionError("unreachable")


def number(x: float | int | None) -> str:
    """A plain number: integers with thousands separators, others with three significant digits."""
    if not _finite(x):
        return MISSING
    v = float(x)  # type: ignore[arg-type]
    if v.is_integer() and abs(v) < 1e15:
        return f"{int(v):,}"
    return sig3(v)


def p_value(p: float | int | None) -> str:
    """A test's p-value: three significant digits ("0.786", "0.0123"), and "< 0.001" below that, where
    the digits say nothing more and would read as a run of zeros."""
    if not _finite(p):
        return MISSING
    v = float(p)  # type: ignore[arg-type]
    return "< 0.001" if v < 0.001 else sig3(v)


def count(n: float | int | None) -> str:
    """A count with thousands separators: "12,288"."""
    if not _finite(n):
        return MISSING
    return f"{int(n):,}"  # type: ignore[arg-type]
