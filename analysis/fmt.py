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


def share(x: float | int | None) -> str:
    """A share given as a number of percent, with the precision the value needs: whole from 10 % on
    ("45 %", "1,234 %"), two significant digits below ("4.2 %", "0.52 %", "0.039 %"), "< 0.01 %" for a share
    above zero that would read as a run of zeros; never "100 %" or "0 %" for a share that is not exactly that
    ("99.6 %")."""
    if not _finite(x):
        return MISSING
    v = float(x)  # type: ignore[arg-type]
    a = abs(v)
    if a == 0:
        return "0 %"
    if a < 0.00995:
        return f"{'> -' if v < 0 else '< '}0.01 %"
    decimals = 0 if a >= 9.95 else 1 if a >= 0.995 else 2 if a >= 0.0995 else 3
    text = f"{v:,.{decimals}f}"
    while decimals < 2 and abs(float(text.replace(",", ""))) == 100 and a != 100:
        decimals += 1                                   # 99.96 is not all of it
        text = f"{v:,.{decimals}f}"
    if abs(float(text.replace(",", ""))) == 100 and a != 100:   # 99.9996: "> 99.99 %"; 100.0004: "> 100 %"
        bound = "99.99" if a < 100 else "100"
        return f"> {bound} %" if v > 0 else f"< -{bound} %"
    return f"{text} %"


def exact(x: float | int | None) -> str:
    """A number quoted as it was given, not rounded to three digits: a threshold as set ("under 5%",
    "at least 0.5 ms"), a setting, a figure as a log prints it: whole numbers in full with thousands
    separators ("1,048,576"), others with up to six significant digits like ``:g``; never an exponent
    ("0.0000001", not "1e-07")."""
    if not _finite(x):
        return MISSING
    v = float(x)  # type: ignore[arg-type]
    if v.is_integer() and abs(v) < 1e18:
        return f"{int(v):,}"
    text = f"{v:,g}"
    if "e" not in text:
        return text
    from decimal import Decimal  # only for the rare exponent: the CLI imports this module at start-up

    return format(Decimal(text).normalize(), "f")


def points(x: float | int | None) -> str:
    """A change of a percentage, in percentage points, with one decimal, "+" when it rose: "+1.2 points",
    "-0.4 points"."""
    if not _finite(x):
        return MISSING
    v = float(x)  # type: ignore[arg-type]
    return f"{signed(f'{v:.1f}', v)} points"


def elapsed(seconds: float | int | None) -> str:
    """Time on a clock (elapsed, left): "4.21 s" under a minute, then "2 min 05 s", "1 h 02 min"."""
    if not _finite(seconds):
        return MISSING
    s = float(seconds)  # type: ignore[arg-type]
    if s < 59.5:
        return duration(s * 1e9)
    whole = int(round(s))
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


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
