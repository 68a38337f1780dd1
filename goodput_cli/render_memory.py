"""Plain-text memory story of an ncu report's profiled kernels (levels, bound, roofline), a few lines each."""

from __future__ import annotations

from typing import Any

SHOWN = 10  # kernels printed per report, most nsys (else profiled) time first


def _si(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:,.1f} {prefix}{unit}"
    return f"{value:,.0f} {unit}"


def _level(lv: dict[str, Any]) -> str:
    parts = [lv["label"], _si(lv.get("bytes"), "B")]
    if lv.get("throughput_bps") is not None:
        parts.append(_si(lv["throughput_bps"], "B/s"))
    if lv.get("pct_of_peak") is not None:
        parts.append(f"{lv['pct_of_peak']:.0f}% of peak")
    if lv.get("hit_rate_pct") is not None:
        parts.append(f"hit {lv['hit_rate_pct']:.0f}%")
    return " ".join(parts)


def memory_lines(rep: dict[str, Any], clip) -> list[str]:
    """Lines for ``reports[].kernels`` (``clip`` escapes and shortens untrusted kernel names)."""
    kernels = rep.get("kernels") or []
    if not kernels:
        return []
    order = sorted(kernels, key=lambda k: -(k.get("nsys_total_ns") or k.get("duration_ns") or 0))
    lines = [f"   memory story ({len(kernels)} profiled kernels" + (f", {SHOWN} shown)" if len(kernels) > SHOWN else ")")]
    for k in order[:SHOWN]:
        m = k["memory"]
        time = f"{(k.get('duration_ns') or 0) / 1e3:,.1f} us"
        if k.get("nsys_total_ns") is not None:
            time += f", {k['nsys_total_ns'] / 1e6:,.3f} ms in nsys"
        lines.append(f"     #{k['kernel_id']} {clip(k.get('short_name') or k['name'], 50)} ({time})")
        if m["levels"]:
            lines.append("       " + " | ".join(_level(lv) for lv in m["levels"]))
        spr = m["sectors_per_request"]
        for op, what in (("ld", "loads"), ("st", "stores")):
            if spr.get(op) is not None:
                ideal = f" (ideal {spr[op + '_ideal']:.1f})" if spr.get(op + "_ideal") is not None else ""
                lines.append(f"       global {what}: {spr[op]:.1f} sectors/request{ideal}")
        b = m["bound"]
        lines.append(f"       bound: {b['kind']}{' (' + b['level'] + ')' if b.get('level') else ''}: {clip(b['reason'], 90)}")
        r = m.get("roofline")
        if r and r.get("achieved_flops") is not None:
            where = ""
            if r.get("pct_of_roof") is not None:
                where = f", {r['pct_of_roof']:.1f}% of the {r['roof'] if r['roof'] == 'compute' else r['roof'].upper()} roof ({_si(r['attainable_flops'], 'FLOP/s')})"
            ai = f"{r['intensity_dram']:.2f} FLOP/DRAM B" if r.get("intensity_dram") is not None else "-"
            lines.append(f"       roofline: {_si(r['achieved_flops'], 'FLOP/s')} {r.get('precision') or ''} at {ai}{where}")
    return lines
