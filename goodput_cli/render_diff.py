"""Plain-text rendering of a run comparison (``analysis.views.compare``) and of its ``--fail-on`` gate."""

from __future__ import annotations

from typing import Any

from analysis import fmt
from goodput_cli.render import _clip, _printable, ms

# The headline numbers (``kpis``), in the order every view shows them.
KPI_ROWS = (("kernel time", "kernel_time_ns"), ("  per step", "kernel_time_per_step_ns"), ("steps", "steps"),
            ("step time", "step_time_median_ns"), ("  p90", "step_time_p90_ns"), ("goodput", "goodput_pct"),
            ("exposed comm", "comm_exposed_ns"), ("  per step", "comm_exposed_per_step_ns"), ("idle", "idle_ns"),
            ("  per step", "idle_per_step_ns"), ("memory-only", "memory_only_ns"),
            ("  per step", "memory_only_per_step_ns"))
RANK_ROWS = (("goodput", "goodput_pct"), ("compute", "compute_ns"), ("exposed comm", "comm_exposed_ns"),
             ("memory-only", "memory_only_ns"), ("idle", "idle_ns"))
STEP_ROWS = (("step time", "step_time_ns"), ("compute", "compute_ns"), ("exposed comm", "comm_exposed_ns"),
             ("memory-only", "memory_only_ns"), ("idle", "idle_ns"))
KERNELS_SHOWN = 20
FINDINGS_SHOWN = 10


def _pct(x: Any) -> str:
    """A relative change, signed, through the one formatter: "+12.3 %", "-4.0 %"."""
    return fmt.signed(fmt.pct(x), x)


def _value(key: str, v: Any) -> str:
    if v is None:
        return "-"
    if key == "goodput_pct":
        return fmt.pct(v)
    if key in ("count", "steps"):
        return fmt.count(v)
    return ms(v)


def _change(key: str, d: dict[str, Any]) -> str:
    if d.get("delta") is None:
        return "-"
    if key == "goodput_pct":
        return fmt.points(d["delta"])
    pct = f" ({_pct(d['delta_pct'])})" if d.get("delta_pct") is not None else ""
    if d.get("estimator") and d.get("delta_pct") is not None:  # one change per row: the tested estimate
        pct = f" (est. {_pct(d['delta_pct'])}, {_p(d)})"
    if key in ("count", "steps"):
        return f"{fmt.signed(fmt.count(d['delta']), d['delta'])}{pct}"
    return f"{'+' if d['delta'] >= 0 else '-'}{ms(abs(d['delta']))}{pct}"


def _table(rows: tuple[tuple[str, str], ...], deltas: dict[str, Any], indent: str) -> list[str]:
    out = []
    for title, key in rows:
        d = deltas.get(key) or {}
        if d.get("base") is None and d.get("head") is None:
            continue
        out.append(f"{indent}{title:<14}{_value(key, d.get('base')):>16}  ->{_value(key, d.get('head')):>16}"
                   f"   {_change(key, d)}")
    return out


def _verdict(stat: dict[str, Any]) -> str:
    """What the test said: CHANGED, or why not."""
    if stat.get("changed"):
        return "CHANGED"
    if stat.get("test") == "floor_only":
        return "within floor (one sample: no test)"
    if stat.get("significant"):
        return "significant, within the floor"
    return "unchanged"


def _p(stat: dict[str, Any]) -> str:
    if stat.get("p_value") is None:
        return "no test"
    p = fmt.p_value(stat["p_value"])
    return f"p {p}" if p.startswith("<") else f"p={p}"


def _tested(rows: tuple[tuple[str, str], ...], stats: dict[str, Any], indent: str) -> list[str]:
    out = []
    for title, key in rows:
        s = stats.get(key)
        if not s:
            continue
        pct = _pct(s['delta_pct']) if s.get("delta_pct") is not None else "-"
        out.append(f"{indent}{title:<14}{ms(s['base']['median']):>16}  ->{ms(s['head']['median']):>16}   {pct:>8}  "
                   f"{_p(s):<12} {_verdict(s)}")
    return out


def _where(name: Any) -> str:
    if isinstance(name, list):
        return ", ".join(str(n) for n in name)
    return str(name)


def _kernel_line(k: dict[str, Any]) -> str:
    s = k["per_launch_ns"]
    if k["status"] in ("new", "gone"):
        head = f"{k['status']:>8}  {ms(k['head_total_ns'] if k['status'] == 'new' else k['base_total_ns']):>13} total"
    else:
        head = (f"{_pct(s['delta_pct']):>8} per launch (median {ms(s['base']['median'])} -> {ms(s['head']['median'])})  "
                f"{_p(s)}")
    ps = k.get("per_step_ns")
    if ps and k["status"] not in ("new", "gone") and ps.get("delta_pct") is not None:
        head += (f"; {_pct(ps['delta_pct'])} per step (median {ms(ps['base']['median'])} -> "
                 f"{ms(ps['head']['median'])}) {_p(ps)}")
        if k.get("changed_by"):
            head += f" [changed {' and '.join(b.replace('_', ' ') for b in k['changed_by'])}]"
    lps = k.get("launches_per_step")
    launches = (f"x{fmt.number(lps['base'])} -> x{fmt.number(lps['head'])}/step" if lps
                else f"x{fmt.count(k['base_count'])} -> x{fmt.count(k['head_count'])}")
    return f"   {head}  {launches}  {_clip(k.get('label') or k['name'], 70)}"


def _findings(diff: dict[str, Any]) -> list[str]:
    lines = []
    matched = diff.get("matched_findings") or []
    moved = [m for m in matched if m["impact_ns"].get("delta") or m["severity"]["changed"]]
    lines += ["", f"== findings in both runs, matched by rule and scope ({fmt.count(len(matched))}; "
                  f"{fmt.count(len(matched) - len(moved))} with the same impact and severity)"]
    for m in moved[:FINDINGS_SHOWN]:
        rank = f" rank {m['rank']}" if m.get("rank") is not None else ""
        sev = m["severity"]
        sev_text = f"{sev['base']} -> {sev['head']}" if sev["changed"] else str(sev["head"])
        per_step = m.get("impact_per_step_ns") or {}
        step = f", per step {_change('ns', per_step)}" if per_step.get("delta") is not None else ""
        lines.append(f"   [{sev_text}] {m.get('rule_id')}{rank} {_value('ns', m['impact_ns']['base'])} -> "
                     f"{_value('ns', m['impact_ns']['head'])} ({_change('ns', m['impact_ns'])}{step})  "
                     f"{_clip(m.get('title') or '', 70)}")
    if len(moved) > FINDINGS_SHOWN:
        lines.append(f"   ... {fmt.count(len(moved) - FINDINGS_SHOWN)} more (--format json lists them)")
    for title, key in (("new findings in B (nothing in A matches)", "new_findings"),
                       ("findings resolved in B (nothing in B matches)", "resolved_findings")):
        found = diff.get(key) or []
        lines += ["", f"== {title} ({fmt.count(len(found))})"]
        for f in found[:FINDINGS_SHOWN]:
            rank = f" rank {f['rank']}" if f.get("rank") is not None else ""
            lines.append(f"   [{f.get('severity')}] {f.get('rule_id')}{rank} {ms(f.get('impact_ns'))}  "
                         f"{_clip(f.get('title') or '', 80)}")
            other = f.get("other_scope")
            if other:  # the same rule in the other run, on another kernel or set of GPUs: not comparable
                where = f"kernel {_clip(str(other.get('kernel')), 40)}" if other.get("kernel") != f.get("kernel") \
                    else f"{fmt.count(len([d for d in other.get('devices') or [] if d[0] != -1]))} GPU(s)"
                lines.append(f"     (the other run has {f.get('rule_id')} on another scope: {where}; not compared)")
        if len(found) > FINDINGS_SHOWN:
            lines.append(f"   ... {fmt.count(len(found) - FINDINGS_SHOWN)} more (--format json lists them)")
    return lines


def text(diff: dict[str, Any]) -> str:
    lines = [_printable(f"== diff: B {_where(diff.get('head'))}  vs  A {_where(diff.get('base'))}")]
    lines += [f"   note: {n}" for n in diff.get("notes") or []]
    lines.append("   KPIs (B - A):")
    lines += _table(KPI_ROWS, diff.get("kpis") or {}, "     ")
    if diff.get("steps"):
        lines.append("   per step (median of the steps; Mann-Whitney U; changed: significant and beyond the floor):")
        lines += _tested(STEP_ROWS, diff["steps"], "     ")
    ranks = diff.get("ranks") or []
    if len(ranks) > 1:
        for r in ranks:
            who = f"rank {r['rank']}" if r.get("rank") is not None else f"report {r.get('report')}"
            lines.append(f"   {who}:")
            lines += _table(RANK_ROWS, r.get("breakdown") or {}, "     ")
            if r.get("per_step"):
                lines += _tested(STEP_ROWS[:1], r["per_step"], "     ")
    noise = diff.get("noise") or {}
    kernels = diff.get("kernels") or []
    lines.append("")
    judged = " or per step" if "per_step" in (noise.get("tests") or []) else ""
    lines.append(f"== kernels that changed per launch{judged} ({fmt.count(len(kernels))}; "
                 f"{fmt.count(noise.get('kernels_below_noise', 0))} of {fmt.count(noise.get('kernels_compared', 0))} not: not significant, within {fmt.exact(noise.get('pct', 0))}%, or under "
                 f"{ms(noise.get('abs_ns'))} per {noise.get('per', 'run')})")
    lines += [_kernel_line(k) for k in kernels[:KERNELS_SHOWN]]
    if len(kernels) > KERNELS_SHOWN:
        lines.append(f"   ... {fmt.count(len(kernels) - KERNELS_SHOWN)} more (--format json lists them)")
    coll = diff.get("collectives")
    if coll:  # communication kernels: waiting for the last rank apart from the transfer after it
        w, x = coll["wait_per_instance_ns"], coll["transfer_per_instance_ns"]
        lines += ["", f"== collectives ({coll['basis']}; {coll['said']})",
                  f"   waiting  {ms(w['base']):>14}  ->{ms(w['head']):>14}   {_change('ns', w)}",
                  f"   transfer {ms(x['base']):>14}  ->{ms(x['head']):>14}   {_change('ns', x)}"]
        for unit, label in (("per_step", "per step"), ("per_instance_sample", "per instance")):
            for key, name in (("wait", "waiting"), ("transfer", "transfer")):
                st = coll.get(f"{key}_{unit}_ns")
                if st and st.get("base", {}).get("median") is not None:  # the tested sample, as the kernels'
                    lines.append(f"   {name} {label}: median {ms(st['base']['median'])} -> {ms(st['head']['median'])}"
                                 f" (est. {_pct(st['delta_pct'])}, {_p(st)}; {'changed' if st['changed'] else 'unchanged'})")
    lines += _findings(diff)
    if diff.get("gate"):
        lines.append("")
        lines.append("== --fail-on")
        width = max(24, *(len(g["check"]) for g in diff["gate"]))
        for g in diff["gate"]:
            seen = "n/a" if g["observed"] is None else f"{fmt.signed(fmt.number(g['observed']), g['observed'])}{g['unit']}"
            why = f"  ({g['note']})" if g.get("note") else ""
            lines.append(f"   {g['status'].upper():<13} {g['check']:<{width}} observed {seen}{why}")
    return "\n".join(lines) + "\n"
