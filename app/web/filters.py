"""Jinja filters for numbers and times; they return plain text so autoescaping still applies."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from flask import Flask

from app.services.web_memory import memory_pairs, memory_view


def fmt_ns(ns: Any) -> str:
    if ns is None:
        return "–"
    ns = float(ns)
    a = abs(ns)
    if a >= 1e9:
        return f"{ns / 1e9:.3f} s"
    if a >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if a >= 1e3:
        return f"{ns / 1e3:.1f} µs"
    return f"{ns:.0f} ns"


def fmt_pct(x: Any) -> str:
    return "–" if x is None else f"{float(x):.1f} %"


def fmt_time(t: datetime | None) -> str:
    return "–" if t is None else t.strftime("%Y-%m-%d %H:%M UTC")


def fmt_bytes(n: Any) -> str:
    if n is None:
        return "–"
    n = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def register(app: Flask) -> None:
    app.jinja_env.filters.update(fmt_ns=fmt_ns, fmt_pct=fmt_pct, fmt_time=fmt_time, fmt_bytes=fmt_bytes)
    app.jinja_env.globals["ncu_memory_view"] = memory_view  # the run page's ncu memory charts (issue #17)
    app.jinja_env.globals["ncu_memory_pairs"] = memory_pairs  # the same kernel's chart on compare (issue #17)
