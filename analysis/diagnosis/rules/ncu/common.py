"""The shared shape of ncu rules: evaluate each profiled launch, group launches per kernel, link to nsys time.

A rule subclass implements ``evaluate(launch, params)``: ``None`` when the launch lacks the metrics,
else the list of ``Hit``s (possibly empty). When that yields nothing, ncu's own rule results of the
same analysis (optimization/warning messages) are used if the export carries them. The base class turns hits into one finding per kernel and kind.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from analysis import fmt
from analysis.diagnosis.findings import Evidence, Finding
from analysis.diagnosis.ncu import sol
from analysis.diagnosis.ncu.impact import Linker, impact, weighted_speedup
from analysis.diagnosis.ncu.limiter import library, library_advice
from analysis.diagnosis.rules.base import Rule, RuleContext, Skip
from analysis.model.ncu_metrics import Launch, load_launches
from analysis.model.trace import Trace
from analysis.results import NcuExtra


@dataclass
class Hit:
    """One problem on one launch: its kind, ncu's estimated speedup (percent) and the numbers behind it."""

    key: str
    speedup_pct: float
    title: str
    message: str
    advice: str
    detail: dict[str, Any] = field(default_factory=dict)
    speedup_type: str = "local"


# How a finding says it was linked to nsys time (analysis.diagnosis.ncu.impact.match_rows).
LINKED_BY = {"name+grid+block": "demangled name, grid and block", "name": "demangled name (ncu exported no grid "
             "or block)", "short_name+grid+block": "base name, grid and block (one nsys kernel has them)"}


class NcuRule(Rule):
    """Base of NCU0xx rules (not registered itself)."""

    tool = "ncu"
    requires = ("ncu_kernels",)
    extra_type = NcuExtra
    collect: ClassVar[str] = ""                     # ncu flags that collect the metrics, e.g. "--section Occupancy"
    ncu_rules: ClassVar[tuple[str, ...]] = ()       # ncu rule ids whose results stand in when metrics are missing
    label: ClassVar[str] = ""                       # short title of a finding taken from ncu's own rule result
    call_level: ClassVar[bool] = False              # the advice is about the call (kept for library kernels)
    # How the rule's findings on one kernel share its time with the others there (analysis.diagnosis.ncu_gains).
    # A ``cause`` names a reason the kernel moves or waits more than it must; causes gain in ``cause_order``
    # (lower first: the order in which one explains the next). A ``symptom`` describes the result (stalls, pipes,
    # the distance to a roof, the speed-of-light class) and ``cause_order`` is None: it gains only when no cause
    # is found. No default: every registered ncu rule states its role (a registry test fails on one that does not).
    gain_role: ClassVar[Literal["cause", "symptom"]]
    cause_order: ClassVar[int | None]
    # The kinds of finding (``bound_kind`` in its first evidence's detail) that are causes although the rule is a
    # symptom, with their cause order: NCU005's small grid is a launch too small for the GPU.
    cause_kinds: ClassVar[dict[str, int]] = {}
    # What the ncu verdict (``analysis.diagnosis.ncu_verdict``) reads of the rule when its finding is the first on
    # the costliest kernel: the next step its cause names, better than the limiter's (""; the limiter's step), and
    # whether its fix removes work (fewer bytes or wavefronts moved), so the gain is bounded by the work left.
    cause_step: ClassVar[str] = ""
    removes_work: ClassVar[bool] = False

    def evaluate(self, launch: Launch, params: Mapping[str, float]) -> list[Hit] | None:
        raise NotImplementedError

    def _advice(self, launch: Launch, hit: Hit) -> str:
        """The hit's advice; for a library kernel (cuBLAS, cuDNN, CUTLASS, FlashAttention ...), advice about the call
        instead, unless the hit's advice already is (``call_level``, or a launch-shape hit: batch at the call)."""
        lib = library(launch.name)
        if lib is None or self.call_level or hit.detail.get("bound_kind") == "small_grid":
            return hit.advice
        return library_advice(lib)

    def sol_scale(self, launch: Launch, hit: Hit) -> dict[str, float] | None:
        """The share of each resource's work left after the fix this hit proposes (None: all of it), for the
        speed-of-light bound of its saving (``analysis.diagnosis.ncu.sol``). Rules that remove traffic override it."""
        return None

    def from_ncu_rules(self, launch: Launch) -> list[Hit] | None:
        """ncu's own results for this analysis (optimization/warning messages), when it exported them."""
        rows = [r for r in launch.rules if r["rule"] in self.ncu_rules and (r["type"] or "").upper() in ("OPT", "WRN")]
        if not rows:
            return None
        return [
            Hit(f"ncu:{r['rule']}:{i}", float(r["speedup_pct"] or 0.0), f"{self.label} (ncu {r['rule']})",
                r["message"] or "",
                "See ncu's rule message; collect `ncu " + self.collect + "` for Goodput's own analysis.",
                {"ncu_rule": r["rule"], "section": r["section"]}, (r["speedup_type"] or "local").lower())
            for i, r in enumerate(rows)
        ]

    def check(self, ctx: RuleContext) -> list[Finding]:
        linker = Linker(ctx.run)
        findings: list[Finding] = []
        evaluated = False
        for trace in self.applicable(ctx.run):
            launches = load_launches(trace)
            hits: dict[tuple, list[tuple[Launch, Hit]]] = defaultdict(list)
            seen: dict[tuple, list[Launch]] = defaultdict(list)
            for launch in launches:
                found = self.evaluate(launch, ctx.params)
                if not found:
                    # Metrics missing, or present only for some checks: ncu's own verdict (same thresholds,
                    # computed from everything it collected) fills the gap when the export carries it.
                    found = self.from_ncu_rules(launch) or found
                if found is None:
                    continue
                evaluated = True
                seen[launch.group_key].append(launch)
                for hit in found:
                    hits[(launch.group_key, hit.key)].append((launch, hit))
            profiled = sum(launch.duration_ns or 0 for launch in launches) or None
            for (group, _key), items in hits.items():
                findings.append(self._finding(trace, linker, seen[group], items, profiled))
        if not evaluated:
            raise Skip(f"no profiled kernel has the metrics this rule needs; collect them with `ncu {self.collect}`")
        return findings

    def _finding(self, trace: Trace, linker: Linker, group: list[Launch], items: list[tuple[Launch, Hit]],
                 profiled_ns: float | None) -> Finding:
        by_launch = {launch.kernel_id: hit for launch, hit in items}
        for hit in by_launch.values():  # hostile or odd metric values never claim more than the whole kernel
            hit.speedup_pct = min(max(hit.speedup_pct, 0.0), 100.0)
        # Each launch's speedup bounded by its own speed of light (duration - SOL bound), launch by launch;
        # launches of the kernel where the problem did not show count with speedup 0.
        pairs = []
        capped = 0
        for launch in group:
            found = by_launch.get(launch.kernel_id)
            raw = found.speedup_pct / 100.0 if found is not None else 0.0
            bounded = sol.cap_fraction(launch, raw, self.sol_scale(launch, found)) if found is not None else 0.0
            capped += bounded < raw
            pairs.append((launch, bounded))
        speedup = weighted_speedup(pairs)
        link = linker.link(group[0])
        impact_ns, impact_pct = impact(link, pairs, profiled_ns, speedup)
        lead_launch, lead = max(items, key=lambda item: (item[0].duration_ns or 0, item[1].speedup_pct))
        detail = dict(lead.detail)
        lead_sol = sol.bound(lead_launch, self.sol_scale(lead_launch, lead))
        detail.update({"kernel_ids": sorted(by_launch)[:20], "launches_with_problem": len(by_launch),
                       "launches_profiled": len(group), "raw_speedup_pct": lead.speedup_pct,
                       "sol_bound_ns": _ns(lead_sol["bound_ns"]), "sol_binding": lead_sol["binding"],
                       "launches_capped_by_sol": capped})
        if link is not None:
            detail.update({"nsys_total_ns": link.total_ns, "nsys_launches": link.launches, "nsys_match": link.match,
                           "nsys_reports": list(link.reports)})
        evidence = Evidence(name=lead_launch.name, value_ns=_ns(impact_ns), detail=detail)
        scope = f"{fmt.count(len(by_launch))} of {fmt.count(len(group))} profiled launches" if len(group) > 1 else "the profiled launch"
        message = f"{lead.message} ({scope} of {lead_launch.short_name or lead_launch.name}; " \
                  f"estimated speedup {fmt.pct(speedup * 100)}" + \
                  (f", applied to {fmt.duration(link.total_ns)} of this kernel in the nsys timeline, linked by "
                   f"{LINKED_BY.get(link.match, link.match)})" if link else ")")
        if link is not None:
            kernel_ns: float | None = link.total_ns
        else:
            kernel_ns = sum(launch.duration_ns or 0.0 for launch in group) \
                if all(launch.duration_ns for launch in group) else None
        return Finding(
            rule_id=self.id, title=f"{lead.title}: {lead_launch.short_name or lead_launch.name}", message=message,
            impact_ns=impact_ns, impact_pct=impact_pct, advice=self._advice(lead_launch, lead), evidence=(evidence,),
            evidence_total=len(by_launch), report=trace.label, rank=trace.rank,
            extra=NcuExtra(
                speedup_pct=round(speedup * 100, 3), speedup_type=lead.speedup_type,
                kernel=lead_launch.name, linked_to_nsys=link is not None,
                nsys_match=link.match if link is not None else None,
                # The kernel this finding shares with the rule's others (analysis.diagnosis.ncu_gains).
                kernel_grid=list(group[0].grid) if group[0].grid else group[0].grid_size,
                kernel_block=list(group[0].block) if group[0].block else group[0].block_size,
                kernel_time_ns=_ns(kernel_ns),
                # Each launch's saving bounded by its speed of light, [kernel_id, ns] (profiled time), so a
                # group's saving is never shown under one launch (analysis.diagnosis.ncu_gains.annotate_kernels).
                launch_savings=[[launch.kernel_id, _ns((launch.duration_ns or 0.0) * f)] for launch, f in pairs
                                if f > 0],
                # What impact_pct is a share of: the linked nsys reports' span, or all profiled time.
                time_base_ns=link.span_ns if link is not None else _ns(profiled_ns)),
        )


def _ns(value: float | None) -> int | None:
    """A duration as integer ns, or None where a hostile export's numbers give none a trace could hold."""
    if value is None or not math.isfinite(value) or abs(value) >= 2**62:
        return None
    return int(round(value))
