"""Findings of two runs matched by rule and scope: the same rule on the same rank, device, phase and kernel
is the same problem, whatever its title says (titles carry the numbers that changed).

Only like is matched with like: a finding about a kernel pairs only with one about the same kernel, and one
about a kernel on a set of GPUs (its evidence names each (process, device) it judged: KRN005's share of
the kernel time of the devices it runs on) only with one on the same set, so "272 ms -> 120 ms" never
compares two GPUs before with one after. Matching goes from the narrowest scope to the widest: (rule,
rank, device, phase, kernel, devices), then without the phase, then without the one device (kernel and set
of devices kept). Within one key the findings pair in impact order. A finding left unpaired is new (or
resolved); when the other run has the same rule on the same rank in another scope, it says so
(``other_scope``: that finding's scope), so a problem that changed scope reads as such, not as a new one.

A finding is JSON as the analysis (``FindingResult.to_json``) or the service (``extra`` holding the
rule's own fields) gives it (``FindingJson``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict

from analysis.report_types import FindingJson


def _int(v: object) -> int | None:
    return int(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _str(v: object) -> str | None:
    return v if isinstance(v, str) else None


def field_of(f: FindingJson, key: str) -> object:
    """A finding's field, top level (the analysis' dicts) or under ``extra`` (the service's)."""
    fields: Mapping[str, object] = f  # a rule's own keys, by name
    if key in fields:
        return fields[key]
    extra = f.get("extra")
    return extra.get(key) if isinstance(extra, dict) else None


def device_of(f: FindingJson) -> int | None:
    """The one device a finding is about, when it names exactly one (its ``device`` or ``devices``)."""
    dev = field_of(f, "device")
    if isinstance(dev, int) and not isinstance(dev, bool):
        return dev
    devices = field_of(f, "devices")
    if isinstance(devices, list):
        found = {d.get("device") for d in devices if isinstance(d, dict)}
        if len(found) == 1:
            (only,) = found
            return only if isinstance(only, int) else None
    return None


def kernel_of(f: FindingJson) -> str | None:
    """The kernel a finding is about, when the rule is about one kernel (``kernel`` or ``dominant_kernel``)."""
    for key in ("kernel", "dominant_kernel"):
        k = field_of(f, key)
        if isinstance(k, dict):
            k = k.get("name")
        if isinstance(k, str) and k:
            return k
    return None


def devices_of(f: FindingJson) -> list[list[int | None]] | None:
    """The (process, device) pairs a finding about one kernel judged, from its evidence when the evidence is
    complete (None: not about a kernel, or not every row shown). Ranks of a finding rolled up across ranks
    count as part of its scope too (``per_rank``)."""
    if kernel_of(f) is None:
        return None
    ev = field_of(f, "evidence")
    total = _int(field_of(f, "evidence_total"))
    if not isinstance(ev, list) or not ev or total is None or total > len(ev):
        return None
    pairs = {(e.get("pid"), e.get("device")) for e in ev if isinstance(e, dict)}
    if not pairs or all(d is None for _, d in pairs):
        return None
    ranks = field_of(f, "per_rank")
    extra = sorted((-1, r.get("rank")) for r in ranks if isinstance(r, dict)) if isinstance(ranks, list) else []
    return [list(p) for p in sorted(pairs, key=str)] + [list(x) for x in extra]


class Scope(TypedDict):
    """What a finding is about (``scope``), None where it does not say."""

    rule_id: str | None
    rank: int | None
    device: int | None
    phase: str | None
    kernel: str | None
    devices: list[list[int | None]] | None


def scope(f: FindingJson) -> Scope:
    """What a finding is about: rule, rank, device, phase, kernel and the devices it judged (None where it
    does not say)."""
    return {"rule_id": f.get("rule_id"), "rank": f.get("rank"), "device": device_of(f),
            "phase": _str(field_of(f, "phase")), "kernel": kernel_of(f), "devices": devices_of(f)}


def _key(level: int, f: FindingJson) -> tuple:
    s: Mapping[str, object] = scope(f)
    parts = (("rule_id", "rank", "device", "phase", "kernel", "devices"), ("rule_id", "rank", "device", "kernel", "devices"),
             ("rule_id", "rank", "kernel", "devices"))[level]
    return tuple(str(s[p]) if p == "devices" else s[p] for p in parts)


MATCHED_ON = ("rule, rank, device, phase and kernel", "rule, rank, device and kernel", "rule, rank and kernel")


class SeverityChange(TypedDict):
    """A matched finding's severity in each run and whether it changed."""

    base: str | None
    head: str | None
    changed: bool


class ImpactDelta(TypedDict):
    """A matched finding's cost in each run (None where it has none) and its change."""

    base: int | None
    head: int | None
    delta: int | None
    delta_pct: float | None


class MatchedFinding(Scope):
    """A finding of both runs (``match_findings``): the head's scope and title, the base's title, the severity
    and cost (total and per step) of each, and what they were matched on."""

    title: str | None
    base_title: str | None
    severity: SeverityChange
    impact_ns: ImpactDelta
    impact_per_step_ns: ImpactDelta
    matched_on: str


def _delta(b: int | None, h: int | None) -> ImpactDelta:
    d = None if b is None or h is None else h - b
    return {"base": b, "head": h, "delta": d,
            "delta_pct": None if d is None or not b else round(100.0 * d / b, 3)}


class UnpairedFinding(FindingJson, total=False):
    """A finding of one run that none of the other's matched; ``other_scope``: the scope of the other run's unpaired
    finding of the same rule and rank, when there is one."""

    other_scope: Scope


def _by_impact(items: list[FindingJson]) -> list[FindingJson]:
    return sorted(items, key=lambda f: -int(f.get("impact_ns") or 0))  # stable: ranking order on ties


class FindingMatch(TypedDict):
    """Two runs' findings matched (``match_findings``): the pairs, and each side's findings left unpaired."""

    matched: list[MatchedFinding]
    new: list[UnpairedFinding]
    resolved: list[UnpairedFinding]


def match_findings(base: list[FindingJson], head: list[FindingJson]) -> FindingMatch:
    """``{"matched": [...], "new": [...], "resolved": [...]}``: matched pairs with their impact deltas (total
    and per step where both have it) and severity change, largest change first; the unmatched findings
    of each side, largest impact first."""
    left_b = list(enumerate(_by_impact(base)))
    left_h = list(enumerate(_by_impact(head)))
    pairs: list[tuple[int, FindingJson, FindingJson]] = []
    for level in range(len(MATCHED_ON)):
        taken_b: set[int] = set()
        taken_h: set[int] = set()
        pool: dict[tuple, list[tuple[int, FindingJson]]] = {}
        for i, f in left_b:
            pool.setdefault(_key(level, f), []).append((i, f))
        for j, g in left_h:
            cands = pool.get(_key(level, g))
            if cands:
                i, f = cands.pop(0)
                taken_b.add(i)
                taken_h.add(j)
                pairs.append((level, f, g))
        left_b = [(i, f) for i, f in left_b if i not in taken_b]
        left_h = [(j, g) for j, g in left_h if j not in taken_h]
    matched: list[MatchedFinding] = []
    for level, f, g in pairs:
        sb, sh = f.get("severity"), g.get("severity")
        matched.append({
            **scope(g), "title": g.get("title"), "base_title": f.get("title"),
            "severity": {"base": sb, "head": sh, "changed": sb != sh},
            "impact_ns": _delta(_int(f.get("impact_ns")), _int(g.get("impact_ns"))),
            "impact_per_step_ns": _delta(_int(field_of(f, "impact_per_step_ns")),
                                         _int(field_of(g, "impact_per_step_ns"))),
            "matched_on": MATCHED_ON[level],
        })
    matched.sort(key=lambda m: (-abs(m["impact_ns"]["delta"] or 0), str(m["rule_id"])))
    return {"matched": matched, "new": _other_scope([g for _, g in left_h], [f for _, f in left_b]),
            "resolved": _other_scope([f for _, f in left_b], [g for _, g in left_h])}


def _other_scope(found: list[FindingJson], other: list[FindingJson]) -> list[UnpairedFinding]:
    """Each unpaired finding, with ``other_scope`` (the scope of the other run's unpaired finding of the same
    rule and rank) when there is one: the same rule judged on another kernel or set of devices."""
    out: list[UnpairedFinding] = []
    for f in found:
        twin = next((g for g in other if g.get("rule_id") == f.get("rule_id") and g.get("rank") == f.get("rank")), None)
        out.append({**f} if twin is None else {**f, "other_scope": scope(twin)})
    return out
