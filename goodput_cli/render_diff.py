"""Plain-text rendering of a run comparison (``analysis.compare``) and of its ``--fail-on`` gate."""

from __future__ import annotations

from typing import Any

from goodput_cli.render import _clip, _printable, ms

KPI_ROWS = (("goodput", "goodput_pct"), ("span", "span_ns"), ("compute", "compute_ns"),
            ("exposed comm", "comm_exposed_ns"), ("memory-only", "memory_only_ns"), ("idle", "idle_ns"))
STEP_ROWS = (("steps", "count"), ("median", "median_ns"), ("p10", "p10_ns"), ("p90", "p90_ns"))
KERNELS_SHOWN = 20
FINDINGS_SHOWN = 10


def _value(key: str, v: Any) -> str:
    if v is None:
        return "-"
    if key == "goodput_pct":
        return f"{v:.2f}%"
    if key == "count":
        return f"{int(v):,}"
    return ms(v)


def _change(key: str, d: dict[str, Any]) -> str:
    if d.get("delta") is None:
        return "-"
    if key == "goodput_pct":
        return f"{d['delta']:+.2f} pt"
    pct = f" ({d['delta_pct']:+.1f}%)" if d.get("delta_pct") is not None else ""
    if key == "count":
        return f"{int(d['delta']):+,}{pct}"
    return f"{'+' if d['delta'] >= 0 else '-'}{ms(abs(d['delta']))}{pct}"


def _table(rows: tuple[tuple[str, str], ...], deltas: dict[str, Any], indent: str) -> list[str]:
    out = []
    for title, key in rows:
        d = deltas.get(key) or {}
        out.append(f"{indent}{title:<14}{_value(key, d.get('base')):>16}  ->{_value(key, d.get('head')):>16}"
                   f"   {_change(key, d)}")
    return out


def _where(name: Any) -> str:
    if isinstance(name, list):
        return ", ".join(str(n) for n in name)
    return str(name)


def text(diff: dict[str, Any]) -> str:
    lines = [_printable(f"== diff: B {_where(diff.get('head'))}  vs  A {_where(diff.get('base'))}"), "   KPIs (B - A):"]
    lines += _table(KPI_ROWS, diff.get("breakdown") or {}, "     ")
    st = diff.get("step_time_ns") or {}
    if st.get("base") is not None or st.get("head") is not None:
        lines += _table((("step time", "median_ns"),), {"median_ns": st}, "     ")
    ranks = diff.get("ranks") or []
    if len(ranks) > 1 or any(r.get("steps") for r in ranks):
        for r in ranks:
            who = f"rank {r['rank']}" if r.get("rank") is not None else f"report {r.get('report')}"
            lines.append(f"   {who}:")
            lines += _table(KPI_ROWS[:1] + KPI_ROWS[2:], r.get("breakdown") or {}, "     ")
            if r.get("steps"):
                lines.append("     per step (GPU time):")
                lines += _table(STEP_ROWS, r["steps"], "       ")
    noise = diff.get("noise") or {}
    kernels = diff.get("kernels") or []
    lines.append("")
    lines.append(f"== kernels that changed beyond the noise floor ({len(kernels)}; "
                 f"{noise.get('kernels_below_noise', 0)} within {noise.get('pct', 0):g}% or {ms(noise.get('abs_ns'))})")
    for k in kernels[:KERNELS_SHOWN]:
        pct = f"{k['delta_pct']:+.1f}%" if k.get("delta_pct") is not None else "new"
        lines.append(f"   {'+' if k['delta_ns'] >= 0 else '-'}{ms(abs(k['delta_ns'])):>13} {pct:>8}  "
                     f"x{k['base_count']:,} -> x{k['head_count']:,}  {_clip(k['name'], 70)}")
    if len(kernels) > KERNELS_SHOWN:
        lines.append(f"   ... {len(kernels) - KERNELS_SHOWN} more (--format json lists them)")
    for title, key in (("new findings in B", "new_findings"), ("findings resolved in B", "resolved_findings")):
        found = diff.get(key) or []
        lines.append("")
        lines.append(f"== {title} ({len(found)})")
        for f in found[:FINDINGS_SHOWN]:
            rank = f" rank {f['rank']}" if f.get("rank") is not None else ""
            lines.append(f"   [{f.get('severity')}] {f.get('rule_id')}{rank} {ms(f.get('impact_ns'))}  "
                         f"{_clip(f.get('title') or '', 80)}")
        if len(found) > FINDINGS_SHOWN:
            lines.append(f"   ... {len(found) - FINDINGS_SHOWN} more (--format json lists them)")
    if diff.get("gate"):
        lines.append("")
        lines.append("== --fail-on")
        for g in diff["gate"]:
            seen = "n/a" if g["observed"] is None else f"{g['observed']:+.3f}{g['unit']}"
            lines.append(f"   {g['status'].upper():<13} {g['check']:<24} observed {seen}")
    return "\n".join(lines) + "\n"
