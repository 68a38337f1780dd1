"""Jinja filters for numbers and times; they return plain text so autoescaping still applies."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from flask import Flask
from markupsafe import Markup, escape

from analysis.api import fmt, short_kernel_name
from app.services.pages.web_memory import memory_pairs, memory_view


def fmt_ns(ns: Any) -> str:
    """A duration in s / ms / µs / ns with three significant digits ("26.8 s", not "26,813.634 ms")."""
    return fmt.duration(ns)


def fmt_number(x: Any) -> str:
    """A plain number for people: integers with thousands separators, others with three significant digits."""
    if isinstance(x, bool) or x is None:
        return "–" if x is None else ("yes" if x else "no")
    if isinstance(x, int | float):
        return fmt.number(x)
    return str(x)


def plain_number(x: Any) -> str:
    """A number as one types it in a form ("1048576", "0.5"): no separators, no trailing ".0"."""
    if isinstance(x, float) and x.is_integer():
        return str(int(x))
    return str(x)


_NUMBER = re.compile(r"(?<![\w.,])-?\d+(?:,\d{3})*(?:\.\d+)?(?:e[+-]?\d+)?(?![\w.])")


def numbers_formatted(text: Any) -> str:
    """``text`` (e.g. a threshold's range, "a whole number from 1 to 1e+06") with each number through
    ``fmt.number``: "a whole number from 1 to 1,000,000"."""
    return _NUMBER.sub(lambda m: fmt.number(float(m.group().replace(",", ""))), str(text))


def fmt_value(key: str, value: Any) -> str:
    """An evidence value by its key's unit suffix: ``*_ns`` durations, ``*_pct`` shares, ``*bytes`` sizes."""
    if isinstance(value, dict):
        return ", ".join(f"{k.replace('_', ' ')} {fmt_value(str(k), v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(fmt_value(key, v) for v in value[:20]) + (" …" if len(value) > 20 else "")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if key.endswith("_ns"):
            return fmt_ns(value)
        if key.endswith("_pct"):
            return fmt_pct(value)
        if key.endswith("bytes"):
            return fmt_bytes(value)
        return fmt_number(value)
    return "–" if value is None else str(value)


def fmt_detail(detail: Any) -> list[tuple[str, str]]:
    """An evidence ``detail`` dict as (label, formatted value) pairs; units dropped from the labels."""
    if not isinstance(detail, dict):
        return [] if detail in (None, "") else [("", fmt_value("", detail))]
    out = []
    for k, v in detail.items():
        label = str(k)
        for suffix in ("_ns", "_pct", "_bytes"):
            if label.endswith(suffix):
                label = label[: -len(suffix)]
        out.append((label.replace("_", " "), fmt_value(str(k), v)))
    return out


def fmt_pct(x: Any) -> str:
    return fmt.pct(x)


def fmt_change_pct(x: Any) -> str:
    """A relative change in percent, signed: "+12.3 %", "-4.0 %", "+10,972 %"."""
    return fmt.signed(fmt.pct(x), x)


def fmt_change_ns(ns: Any) -> str:
    """A change of a duration, signed: "+18.1 ms"."""
    return fmt.signed(fmt.duration(ns), ns)


def fmt_p(p: Any) -> str:
    """A p-value: "0.786", "< 0.001"."""
    return fmt.p_value(p)


def fmt_rate(bytes_per_s: Any) -> str:
    """A bandwidth: "196 GB/s"."""
    return fmt.rate(bytes_per_s)


def fmt_si(x: Any, unit: str) -> str:
    """A quantity with a decimal prefix: ``x|fmt_si('FLOP/s')`` is "1.23 TFLOP/s"."""
    return fmt.si(x, unit)


def fmt_share(x: Any) -> str:
    """A share in percent with the precision it needs: "45 %", "4.2 %", "< 0.1 %"."""
    return fmt.share(x)


def fmt_points(x: Any) -> str:
    """A change of a percentage in points: "+1.2 points"."""
    return fmt.points(x)


def fmt_time(t: datetime | None) -> str:
    return "–" if t is None else t.strftime("%Y-%m-%d %H:%M UTC")


def fmt_bytes(n: Any) -> str:
    return fmt.size(n)


def rule_doc(text: Any) -> Markup:
    """A rule's docstring as HTML: paragraphs, ``*emphasis*`` and ```code```; everything else escaped first."""
    out = []
    for para in re.split(r"\n\s*\n", str(text or "").strip()):
        html = str(escape(" ".join(line.strip() for line in para.splitlines())))
        html = re.sub(r"``?([^`]+?)``?", r"<code>\1</code>", html)
        html = re.sub(r"(?<![\w*])\*([^*\s][^*]*?)\*(?![\w*])", r"<em>\1</em>", html)
        out.append(f"<p>{html}</p>")
    return Markup("\n".join(out))


def register(app: Flask) -> None:
    app.jinja_env.filters.update(fmt_ns=fmt_ns, fmt_pct=fmt_pct, fmt_time=fmt_time, fmt_bytes=fmt_bytes,
                                 fmt_number=fmt_number, fmt_detail=fmt_detail,
                                 fmt_change_pct=fmt_change_pct, fmt_change_ns=fmt_change_ns, fmt_p=fmt_p, fmt_rate=fmt_rate,
                                 fmt_si=fmt_si, fmt_share=fmt_share, fmt_points=fmt_points, plain_number=plain_number,
                                 numbers_formatted=numbers_formatted, short_kernel=short_kernel_name,
                                 rule_doc=rule_doc)
    app.jinja_env.globals["ncu_memory_view"] = memory_view  # the run page's ncu memory charts
    app.jinja_env.globals["ncu_memory_pairs"] = memory_pairs  # the same kernel's chart on compare
