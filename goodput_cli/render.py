"""Plain-text rendering of an analysis result for the terminal."""

from __future__ import annotations

from typing import Any


def ms(ns: int | float | None) -> str:
    if ns is None:
        return "-"
    return f"{ns / 1e6:,.3f} ms"


def human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:,.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    return f"{n} B"


def _printable(text: str) -> str:
    """Trace strings are untrusted: control characters (terminal escapes) are shown escaped, not sent."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def _clip(text: str, width: int = 90) -> str:
    text = _printable(" ".join(str(text).split()))
    return text if len(text) <= width else text[: width - 1] + "…"


def text(result: dict[str, Any]) -> str:
    lines: list[str] = []
    for rep in result["reports"]:
        lines.append(_printable(
            f"== {rep.get('file')}  [{rep.get('tool')} {rep.get('tool_version') or 'version unknown'}]"))
        who = []
        if rep.get("host"):
            who.append(f"host {rep['host']}")
        if rep.get("rank") is not None:
            who.append(f"rank {rep['rank']}/{rep.get('world_size') or '?'}")
        devices = rep.get("devices") or []
        if devices:
            who.append("GPUs: " + ", ".join(f"[{d['id']}] {d.get('name') or '?'}" for d in devices))
        if who:
            lines.append(_printable("   " + "; ".join(who)))
        counts = rep.get("counts", {})
        lines.append("   " + ", ".join(f"{k} {v:,}" for k, v in counts.items()))
        if rep.get("tool") == "nsys":
            lines.append(f"   span {ms(rep.get('span_ns'))}, GPU kernel time {ms(rep.get('gpu_time_ns'))}, "
                         f"copied {human_bytes(rep.get('memcpy_bytes'))}")
        bd = rep.get("breakdown")
        if bd and bd.get("span_ns"):
            devs = bd.get("devices") or []
            over = f" over {len(devs)} device spans" if len(devs) > 1 else ""
            lines.append(
                f"   goodput {bd.get('goodput_pct', 0):.1f}%{over} ({ms(bd['span_ns'])}) | compute {ms(bd['compute_ns'])}"
                f" (comm overlapped {ms(bd['comm_overlapped_ns'])}), exposed comm {ms(bd['comm_exposed_ns'])}, "
                f"memory-only {ms(bd['memory_only_ns'])}, idle {ms(bd['idle_ns'])}")
            if len(devs) > 1:
                for d in devs:
                    lines.append(
                        f"     pid {d['pid']} device {d['device']}: goodput {d['goodput_pct']:.1f}% of "
                        f"{ms(d['span_ns'])}, exposed comm {ms(d['comm_exposed_ns'])}, idle {ms(d['idle_ns'])}")
        it = rep.get("iterations") or {}
        if it.get("range"):
            spread = it.get("spread_pct", it.get("cv_pct"))
            share = f", {it['gpu_share_pct']:.0f}% of GPU work" if it.get("gpu_share_pct") is not None else ""
            # No spread when the steps have no GPU time (a host-only report): the wall times say more.
            spread_text = f"p90-p10 spread {spread:.1f}% of median" if spread is not None else "no GPU time"
            lines.append(f"   iterations: {it['count']} x NVTX '{_clip(it['range'], 40)}'{share}, GPU median "
                         f"{ms(it['median_ns'])} (min {ms(it['min_ns'])}, max {ms(it['max_ns'])}, {spread_text})")
            if spread is None and it.get("wall_median_ns") is not None:
                lines.append(f"     wall median {ms(it['wall_median_ns'])} (min {ms(it.get('wall_min_ns'))}, "
                             f"max {ms(it.get('wall_max_ns'))})")
        elif rep.get("tool") == "nsys" and it.get("reason"):
            lines.append(f"   iterations: {it['reason']}")
        kernels = rep.get("top_kernels") or []
        if kernels:
            lines.append("   top kernels by total time:")
            for k in kernels:
                lines.append(f"     {ms(k['total_ns']):>14}  x{k['count']:<7,} median {ms(k['median_ns'])}  "
                             f"{_clip(k['name'], 70)}")
        copies = rep.get("memcpy_by_kind") or []
        if copies:
            lines.append("   memcpy by kind:")
            for c in copies:
                lines.append(f"     {c['kind']:<9} x{c['count']:<7,} {human_bytes(c['bytes']):>12}  {ms(c['total_ns'])}")
        lines.append("")
    findings = result.get("findings", [])
    if findings:
        lines.append(f"== findings, costliest first ({len(findings)})")
        for i, f in enumerate(findings, 1):
            pct = f" ({f['impact_pct']:.1f}%)" if f.get("impact_pct") is not None else ""
            lines.append(f"{i:>3}. [{f['severity']}] {f['rule_id']} {ms(f['impact_ns'])}{pct}  {_clip(f['title'], 80)}")
            lines.append(f"     {_clip(f['message'], 110)}")
            if f.get("evidence"):
                e = f["evidence"][0]
                where = []
                if e.get("start_ns") is not None:
                    where.append(f"at {ms(e['start_ns'])}")
                for key in ("rank", "device", "stream", "pid"):
                    if e.get(key) is not None:
                        where.append(f"{key} {e[key]}")
                if e.get("name"):
                    where.append(_clip(e["name"], 50))
                if e.get("nvtx"):
                    where.append(f"in NVTX '{_clip(e['nvtx'], 30)}'")
                lines.append(f"     e.g. {', '.join(where)}  ({f.get('evidence_total', 0)} in all)")
            lines.append(f"     → {_clip(f['advice'], 110)}")
    elif result.get("rules"):
        lines.append("== no findings")
    skipped = [r for r in result.get("rules", []) if r["status"] != "ok"]
    if skipped:
        lines.append("")
        lines.append("== rules not run")
        for r in skipped:
            lines.append(f"   {r['id']} {r['status']}: {_clip(r.get('reason') or '', 100)}")
    return "\n".join(lines) + "\n"
