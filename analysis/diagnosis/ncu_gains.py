"""One kernel's ncu findings share its time: causes first, each gaining only what the earlier ones leave.

Every NCU rule estimates its speedup as if it were the only problem of the kernel; several of them on one
kernel are views of one cost (scattered accesses waste DRAM bandwidth, which leaves the pipes idle, which
puts the kernel far under its roofline). Their raw gains summed can exceed the kernel's time. Here the
findings of one kernel (same report, demangled name, grid and block) are ordered, causes before symptoms (each
rule states which it is: ``gain_role`` and ``cause_order`` on ``analysis.diagnosis.rules.ncu.common.NcuRule``, read
here from the registry, so this module sits above the rules, beside the verdict):

- causes, in the order one explains the next, each gain their fraction of the time the earlier ones leave,
  ``remaining x f_i`` with ``f_i`` = raw gain / kernel time (together ``T x (1 - prod(1 - f_i)) <= T``);
- symptoms describe that same cost from the outside: when a cause was found they are explained by it and
  gain nothing of their own (fixing the cause is what removes them); without one, the largest symptom
  carries the time at stake and the others are the same cost seen another way (0).

So a kernel's gains never exceed its time ``T`` (its linked nsys time or its profiled time), a report's sum
is at most its profiled (or linked) time, and only one finding per kernel can be critical (the first in
that order that reaches the threshold).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, Literal

from analysis.diagnosis.findings import Finding, severity_for
from analysis.diagnosis.rules.ncu.common import NcuRule
from analysis.diagnosis.rules.registry import default_registry
from analysis.report_types import ReportSaving
from analysis.result_parts import KernelCause, NcuKernel
from analysis.results import NcuExtra


@functools.cache
def _ncu_rules() -> dict[str, type[NcuRule]]:
    return {r.id: r for r in default_registry() if issubclass(r, NcuRule)}


def role(f: Finding) -> tuple[Literal["cause", "symptom"], int | None]:
    """The finding's part in sharing its kernel's time and, for a cause, its place in the causes' order: its
    rule's ``gain_role`` and ``cause_order``, or its kind's entry in the rule's ``cause_kinds`` (NCU005's small
    grid). KeyError for a rule that is not a registered ncu rule."""
    rule = _ncu_rules().get(f.rule_id)
    if rule is None:  # never a silent symptom: a finding's role comes from its registered rule
        raise KeyError(f"{f.rule_id} is not a registered ncu rule, so its gain role is unknown")
    kind = f.evidence[0].detail.get("bound_kind") if f.evidence else None
    if kind in rule.cause_kinds:
        return "cause", rule.cause_kinds[kind]
    return rule.gain_role, rule.cause_order


def _is_cause(f: Finding) -> bool:
    return role(f)[0] == "cause"


def _ncu(f: Finding) -> NcuExtra:
    """The typed extra of an NCU rule's finding."""
    if not isinstance(f.extra, NcuExtra):
        raise TypeError(f"{f.rule_id}: an ncu finding's extra is NcuExtra, not {type(f.extra).__name__}")
    return f.extra


def _role(f: Finding) -> str:
    """A shared finding's role on its kernel (``share_gains`` gives one to every finding on a kernel of known time)."""
    role = _ncu(f).role
    if role is None:
        raise ValueError(f"{f.rule_id}: a finding on a kernel has no role; share_gains runs first")
    return role


def _kernel_key(f: Finding) -> tuple | None:
    if not f.rule_id.startswith("NCU") or not isinstance(f.extra, NcuExtra) or not f.extra.kernel_time_ns:
        return None
    x = f.extra
    return (f.report, x.kernel, str(x.kernel_grid), str(x.kernel_block))


def share_gains(findings: list[Finding]) -> list[Finding]:
    """The findings with each kernel's ncu gains shared (others unchanged, order kept)."""
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, f in enumerate(findings):
        key = _kernel_key(f)
        if key is not None:
            groups[key].append(i)
    out = list(findings)
    for members in groups.values():
        for i, f in _shared([findings[i] for i in members], members):
            out[i] = f
    return out


def _order(f: Finding) -> tuple:
    # Causes in their explanatory order; symptoms largest first (the largest carries the time when no cause does).
    kind, order = role(f)
    cause = kind == "cause"
    return (not cause, order if cause and order is not None else 0, -f.impact_ns, f.rule_id, f.title)


def _shared(group: list[Finding], index: list[int]) -> list[tuple[int, Finding]]:
    ranked = sorted(zip(index, group, strict=True), key=lambda item: _order(item[1]))
    total = int(_ncu(ranked[0][1]).kernel_time_ns or 0)
    remaining = float(total)
    causes = list(dict.fromkeys(f.rule_id for _, f in ranked if _is_cause(f) and f.impact_ns > 0))
    gains: list[tuple[int, Finding, float]] = []
    carrier: str | None = None  # the symptom that carries the kernel's time when no cause does
    for i, f in ranked:
        fraction = min(max(f.impact_ns / total, 0.0), 1.0)
        if not _is_cause(f):
            if causes or carrier is not None:
                fraction = 0.0
            elif fraction > 0:
                carrier = f.rule_id
        gain = remaining * fraction
        remaining -= gain
        gains.append((i, f, float(math.floor(gain))))  # down: the whole nanoseconds never add up past T
    saving = sum(g for _, _, g in gains)
    out: list[tuple[int, Finding]] = []
    critical_seen = False
    for position, (i, f, gain) in enumerate(gains, start=1):
        base = _ncu(f).time_base_ns
        pct = 100.0 * gain / base if base and f.impact_pct is not None else f.impact_pct
        severity = severity_for(pct)
        if severity == "critical":
            severity = "warning" if critical_seen else severity
            critical_seen = True
        message = f.message
        symptom = not _is_cause(f)
        explained_by = None
        if symptom and causes and f.impact_ns > 0:
            explained_by = causes
            message += (f". A symptom of what is found on this kernel ({', '.join(causes)}): fixing that removes it, "
                        "so it adds nothing to the kernel's estimated saving")
        elif symptom and carrier is not None and gain == 0 and f.impact_ns > 0:
            explained_by = [carrier]
            message += (f". The same cost as {carrier} on this kernel, seen another way: it adds nothing to the "
                        "kernel's estimated saving")
        extra = dataclasses.replace(_ncu(f), raw_impact_ns=int(f.impact_ns),
                                    kernel_saving_ns=int(round(saving)), cause_order=position,
                                    causes_on_kernel=len(gains), role=role(f)[0], explained_by=explained_by)
        out.append((i, dataclasses.replace(f, impact_ns=int(round(gain)), impact_pct=pct, severity=severity,
                                           message=message, extra=extra)))
    return out


def report_saving(findings: list[Finding], report: str | None) -> ReportSaving:
    """The headline estimated saving of an ncu report after ``share_gains``: the bounded sum of its gains in ns,
    its share of the time it is drawn from (the profiled time, or the linked nsys reports' span; None when
    kernels of both kinds mix) and which time that is."""
    mine = [f for f in findings if f.report == report and _kernel_key(f) is not None]
    linked = {_ncu(f).linked_to_nsys for f in mine}
    pcts = [f.impact_pct for f in mine]
    uniform = len(linked) <= 1 and all(p is not None for p in pcts)
    return {"ns": sum(int(f.impact_ns) for f in mine),
            "pct": sum(p for p in pcts if p is not None) if uniform and mine else None,
            "drawn_from": "mixed" if len(linked) > 1 else "nsys" if linked == {True} else "profiled"}


def annotate_kernels(kernels: Sequence[NcuKernel], findings: list[Finding], report: str | None) -> list[NcuKernel]:
    """The ``reports[].kernels`` entries with their ``estimated_saving_ns`` (None without findings) and their
    ``causes``: the findings on that kernel in the order they share its time (what the page and CLI list). After
    ``share_gains``, which gives each finding on a kernel of known time its ``role``."""
    groups: dict[tuple, list[Finding]] = defaultdict(list)
    for f in findings:
        key = _kernel_key(f)
        if key is not None and f.report == report:
            groups[key[1:]].append(f)
    out = []
    for k in kernels:
        grid = list(k.grid) if k.grid else None
        block = list(k.block) if k.block else None
        mine = groups.get((k.name, str(grid), str(block)), [])
        if not mine:  # launches exported without grid/block dims are keyed by their sizes
            mine = next((g for key, g in groups.items() if key[0] == k.name and grid is None), [])
        mine = sorted(mine, key=lambda f: _ncu(f).cause_order or 0)
        own = [_launch_gain(f, k.kernel_id) for f in mine]
        # This launch's own saving: each finding's share of it (never the group's sum under one launch).
        out.append(dataclasses.replace(k, estimated_saving_ns=sum(own) if mine else None, causes=tuple(
            KernelCause(rule_id=f.rule_id, title=f.title, impact_ns=g, role=_role(f), severity=f.severity)
            for f, g in zip(mine, own, strict=True))))
    return out


def _launch_gain(f: Finding, kernel_id: Any) -> int:
    """One launch's part of a finding's shared gain, in its profiled time: its SOL-bounded raw saving x the share
    of the raw estimate the finding keeps after ``share_gains`` (0 when the problem did not show on it)."""
    x = _ncu(f)
    raw_total = x.raw_impact_ns or 0
    mine = next((ns for kid, ns in x.launch_savings or [] if kid == kernel_id), None)
    if not mine or raw_total <= 0:
        return 0
    return int(math.floor(mine * min(1.0, f.impact_ns / raw_total)))
