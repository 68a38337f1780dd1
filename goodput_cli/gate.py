"""`goodput diff --fail-on`: the regression gate, e.g. ``goodput:-2pt,step_time:+5%,new_findings:+1``.

Each check is ``METRIC:SIGN NUMBER UNIT``. The sign says which way is worse: ``-2pt`` fails when the
metric fell by 2 points or more, ``+5%`` when it rose by 5 % or more. Units: ``pt`` (percentage
points, goodput only), ``%`` (relative to base), ``ns``/``us``/``ms``/``s`` (absolute, time metrics),
none (counts). A metric that one of the runs lacks (no steps found, say) is reported, not failed.

``step_time`` (the median step) and ``kernel:NAME`` (the kernels whose name, function name or label is
NAME, e.g. ``kernel:ncclDevKernel_SendRecv:+10%``: judged per launch and, when both runs have steps, by
its time per step, failing on either) fail only on a change the comparison calls significant (its test and
noise floor); a larger but insignificant change passes and says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from analysis import fmt

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
    "kernel": ("kernel_table", ("%", *TIME_UNITS)),
}
_CHECK = re.compile(r"^\s*([a-z_]+)\s*:\s*(?:(.+?)\s*:\s*)?([+-])\s*([0-9]+(?:\.[0-9]+)?)\s*([a-z%]*)\s*$")
_DECL = re.compile(r"^(void|static|__global__)\s+")


class GateError(ValueError):
    """A --fail-on text that does not parse; the message is one line."""


@dataclass(frozen=True)
class Check:
    metric: str
    sign: int          # +1: a rise is worse; -1: a fall is worse
    amount: float
    unit: str
    kernel: str | None = None

    @property
    def text(self) -> str:
        who = f"{self.metric}:{self.kernel}" if self.kernel else self.metric
        return f"{who}:{'+' if self.sign > 0 else '-'}{fmt.exact(self.amount)}{self.unit}"


def parse(spec: str) -> list[Check]:
    """The checks of a --fail-on value; GateError names the first bad one."""
    checks = []
    for item in [p for p in spec.split(",") if p.strip()]:
        m = _CHECK.match(item)
        if not m:
            raise GateError(f"--fail-on {item.strip()!r}: expected METRIC:+N UNIT or METRIC:-N UNIT, "
                            "e.g. goodput:-2pt,step_time:+5%")
        metric, kernel, sign, amount, unit = m.groups()
        if (metric == "kernel") != (kernel is not None):
            raise GateError(f"--fail-on {item.strip()!r}: a kernel check names its kernel "
                            "(kernel:NAME:+10%) and only a kernel check does")
        if metric not in METRICS:
            raise GateError(f"--fail-on {item.strip()!r}: unknown metric {metric!r}; one of "
                            f"{', '.join(METRICS)}")
        allowed = METRICS[metric][1]
        if unit not in allowed:
            shown = ", ".join(u or "(none)" for u in allowed)
            raise GateError(f"--fail-on {item.strip()!r}: unit {unit or '(none)'!r} does not fit {metric}; "
                            f"use {shown}")
        checks.append(Check(metric, 1 if sign == "+" else -1, float(amount), unit, kernel))
    if not checks:
        raise GateError("--fail-on: no checks given, e.g. goodput:-2pt,step_time:+5%")
    return checks


def _in_unit(check: Check, node: dict[str, Any]) -> float | None:
    if node.get("delta") is None:
        return None
    if check.unit == "%":
        return node.get("delta_pct")
    if check.unit == "pt":
        return float(node["delta"])
    return float(node["delta"]) / TIME_UNITS[check.unit]


def _observed(check: Check, diff: dict[str, Any]) -> float | None:
    """The change of the check's metric in the check's unit, or None when a run lacks it."""
    where = METRICS[check.metric][0]
    if where == "new_findings":
        return float(len(diff.get("new_findings") or []))
    node: Any = diff
    for part in where.split("."):
        node = (node or {}).get(part) if isinstance(node, dict) else None
    if not isinstance(node, dict):
        return None
    return _in_unit(check, node)


def kernel_names(name: str, label: str | None) -> set[str]:
    """What a user may call a kernel: its full name, label, short name and function name (qualified or not)."""
    base = _DECL.sub("", name.strip()).split("(")[0].split("<")[0].strip()
    names = {name, base, base.split("::")[-1]}
    if label:
        names |= {label, label.split(" · ")[0]}
    return {n for n in names if n}


def _tested(check: Check, stat: dict[str, Any] | None) -> tuple[float | None, str, str | None]:
    """(observed, status, note) of a check on a tested metric: failed only on a significant change."""
    if not stat or stat.get("delta") is None:
        return None, "not_evaluated", "a run lacks this metric"
    seen = _in_unit(check, stat)
    if seen is None:
        return None, "not_evaluated", "no base value to compare with"
    if check.sign * seen < check.amount:
        return seen, "passed", None
    if stat.get("changed"):
        return seen, "failed", None
    if stat.get("note"):
        return seen, "passed", f"not a change: {stat['note']}"
    if stat.get("significant"):
        return seen, "passed", "significant, but within the noise floor (--noise-pct)"
    return seen, "passed", f"not significant (p={stat.get('p_value')})"


def _kernel_check(check: Check, diff: dict[str, Any]) -> tuple[float | None, str, str | None]:
    rows = {r["name"]: r for r in (*(diff.get("kernel_table") or []), *(diff.get("kernels") or []))}
    hits = [r for r in rows.values() if check.kernel in kernel_names(r["name"], r.get("label"))]
    if not hits:
        return None, "not_evaluated", f"no kernel named {check.kernel} among those compared"
    results = [_tested(check, r.get(key)) for r in hits for key in ("per_launch_ns", "per_step_ns")
               if key == "per_launch_ns" or r.get(key)]
    failed = [x for x in results if x[1] == "failed"]
    pick = failed or [x for x in results if x[0] is not None] or results
    return max(pick, key=lambda x: check.sign * (x[0] if x[0] is not None else float("-inf")))


def evaluate(checks: list[Check], diff: dict[str, Any]) -> list[dict[str, Any]]:
    """Each check with its observed change and status: 'failed', 'passed' or 'not_evaluated'."""
    out = []
    for check in checks:
        note = None
        if check.metric == "kernel":
            seen, status, note = _kernel_check(check, diff)
        elif check.metric == "step_time" and diff.get("steps"):
            seen, status, note = _tested(check, diff["steps"].get("step_time_ns"))
        else:
            seen = _observed(check, diff)
            status = "not_evaluated" if seen is None else ("failed" if check.sign * seen >= check.amount else "passed")
        out.append({"check": check.text, "metric": check.metric, "kernel": check.kernel, "observed": seen,
                    "unit": check.unit, "status": status, "note": note})
    return out
