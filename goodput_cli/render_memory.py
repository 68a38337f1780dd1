"""Plain-text memory story of an ncu report's profiled kernels (levels, bound, roofline), a few lines each."""

from __future__ import annotations

from typing import Any

from analysis import fmt
from analysis.readers import ToolKind

SHOWN = 10  # kernels printed per report, most nsys (else profiled) time first


def _si(value: float | None, unit: str) -> str:
    return "-" if value is None else fmt.si(value, unit)


def _level(lv: dict[str, Any]) -> str:
    parts = [lv["label"], _si(lv.get("bytes"), "B")]
    if lv.get("throughput_bps") is not None:
        parts.append(_si(lv["throughput_bps"], "B/s"))
    if lv.get("pct_of_peak") is not None:
        parts.append(f"{fmt.share(lv['pct_of_peak'])} of peak")
    if lv.get("hit_rate_pct") is not None:
        parts.append(f"hit {fmt.share(lv['hit_rate_pct'])}")
    return " ".join(parts)


def _us(ns: float | None) -> str:
    return "unknown" if ns is None else fmt.duration(ns)


def headline_lines(rep: dict[str, Any], run_verdict: dict[str, Any] | None = None) -> list[str]:
    """An ncu report's headline: its verdict when it is not already the run's, profiled kernel time (the durations
    known), kernels profiled, and the bounded estimated saving of its findings."""
    if rep.get("tool") != ToolKind.NCU:
        return []
    own = rep.get("verdict")
    lines = [f"   ncu verdict: {own['text']} Next: {own['next_step']}."] if own and own != run_verdict else []
    unknown = rep.get("durations_unknown") or 0
    total = rep.get("gpu_time_ns")
    line = (f"   profiled kernel time {_us(total)} over {fmt.count(rep.get('kernels_profiled', 0))} kernels profiled"
            + (f" ({fmt.count(unknown)} of unknown duration)" if unknown else ""))
    saving = rep.get("estimated_saving")
    if saving:
        share = f" ({fmt.pct(saving['pct'])} of the {'nsys' if saving['drawn_from'] == 'nsys' else 'profiled'} time)" \
            if saving.get("pct") is not None else ""
        line += f"; estimated saving {_us(saving['ns'])}{share}"
    return [*lines, line]


def memory_lines(rep: dict[str, Any], clip) -> list[str]:
    """Lines for ``reports[].kernels`` (``clip`` escapes and shortens untrusted kernel names)."""
    kernels = rep.get("kernels") or []
    if not kernels:
        return []
    # Kernels by what they could save, then by time (nsys, else profiled).
    order = sorted(kernels, key=lambda k: (-(k.get("estimated_saving_ns") or 0),
                                           -(k.get("nsys_total_ns") or k.get("duration_ns") or 0)))
    lines = [f"   memory story ({fmt.count(len(kernels))} profiled kernels" + (f", {SHOWN} shown)" if len(kernels) > SHOWN else ")")]
    for k in order[:SHOWN]:
        m = k["memory"]
        time = _us(k.get("duration_ns"))
        if k.get("nsys_total_ns") is not None:
            time += f", {fmt.duration(k['nsys_total_ns'])} in nsys"
        lines.append(f"     #{k['kernel_id']} {clip(k.get('short_name') or k['name'], 50)} ({time})")
        if k.get("causes"):
            lines.append(f"       could save {_us(k.get('estimated_saving_ns'))}: " + "; ".join(
                f"{c['rule_id']} {clip(c['title'].split(':')[0], 40)} {_us(c['impact_ns'])} ({c['role']})"
                for c in k["causes"]))
        if m["levels"]:
            lines.append("       " + " | ".join(_level(lv) for lv in m["levels"]))
        spr = m["sectors_per_request"]
        for op, what in (("ld", "loads"), ("st", "stores")):
            if spr.get(op) is not None:
                ideal = f" (ideal {fmt.number(spr[op + '_ideal'])})" if spr.get(op + "_ideal") is not None else ""
                lines.append(f"       global {what}: {fmt.number(spr[op])} sectors/request{ideal}")
        lim, sl = m.get("limiter"), m.get("sol")
        if lim:
            lines.append(f"       limiter: {lim['kind']} ({clip(lim['name'], 30)}): {clip(lim['reason'], 110)}")
        if sl and sl.get("bound_ns") is not None and sl.get("binding"):
            lines.append(f"       speed of light {_us(sl['bound_ns'])} ({sl['binding']['kind']} {sl['binding']['name']}: "
                         f"{clip(sl['binding']['basis'], 70)}); at most {_us(sl['max_saving_ns'])} to save")
        b = m["bound"]
        lines.append(f"       bound: {b['kind']}{' (' + b['level'] + ')' if b.get('level') else ''}: {clip(b['reason'], 90)}")
        r = m.get("roofline")
        if r and r.get("achieved_flops") is not None:
            where = ""
            if r.get("pct_of_roof") is not None:
                where = f", {fmt.pct(r['pct_of_roof'])} of the {r['roof'] if r['roof'] == 'compute' else r['roof'].upper()} roof ({_si(r['attainable_flops'], 'FLOP/s')})"
            ai = f"{fmt.number(r['intensity_dram'])} FLOP/DRAM B" if r.get("intensity_dram") is not None else "-"
            lines.append(f"       roofline: {_si(r['achieved_flops'], 'FLOP/s')} {r.get('precision') or ''} at {ai}{where}")
            if r.get("compute_roof_unknown") is not None:
                lines.append(f"       compute roof unknown: {clip(r['compute_roof_unknown'] or 'no peak', 80)}")
    return lines
