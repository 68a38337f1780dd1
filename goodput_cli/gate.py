"""`goodput diff --fail-on`: the regression gate, e.g. ``goodput:-2pt,step_time:+5%,new_findings:+1``.

Each check is ``METRIC:SIGN NUMBER UNIT``. The sign says which way is worse: ``-2pt`` fails when the
metric fell by 2 points or more, ``+5%`` when it rose by 5 % or more. Units: ``pt`` (percentage
points, goodput only), ``%`` (relative to base), ``ns``/``us``/``ms``/``s`` (absolute, time metrics),
none (counts). A metric that one of the runs lacks (no steps found, say) is reported, not failed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

TIME_UNITS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
# metric -> (where its delta lives in the comparison, units it accepts)
METRICS: dict[str, tuple[str, tuple[str, ...]]] = {
    "goodput": ("breakdown.goodput_pct", ("pt", "%")),
    "step_time": ("step_time_ns", ("%", *TIME_UNITS)),
    "span": ("breakdown.span_ns", ("%", *TIME_UNITS)),
    "compute": ("breakdown.compute_ns", ("%", *TIME_UNITS)),
    "comm_exposed": ("breakdown.comm_exposed_ns", ("%", *TIME_UNITS)),
    "memory_only": ("breakdown.memory_only_ns", ("%", *TIME_UNITS)),
    "idle": ("breakdown.idle_ns", ("%", *TIME_UNITS)),
    "new_findings": ("new_findings", ("",)),
}
_CHECK = re.compile(r"^\s*([a-z_]+)\s*:\s*([+-])\s*([0-9]+(?:\.[0-9]+)?)\s*([a-z%]*)\s*$")


class GateError(ValueError):
    """A --fail-on text that does not parse; the message is one line."""


@dataclass(frozen=True)
class Check:
    metric: str
    sign: int          # +1: a rise is worse; -1: a fall is worse
    amount: float
    unit: str

    @property
    def text(self) -> str:
        return f"{self.metric}:{'+' if self.sign > 0 else '-'}{self.amount:g}{self.unit}"


def parse(spec: str) -> list[Check]:
    """The checks of a --fail-on value; GateError names the first bad one."""
    checks = []
    for item in [p for p in spec.split(",") if p.strip()]:
        m = _CHECK.match(item)
        if not m:
            raise GateError(f"--fail-on {item.strip()!r}: expected METRIC:+N UNIT or METRIC:-N UNIT, "
                            "e.g. goodput:-2pt,step_time:+5%")
        metric, sign, amount, unit = m.groups()
        if metric not in METRICS:
            raise GateError(f"--fail-on {item.strip()!r}: unknown metric {metric!r}; one of "
                            f"{', '.join(METRICS)}")
        allowed = METRICS[metric][1]
        if unit not in allowed:
            shown = ", ".join(u or "(none)" for u in allowed)
            raise GateError(f"--fail-on {item.strip()!r}: unit {unit or '(none)'!r} does not fit {metric}; "
                            f"use {shown}")
        checks.append(Check(metric, 1 if sign == "+" else -1, float(amount), unit))
    if not checks:
        raise GateError("--fail-on: no checks given, e.g. goodput:-2pt,step_time:+5%")
    return checks


def _observed(check: Check, diff: dict[str, Any]) -> float | None:
    """The change of the check's metric in the check's unit, or None when a run lacks it."""
    where = METRICS[check.metric][0]
    if where == "new_findings":
        return float(len(diff.get("new_findings") or []))
    node: Any = diff
    for part in where.split("."):
        node = (node or {}).get(part) if isinstance(node, dict) else None
    if not isinstance(node, dict) or node.get("delta") is None:
        return None
    if check.unit == "%":
        return node.get("delta_pct")
    if check.unit == "pt":
        return float(node["delta"])
    return float(node["delta"]) / TIME_UNITS[check.unit]


def evaluate(checks: list[Check], diff: dict[str, Any]) -> list[dict[str, Any]]:
    """Each check with its observed change and status: 'failed', 'passed' or 'not_evaluated'."""
    out = []
    for check in checks:
        seen = _observed(check, diff)
        if seen is None:
            status = "not_evaluated"
        else:
            status = "failed" if check.sign * seen >= check.amount else "passed"
        out.append({"check": check.text, "metric": check.metric, "observed": seen, "unit": check.unit,
                    "status": status})
    return out
