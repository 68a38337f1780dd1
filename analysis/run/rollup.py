"""One finding per rule and scope across the ranks of a multi-rank run.

A rule that finds the same problem on every rank (exposed communication on 16 ranks) says it once for
the run: the entry for a rule and scope (the phase it was judged on) sums its reports' findings
(``impact_ns``: the time it costs summed over ranks, as the per-report findings add up), lists each
rank's part in ``per_rank`` ([{rank, host, report, impact_ns, findings}], costliest first) and ``per_host`` (the same
summed by host: {host, ranks, of_ranks, impact_ns}), and names in
its title the rank, or the host, that stands out. Its message, advice and evidence are those of the
costliest rank's finding (the place to look first); its severity is the worst of them. Each report's own
findings stay in ``reports[].findings``. Run-level findings (no report: COMM002, COMM005) pass as they are.

A rule whose cost is a stretch of wall time (start-up: ``Rule.wall_phase``) costs the run that stretch once,
however many ranks sat through it together: its entry's ``impact_ns`` is the union of the ranks' phases on
the aligned clock (each report's session start), ``impact_basis`` ``wall_time_aligned``, and the sum over
ranks stays beside as ``impact_summed_ns``. Every other rule's cost is time on each rank's GPU, summed over
ranks (``impact_basis`` ``gpu_time_summed_over_ranks``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from analysis import fmt
from analysis.diagnosis.findings import SEVERITIES, Finding, RollUp
from analysis.diagnosis.rules.nsys.common import fmt_ms
from analysis.diagnosis.rules.registry import default_registry
from analysis.readers import ToolKind
from analysis.report_types import HostCost, RankCost, ReportInfo

# A host (of several ranks) stands out when its ranks carry at least this share of the rule's cost while
# holding fewer of the run's ranks than that share (the same problem on every rank names no host).
HOST_SHARE = 0.75


def wall_union(rule_id: str, members: list[Finding], by_label: dict[str, ReportInfo]) -> int | None:
    """The union, on the aligned clock, of the phase of ``rule_id`` on each rank with a finding (None: a rank
    lacks its session start or phase, or its finding is not that phase's length)."""
    rule = {r.id: r for r in default_registry()}.get(rule_id)
    phase = rule.wall_phase if rule is not None else None
    if phase is None:
        return None
    spans = []
    for f in members:
        info = by_label.get(f.report or "")
        start = info.get("session_start_utc_ns") if info else None
        ph = next((p for p in (info.get("phases") or [] if info else []) if p.get("name") == phase), None)
        if not isinstance(start, int) or ph is None or int(ph["end_ns"]) - int(ph["start_ns"]) != int(f.impact_ns):
            return None
        spans.append((start + int(ph["start_ns"]), start + int(ph["end_ns"])))
    total, end = 0, None
    for a, b in sorted(spans):
        if end is None or a > end:
            total, end = total + b - a, b
        elif b > end:
            total, end = total + b - end, b
    return total


def _who(rank: int | None, label: str) -> str:
    return f"rank {rank}" if rank is not None else label


def roll_up(findings: list[Finding], infos: list[ReportInfo]) -> list[Finding]:
    """``findings`` (placed, per report or run-level) as one entry per rule and scope (see the module);
    ``infos``: the run's ``reports[]`` (rank and host of each report's label). Unranked: the caller ranks."""
    by_label = {i["file"]: i for i in infos}
    groups: dict[tuple[str, str | None], list[tuple[str, Finding]]] = defaultdict(list)
    out: list[Finding] = []
    for f in findings:
        if (label := f.report) is None:
            out.append(f)
        else:
            groups[(f.rule_id, f.phase)].append((label, f))
    hosts_in_run = {i.get("host") for i in infos if i.get("tool") == ToolKind.NSYS}
    ranks_per_host: dict[str | None, int] = defaultdict(int)
    for i in infos:
        if i.get("tool") == ToolKind.NSYS:
            ranks_per_host[i.get("host")] += 1
    for (_, _), placed in groups.items():
        members = [f for _, f in placed]
        per: dict[str, RankCost] = {}
        for label, f in placed:
            info = by_label.get(label)
            row = per.setdefault(label, {"rank": info.get("rank") if info else None,
                                         "host": info.get("host") if info else None,
                                         "report": label, "impact_ns": 0, "findings": 0})
            row["impact_ns"] += int(f.impact_ns)
            row["findings"] += 1
        rows = sorted(per.values(), key=lambda r: (-r["impact_ns"], r["rank"] if r["rank"] is not None else 1 << 30,
                                                   r["report"]))
        rep = min(members, key=lambda f: (-int(f.impact_ns), f.report or ""))
        total = sum(r["impact_ns"] for r in rows)
        worst = min(SEVERITIES.index(f.severity) for f in members)
        by_host: dict[str | None, HostCost] = {}
        for r in rows:
            h = by_host.setdefault(r["host"], {"host": r["host"], "ranks": 0, "of_ranks": ranks_per_host.get(r["host"], 0),
                                               "impact_ns": 0})
            h["ranks"] += 1
            h["impact_ns"] += r["impact_ns"]
        wall = wall_union(rep.rule_id, members, by_label) if len(members) > 1 else None
        rollup = RollUp(impact_summed_ns=total,
                        impact_basis="gpu_time_summed_over_ranks" if wall is None else "wall_time_aligned",
                        per_rank=rows, per_host=sorted(by_host.values(), key=lambda h: (-h["impact_ns"], str(h["host"]))),
                        ranks_with_finding=len(rows))
        # The percentages as the JSON holds them (3 places): the largest of the members'.
        pct = max((round(float(p), 3) for f in members if (p := f.impact_pct) is not None), default=None)
        out.append(replace(
            rep, severity=SEVERITIES[worst], impact_ns=total if wall is None else wall, impact_pct=pct, report=None,
            rank=rows[0]["rank"], title=rep.title + _standout(rows, total, hosts_in_run, ranks_per_host),
            evidence_total=sum(int(f.evidence_total or 0) for f in members), rollup=rollup,
            impact_per_step_ns=(None if rep.impact_per_step_ns is None
                                else sum(int(f.impact_per_step_ns or 0) for f in members))))
    return out


def _standout(rows: list[RankCost], total: int, hosts_in_run: set[str | None],
              ranks_per_host: dict[str | None, int]) -> str:
    """The title's suffix: which host or rank stands out among those with the finding."""
    n_ranks = sum(ranks_per_host.values())
    if len(hosts_in_run) > 1 and total > 0:
        by_host: dict[str | None, int] = defaultdict(int)
        for r in rows:
            by_host[r["host"]] += r["impact_ns"]
        host, cost = max(by_host.items(), key=lambda kv: (kv[1], str(kv[0])))
        share = cost / total
        many = ranks_per_host.get(host, 0) > 1  # a host of one rank is that rank: named as a rank below
        if host is not None and many and share >= HOST_SHARE and ranks_per_host[host] / max(1, n_ranks) < share:
            on = sum(1 for r in rows if r["host"] == host)
            return f" (host {host}: {on} of its {ranks_per_host[host]} ranks, {fmt.share(100 * share)} of the cost)"
    top = rows[0]
    who = _who(top["rank"], top["report"]) + (f" on {top['host']}" if top["host"] else "")
    if len(rows) == 1:
        return f" ({who} only, of {fmt.count(n_ranks)} ranks)"
    return f" (on {fmt.count(len(rows))} of {fmt.count(n_ranks)} ranks; most on {who}: {fmt_ms(top['impact_ns'])})"
