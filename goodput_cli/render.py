"""Plain-text rendering of an analysis result for the terminal."""

from __future__ import annotations

from typing import Any

from analysis import fmt
from analysis.readers import ToolKind
from goodput_cli.render_idle import idle_lines
from goodput_cli.render_memory import headline_lines, memory_lines
from goodput_cli.render_nccl import path_lines
from goodput_cli.render_run import collectives_lines, network_lines, per_rank_line, warning_lines


def ms(ns: int | float | None) -> str:
    """A duration for the terminal (the name stays from when every duration was written in ms)."""
    return "-" if ns is None else fmt.duration(ns)


def human_bytes(n: int | None) -> str:
    return "-" if n is None else fmt.size(n)


def _printable(text: str) -> str:
    """Trace strings are untrusted: control characters (terminal escapes) are shown escaped, not sent."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def _clip(text: str, width: int = 90) -> str:
    text = _printable(" ".join(str(text).split()))
    return text if len(text) <= width else text[: width - 1] + "…"


_LOOP_SOURCES = {"nvtx": "NVTX ranges", "kernel_pattern": "the repeating GPU work", "host_sync": "host synchronisations"}


def _judged_loop_line(lp: dict[str, Any], it: dict[str, Any]) -> str:
    """The "iterations:" line of loop ``lp`` (``iterations.loops``), the window's, with the main loop named beside."""
    sig = ", ".join(_clip(k, 30) for k in (lp.get("signature") or [])[:3])
    main = next((x for x in it.get("loops") or [] if x.get("main")), None)
    beside = f"; the main loop is loop {main['index']} ({fmt.count(main.get('count'))} iterations)" if main else ""
    return (f"   iterations: loop {lp['index']} of {fmt.count(len(it.get('loops') or []))}, {fmt.count(lp.get('count'))} from "
            f"{_LOOP_SOURCES.get(str(lp.get('source')), str(lp.get('source')))}{f' ({sig}...)' if sig else ''}, median "
            f"{ms(lp.get('median_ns'))} per step (p10 {ms(lp.get('p10_ns'))}, p90 {ms(lp.get('p90_ns'))}, "
            f"p99 {ms(lp.get('p99_ns'))}){beside}")


def _loop_lines(rep: dict[str, Any]) -> list[str]:
    """Window, phases, iterations and the per-step anatomy of one nsys report."""
    lines: list[str] = []
    win = rep.get("window") or {}
    if win:
        where = "" if win.get("start_ns") is None else f" {ms(win['start_ns'])} to {ms(win['end_ns'])}"
        lines.append(_printable(f"   window {win.get('spec')}: {win.get('phase')}{where} ({_clip(win.get('reason') or '', 70)})"))
    phases = rep.get("phases") or []
    if phases:
        lines.append("   phases: " + ", ".join(f"{p['name']} {ms(p['end_ns'] - p['start_ns'])}" for p in phases))
    it = rep.get("iterations") or {}
    ana = it.get("anatomy") or {}
    # Under loop:N the anatomy is loop N's (``anatomy.loop``), its step times beside it; else the main loop's.
    judged = next((lp for lp in it.get("loops") or [] if ana.get("loop") is not None and lp.get("index") == ana["loop"]),
                  None)
    if judged is not None and not judged.get("main"):  # the window is another loop than the main one: describe it
        lines.append(_judged_loop_line(judged, it))
    elif it.get("source") == "nvtx":
        spread = it.get("spread_pct", it.get("cv_pct"))
        share = f", {fmt.share(it['gpu_share_pct'])} of GPU work" if it.get("gpu_share_pct") is not None else ""
        # No spread when the steps have no GPU time (a host-only report): the wall times say more.
        spread_text = f"p90-p10 spread {fmt.pct(spread)} of median" if spread is not None else "no GPU time"
        lines.append(f"   iterations: {fmt.count(it['count'])} x NVTX '{_clip(it['range'], 40)}'{share}, GPU median "
                     f"{ms(it['median_ns'])} (min {ms(it['min_ns'])}, max {ms(it['max_ns'])}, {spread_text})")
        if spread is None and it.get("wall_median_ns") is not None:
            lines.append(f"     wall median {ms(it['wall_median_ns'])} (min {ms(it.get('wall_min_ns'))}, "
                         f"max {ms(it.get('wall_max_ns'))})")
    elif it.get("source"):
        sig = ", ".join(_clip(k, 30) for k in (it.get("signature") or [])[:3])
        lines.append(f"   iterations: {fmt.count(it['count'])} from the repeating GPU work ({fmt.count(it['detail'].get('period_ops'))} "
                     f"operations each: {sig}...), median {ms(it['median_ns'])} per step "
                     f"(p10 {ms(it['p10_ns'])}, p90 {ms(it['p90_ns'])}, p99 {ms(it['p99_ns'])})")
    elif rep.get("tool") == ToolKind.NSYS and it.get("reason"):
        lines.append(f"   iterations: {_clip(it['reason'], 200)}")
    if ana.get("kind") == "host_paced":
        lat = ana.get("latency") or {}
        lines.append(f"   host-paced loop: {fmt.number(ana.get('per_second'))} iterations/s, GPU duty cycle "
                     f"{fmt.pct(ana['gpu_duty_cycle_pct'])}; per iteration: launch {ms(lat.get('launch_ns'))}, queue "
                     f"delay {ms(lat.get('queue_delay_ns'))}, GPU {ms(lat.get('gpu_exec_ns'))}, copies "
                     f"{ms(lat.get('copies_ns'))}, sync {ms(lat.get('sync_ns'))}")
    if ana and ana.get("kind") != "host_paced":
        steps = "steady steps" if judged is None else f"loop {judged['index']} steps"
        lines.append(f"   {steps}: {fmt.count(ana['steady_count'])}, median {ms(ana['iteration_median_ns'])} per step, "
                     f"jitter (p90-p10) {fmt.pct(ana.get('jitter_pct') or 0)}, GPU busy {fmt.pct(ana['gpu_duty_cycle_pct'])}")
    dist = (ana.get("iteration_time") if judged is not None else None) or it.get("iteration_time") or {}
    if ana and dist:
        lines.append(f"   step time: p10 {ms(dist.get('p10_ns'))}, median {ms(dist.get('median_ns'))}, p90 "
                     f"{ms(dist.get('p90_ns'))}, p99 {ms(dist.get('p99_ns'))}, max {ms(dist.get('max_ns'))} "
                     f"({fmt.count((judged or it).get('count'))} iterations{'' if judged is None else ' of loop ' + str(judged['index'])})")
    for step in (ana.get("slowest_steps") or [])[:3]:
        last = f"; rank finishing it last: {_printable(str(step['last']))}" if step.get("last") else ""
        lines.append(f"     slow step {step['index']}: {ms(step['ns'])} (+{ms(step['extra_ns'])} over the median)"
                     f": {step['cause']}{last}")
    return lines


def text(result: dict[str, Any]) -> str:
    lines: list[str] = []
    verdict = result.get("verdict")
    if verdict:  # what bounds the run and what to do first, before everything else
        lines.append(_printable(f"Verdict: {verdict['text']} Next: {verdict['next_step']}."))
    lines.extend(_printable(x) for x in warning_lines(result))
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
        for part in rep.get("degraded") or []:
            cols = ", ".join(map(str, part.get("columns") or []))
            lines.append(_printable(f"   degraded: {part.get('table')} lacks {cols}: {part.get('effect')}"))
        counts = rep.get("counts", {})
        lines.append("   " + ", ".join(f"{k} {fmt.count(v)}" for k, v in counts.items()))
        lines.extend(_printable(line) for line in headline_lines(rep, verdict))  # kernel names: untrusted
        if rep.get("tool") == ToolKind.NSYS:
            lines.append(f"   span {ms(rep.get('span_ns'))}, GPU kernel time {ms(rep.get('gpu_time_ns'))}, "
                         f"copied {human_bytes(rep.get('memcpy_bytes'))}")
        bd = rep.get("breakdown")
        if bd and bd.get("span_ns"):
            devs = bd.get("devices") or []
            over = f" over {fmt.count(len(devs))} device spans" if len(devs) > 1 else ""
            lines.append(
                f"   goodput {fmt.pct(bd.get('goodput_pct', 0))}{over} ({ms(bd['span_ns'])}) | compute {ms(bd['compute_ns'])}"
                f" (comm overlapped {ms(bd['comm_overlapped_ns'])}), exposed comm {ms(bd['comm_exposed_ns'])}, "
                f"memory-only {ms(bd['memory_only_ns'])}, idle {ms(bd['idle_ns'])}")
            if len(devs) > 1:
                for d in devs:
                    lines.append(
                        f"     pid {d['pid']} device {d['device']}: goodput {fmt.pct(d['goodput_pct'])} of "
                        f"{ms(d['span_ns'])}, exposed comm {ms(d['comm_exposed_ns'])}, idle {ms(d['idle_ns'])}")
        lines.extend(idle_lines(rep, _clip))
        lines.extend(_loop_lines(rep))
        kernels = rep.get("top_kernels") or []
        dominant = rep.get("dominant_kernel")
        if dominant:
            lines.append(f"   one kernel dominates: {fmt.pct(dominant['share_pct'])} of kernel time in "
                         f"{_clip(dominant['name'], 70)} (x{fmt.count(dominant['count'])})")
        if kernels:
            lines.append("   top kernels by total time:")
            for k in kernels:
                lines.append(f"     {ms(k['total_ns']):>14}  x{k['count']:<7,} median {ms(k['median_ns'])}  "
                             f"{_clip(k['name'], 70)}")
        lines.extend(memory_lines(rep, _clip))  # ncu: per-kernel memory story
        copies = rep.get("memcpy_by_kind") or []
        if copies:
            lines.append("   memcpy by kind:")
            for c in copies:
                lines.append(f"     {c['kind']:<9} x{c['count']:<7,} {human_bytes(c['bytes']):>12}  {ms(c['total_ns'])}")
        lines.append("")
    steps = result.get("steps")
    if steps:
        last = ", ".join(f"{_printable(str(k))} {fmt.count(v)}" for k, v in steps["last"].items())
        lines.append(f"== ranks per step: {fmt.count(steps['count'])} steps; finished last: {last}; median spread "
                     f"{ms(steps['spread_median_ns'])} per step")
        lines.append("")
    lines.extend(_printable(x) for x in [*collectives_lines(result, ms), *network_lines(result, human_bytes, ms)])
    lines.extend(path_lines(result, _clip))  # the NCCL log's network path
    findings = result.get("findings", [])
    if findings:
        lines.append(f"== findings, costliest first ({fmt.count(len(findings))})")
        for i, f in enumerate(findings, 1):
            pct = f" ({fmt.pct(f['impact_pct'])})" if f.get("impact_pct") is not None else ""
            phase = f" [{f['phase']}]" if f.get("phase") else ""
            impact = ms(f["impact_ns"]) if f.get("kernel_time_ns", 0) is not None else "unknown"  # ncu: no duration
            if f.get("impact_per_step_ns") is not None and f.get("steps_in_window"):
                # The window is a stretch of the loop: the cost of each step is the natural unit.
                impact = f"{ms(f['impact_per_step_ns'])} per step"
                phase = f" [{f.get('phase') or 'window'}, {fmt.count(f['steps_in_window'])} steps: {ms(f['impact_ns'])}]"
            lines.append(f"{i:>3}. [{f['severity']}] {f['rule_id']} {impact}{pct}{phase}  {_clip(f['title'], 80)}")
            lines.append(f"     {_clip(f['message'], 110)}")
            lines.extend(_printable(x) for x in per_rank_line(f, ms))
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
                lines.append(f"     e.g. {', '.join(where)}  ({fmt.count(f.get('evidence_total', 0))} in all)")
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
