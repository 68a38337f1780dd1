"""Findings as data: what a rule reports, with its cost, its evidence and the advice."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, TypedDict

from analysis.report_types import HostCost, RankCost
from analysis.results import RuleExtra, extra_json

SEVERITIES = ("critical", "warning", "info")
# One policy for every rule and both tools, so severities compare: share of the run's time at stake.
CRITICAL_PCT = 10.0
WARNING_PCT = 2.0
EVIDENCE_LIMIT = 20


# Integers a finding may hold: what a BIGINT column and every JSON reader take.
INT64 = (-(2**63), 2**63 - 1)


def unrepresentable(value: Any, where: str = "") -> str | None:
    """Where in a finding's JSON (``evidence[3].gap_ns``) a number sits that JSON or the metadata DB cannot
    hold (NaN, an infinity, an integer beyond int64); None when every number is fine."""
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        item, at = stack.pop()
        if isinstance(item, bool) or item is None or isinstance(item, str):
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                return at or "value"
        elif isinstance(item, int):
            if not INT64[0] <= item <= INT64[1]:
                return at or "value"
        elif isinstance(item, dict):
            stack.extend((v, f"{at}.{k}" if at else str(k)) for k, v in item.items())
        elif isinstance(item, list | tuple):
            stack.extend((v, f"{at}[{i}]") for i, v in enumerate(item))
    return None


def severity_for(impact_pct: float | None) -> str:
    """Severity from the share of time a finding costs (percent)."""
    if impact_pct is None:
        return "info"
    if impact_pct >= CRITICAL_PCT:
        return "critical"
    if impact_pct >= WARNING_PCT:
        return "warning"
    return "info"


@dataclass(frozen=True)
class Evidence:
    """One place where a problem shows: a time range on a device/stream, a kernel, an API call."""

    start_ns: int | None = None
    end_ns: int | None = None
    device: int | None = None
    stream: int | None = None
    pid: int | None = None
    rank: int | None = None
    name: str | None = None          # kernel, API call or metric involved
    nvtx: str | None = None          # innermost enclosing NVTX range, when known
    value_ns: int | None = None      # this item's share of the impact
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None and v != {}}


class SampledFunction(TypedDict):
    """A leaf function the launching threads were sampled in during a rule's gaps
    (``analysis.diagnosis.rules.nsys.hostcpu.functions_in``)."""

    function: str
    samples: int
    share_pct: float
    kind: str | None


# The keys the engine adds to a rule's finding (``analysis.results.EngineExtra``) that a ``Finding`` holds as fields,
# in the order the JSON writes them, after the rule's own extra.
ENGINE_FIELDS = ("host_functions", "host_paced", "impact_per_step_ns", "steps_in_window")


@dataclass(frozen=True)
class RollUp:
    """What one finding per rule and scope across the ranks of a run adds (``analysis.run.rollup``): its cost summed
    over ranks and what its ``impact_ns`` measures, each rank's part and each host's, and how many ranks have it."""

    impact_summed_ns: int
    impact_basis: str
    per_rank: list[RankCost]
    per_host: list[HostCost]
    ranks_with_finding: int

    def to_json(self) -> dict[str, object]:
        return {"impact_summed_ns": self.impact_summed_ns, "impact_basis": self.impact_basis,
                "per_rank": self.per_rank, "per_host": self.per_host, "ranks_with_finding": self.ranks_with_finding}


_BASE_KEYS = ("rule_id", "severity", "title", "message", "impact_ns", "impact_pct", "advice", "report", "rank",
              "evidence", "evidence_total", "phase")
_ROLLUP_KEYS = tuple(f.name for f in dataclasses.fields(RollUp))


@dataclass(frozen=True)
class Finding:
    """A problem with numbers: how much time it costs (``impact_ns``), where, and what to do.

    ``extra``: the rule's numbers, its ``extra_type`` as the rule built it (the run step sets the fields it owns there:
    ``_json(run_step=True)``). The engine's keys are fields (None: not set): where the host CPU was in the rule's gaps
    (``host_functions``, the rules that sampled it), the host-paced mark and the cost per step on a loop window
    (``analysis.run.runner``), the loops its evidence lies in (``analysis.loops.loop_report.loops_holding``) and, for
    one finding across ranks, the roll-up (``analysis.run.rollup``)."""

    rule_id: str
    title: str
    message: str
    impact_ns: int
    impact_pct: float | None
    advice: str
    evidence: tuple[Evidence, ...] = ()
    evidence_total: int = 0            # how many items matched in all (evidence is a bounded sample)
    report: str | None = None          # the report (file) it belongs to; None for run-level findings
    rank: int | None = None
    severity: str = ""                 # derived from impact_pct when left empty
    extra: RuleExtra | None = None
    # Where it happens: the phase or window the rule looked at ('steady', 'startup', 'all', 'time' ...).
    phase: str | None = None
    host_functions: list[SampledFunction] | None = None
    host_paced: bool | None = None
    impact_per_step_ns: int | None = None
    steps_in_window: int | None = None
    loops: tuple[int, ...] | None = None
    rollup: RollUp | None = None

    def __post_init__(self) -> None:
        if not self.severity:
            object.__setattr__(self, "severity", severity_for(self.impact_pct))
        if self.severity not in SEVERITIES:
            raise ValueError(f"bad severity {self.severity!r}")
        if len(self.evidence) > EVIDENCE_LIMIT:
            object.__setattr__(self, "evidence", tuple(self.evidence[:EVIDENCE_LIMIT]))
        if self.evidence_total < len(self.evidence):
            object.__setattr__(self, "evidence_total", len(self.evidence))

    def to_dict(self) -> dict[str, Any]:
        out = {
            "rule_id": self.rule_id,
            "severity": self.severity,
            "title": self.title,
            "message": self.message,
            "impact_ns": int(self.impact_ns),
            "impact_pct": None if self.impact_pct is None else round(float(self.impact_pct), 3),
            "advice": self.advice,
            "report": self.report,
            "rank": self.rank,
            "evidence": [e.to_dict() for e in self.evidence],
            "evidence_total": self.evidence_total,
            "phase": self.phase,
        }
        # In the order the steps add them: the rule's own, the engine's of step 1, the loops, the run step's.
        if self.extra is not None:
            out.update(extra_json(self.extra, run_step=False))
        out.update({k: v for k in ENGINE_FIELDS if (v := getattr(self, k)) is not None})
        if self.loops is not None:
            out["loops"] = list(self.loops)
        if self.extra is not None:
            out.update(extra_json(self.extra, run_step=True))
        if self.rollup is not None:
            out.update(self.rollup.to_json())
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], extra_type: type | None) -> Finding:
        """A finding from its ``to_dict`` (as step 1 saves it), its rule's own keys read as ``extra_type`` (None:
        the finding's rule has none). A key neither the finding nor the type holds raises ``ValueError``."""
        own = {f.name for f in dataclasses.fields(extra_type)} if extra_type is not None else set()
        unknown = set(data) - set(_BASE_KEYS) - set(ENGINE_FIELDS) - {"loops", *_ROLLUP_KEYS} - own
        if unknown:
            raise ValueError(f"finding of {data.get('rule_id')} has keys its rule's extra lacks: {sorted(unknown)}")
        extra = (extra_type(**{k: data[k] for k in own if k in data})
                 if extra_type is not None and any(k in data for k in own) else None)
        rollup = RollUp(**{k: data[k] for k in _ROLLUP_KEYS}) if "per_rank" in data else None
        return cls(rule_id=data["rule_id"], title=data["title"], message=data["message"], impact_ns=data["impact_ns"],
                   impact_pct=data["impact_pct"], advice=data["advice"],
                   evidence=tuple(Evidence(**e) for e in data["evidence"]), evidence_total=data["evidence_total"],
                   report=data["report"], rank=data["rank"], severity=data["severity"], extra=extra,
                   phase=data["phase"], loops=None if data.get("loops") is None else tuple(data["loops"]),
                   rollup=rollup, **{k: data.get(k) for k in ENGINE_FIELDS})


def _rank_key(owns_idle: Any, impact_ns: int, rule_id: str, report: str | None) -> tuple:
    return (owns_idle is False, -int(impact_ns), rule_id, report or "")


def rank_findings(findings: list[Finding]) -> list[Finding]:
    """Order findings by the time they cost, across all rules and reports (stable for ties).

    Evidence-only findings (``extra['owns_idle'] is False``, e.g. HOST002: where the host was during idle
    that another rule owns) come after those that own time, so the same idle is never ranked twice."""
    return sorted(findings, key=lambda f: _rank_key(getattr(f.extra, "owns_idle", None), f.impact_ns, f.rule_id,
                                                    f.report))
