"""KRN004 launch shapes that cannot fill the GPU, and KRN005 one kernel that takes most of the GPU time."""

from __future__ import annotations

import re
import shlex
from typing import Any

from analysis import fmt
from analysis.diagnosis.findings import Evidence, Finding
from analysis.diagnosis.rules.base import Rule, RuleContext, Skip, Threshold
from analysis.diagnosis.rules.nsys.common import fmt_ms, pct, report_span_ns
from analysis.model.trace import Trace
from analysis.results import DominantKernelExtra, LaunchShapeExtra

WARP = 32  # threads per warp on every CUDA GPU so far



def kernel_groups(trace: Trace) -> list[tuple]:
    """The window's kernels grouped by process, device, base name, category and launch shape: (pid, device,
    kname, category, blocks, threads, launches, ns, first_start, last_end, last_start). One scan of the
    kernel table for both rules (kept in the trace's memo); a few rows per kernel name."""
    got = trace.memo.get("kernel_shape_groups")
    if got is None:
        got = trace.sql("""
            SELECT pid, device, COALESCE(short_name, name) AS kname, category,
                   grid_x::BIGINT * grid_y * grid_z AS blocks, block_x::BIGINT * block_y * block_z AS threads,
                   COUNT(*), SUM(end_ns - start_ns), MIN(start_ns), MAX(end_ns), MAX(start_ns)
            FROM kernels WHERE end_ns > start_ns
            GROUP BY pid, device, kname, category, blocks, threads""")
        trace.memo["kernel_shape_groups"] = got
    return got


def sm_counts(trace: Trace) -> dict[tuple[Any, Any], int]:
    """(device, pid) -> SM count from TARGET_INFO_GPU; pid None: the rows that hold for every process."""
    if not trace.has_rows("devices"):
        return {}
    return {(d, p): int(sm) for d, p, sm in trace.sql(
        "SELECT device, pid, MAX(sm_count) FROM devices WHERE sm_count > 0 GROUP BY device, pid")}


def used_share(blocks: int, threads: int, sm: int) -> float:
    """The share of the GPU's SM lanes a launch of this shape can keep busy: at most one SM per block (a
    block never spans SMs), and a block of fewer than 32 threads leaves the rest of its only warp idle."""
    return min(blocks, sm) / sm * min(threads, WARP) / WARP


class SmallGrid(Rule):
    """Launch shapes that cannot fill the GPU: grids with fewer blocks than the GPU has SMs, or blocks
    smaller than one warp.

    *Why it matters*: a block runs on one SM, so a grid of 1 block on a 28-SM GPU leaves 27 SMs idle
    however "busy" the timeline looks; a block of 1 thread leaves 31 of its warp's 32 lanes idle. Busy
    time then says nothing about how much of the GPU works.

    *How it is detected*: compute kernels (NCCL kernels use few blocks by design) in the window, their
    grid (``gridX*gridY*gridZ`` blocks) and block (threads) from the kernel table, the SM count of their
    GPU from ``TARGET_INFO_GPU``. A launch is small when its blocks are fewer than the SMs or its threads
    fewer than a warp. Its cost is its time times the share of the SM lanes it leaves unused:
    ``time * (1 - min(blocks, SMs) / SMs * min(threads, 32) / 32)``. The assumption: the kernel's work
    would spread over the whole GPU if it were launched wide enough (an upper bound of the gain; work
    that is serial by nature gains less). Reported when the cost is at least ``min_cost_pct`` of the
    window's compute kernel time. Skipped when the export lacks the SM count or the launch shapes.
    """

    id = "KRN004"
    extra_type = LaunchShapeExtra
    name = "kernel.small-grid"
    verdict_kind = "launch_shape"
    next_step = "launch at least as many blocks as SMs, blocks of 64+ threads"
    busy_role = "launch_shape"
    premise = "the kernel's duration grows as its grid shrinks"
    category = "kernel"
    requires = ("kernels",)
    thresholds = {
        "min_cost_pct": Threshold(5.0, "%", "report when the unused share of the GPU costs at least this share "
                                            "of the window's compute kernel time", minimum=0.0, maximum=100.0),
    }
    summary = "Kernels launched with fewer blocks than SMs or blocks under a warp"
    advice = (
        "Launch at least as many blocks as the GPU has SMs (several per SM) with blocks of 64-128 threads"
        " or more; for OpenACC/OpenMP check the compiler's parallelization report (-Minfo=accel): a loop "
        "compiled serial runs as one thread. ncu's Launch Statistics section confirms the shape.")

    def check_report(self, trace: Trace, ctx: RuleContext) -> list[Finding]:
        groups = kernel_groups(trace)
        if not any(g[4] is not None and g[5] is not None for g in groups):
            raise Skip("the kernel table has no grid or block sizes (an older export): nothing to judge shapes by")
        sms = sm_counts(trace)
        if not sms:
            raise Skip("the export has no SM count of its GPUs (TARGET_INFO_GPU): nothing to compare grids with")
        compute = [g for g in groups if g[3] == "compute"]
        kernel_ns = sum(int(g[7]) for g in compute)
        merged: dict[tuple, list[int]] = {}  # a shape's launches, time, first start and last end
        for pid, device, kname, _, blocks, threads, launches, ns, first, last, _ in compute:
            sm = sms.get((device, pid), sms.get((device, None)))
            if blocks is None or threads is None or blocks <= 0 or threads <= 0 or sm is None:
                continue
            if blocks < sm or threads < WARP:
                acc = merged.setdefault((pid, device, kname, int(blocks), int(threads), sm), [0, 0, int(first), 0])
                acc[0] += int(launches)
                acc[1] += int(ns)
                acc[2] = min(acc[2], int(first))
                acc[3] = max(acc[3], int(last))
        shapes = []
        for (pid, device, kname, blocks, threads, sm), (launches, ns, first, last) in merged.items():
            used = used_share(blocks, threads, sm)
            shapes.append((int(round(ns * (1.0 - used))), pid, device, kname, blocks, threads, sm, launches, ns,
                           first, last, used))
        total = sum(s[0] for s in shapes)
        if not shapes or total <= 0 or total < ctx.params["min_cost_pct"] / 100.0 * kernel_ns:
            return []
        shapes.sort(key=lambda s: (-s[0], s[9]))
        small_ns = sum(s[8] for s in shapes)
        top = shapes[0]
        evidence = tuple(
            Evidence(start_ns=first, end_ns=last, device=device, pid=pid, rank=trace.rank, name=kname, value_ns=cost,
                     detail={"blocks": blocks, "threads_per_block": threads, "sm_count": sm, "launches": launches,
                             "kernel_ns": ns, "used_pct": round(100.0 * used, 3)})
            for cost, pid, device, kname, blocks, threads, sm, launches, ns, first, last, used in shapes[:20])
        share = pct(total, report_span_ns(trace))
        holds, premise = grid_premise(compute, top[1], top[2], top[3])
        return [Finding(
            rule_id=self.id,
            title=(f"Launch shape cannot fill the GPU: {top[3]} runs {fmt.count(top[4])} block(s) of {fmt.count(top[5])} thread(s) "
                   f"on {fmt.count(top[6])} SMs" + ("" if holds else f" ({premise})")),
            message=(f"{fmt.count(len(shapes))} kernel shape(s) with fewer blocks than SMs or blocks under a warp ran "
                     f"{fmt_ms(small_ns)} ({fmt.pct(pct(small_ns, kernel_ns) or 0)} of compute kernel time); the SM "
                     f"lanes they left unused cost {fmt_ms(total)} (time x unused share, assuming the work would "
                     f"spread over the whole GPU). Largest: {top[3]}, {fmt.count(top[7])} launch(es), {fmt_ms(top[8])}, at "
                     f"most {fmt.pct(100.0 * top[11])} of the GPU used. Premise ({self.premise}): "
                     + ("holds, " if holds else "does not hold, ") + premise + "."),
            impact_ns=total, impact_pct=share,
            advice=self.advice if holds else (
                "The grid is not what limits this kernel (its duration does not shrink as its grid grows): profile "
                "it with ncu before widening the launch."),
            evidence=evidence, evidence_total=len(shapes), report=trace.label, rank=trace.rank,
            extra=LaunchShapeExtra(small_kernel_ns=small_ns, compute_kernel_ns=kernel_ns, premise_holds=holds,
                                              premise=premise),
        )]


FLAT = 0.8  # a per-launch duration at the widest grid above this share of the narrowest grid's is flat


def grid_premise(compute: list[tuple], pid: Any, device: Any, kname: str) -> tuple[bool, str]:
    """KRN004's premise on the evidence: the same kernel (process, device, name) across the grid sizes it ran
    with. With several, the mean time per launch at the widest grid must be clearly below the narrowest's (the
    grid limits it); flat means it does not. With one grid size nothing compares, and the shape alone bounds the
    SMs that can work (the premise is taken as holding, and said so)."""
    per: dict[int, list[int]] = {}
    for p, d, k, _, blocks, _, launches, ns, *_ in compute:
        if (p, d, k) == (pid, device, kname) and blocks and launches:
            acc = per.setdefault(int(blocks), [0, 0])
            acc[0] += int(ns)
            acc[1] += int(launches)
    if len(per) < 2:
        return True, "one grid size, so the shape alone bounds the SMs that can work"
    lo, hi = min(per), max(per)
    t_lo, t_hi = per[lo][0] / per[lo][1], per[hi][0] / per[hi][1]
    if t_hi < FLAT * t_lo:
        return True, (f"grid {fmt.count(lo)}-{fmt.count(hi)} blocks, {fmt_ms(int(t_lo))} per launch at {fmt.count(lo)} and "
                      f"{fmt_ms(int(t_hi))} at {fmt.count(hi)}: the grid limits it")
    what = "duration flat" if t_hi <= t_lo / FLAT else "duration does not shrink as the grid grows"
    return False, (f"grid {fmt.count(lo)}-{fmt.count(hi)} blocks, {what} ({fmt_ms(int(t_lo))} per launch at {fmt.count(lo)}, "
                   f"{fmt_ms(int(t_hi))} at {fmt.count(hi)}): not grid-bound")


class DominantKernel(Rule):
    """One kernel (by name) takes at least half of a GPU's kernel time: the first thing to profile.

    *Why it matters*: when one kernel is most of the GPU's work, making it faster is the largest lever,
    and only a kernel profiler (Nsight Compute) says why it is slow; the timeline cannot.

    *How it is detected*: per device, kernel time in the window grouped by the kernel's base name (nsys'
    short name, so template instances count together); a compute kernel at ``min_share_pct`` or more of
    its device's kernel time (NCCL kernels included in the whole) is dominant. NCCL kernels are never the
    one to profile: their time is the network's and the other ranks'. Impact: its time on the devices it dominates (the time at stake,
    not a measured saving). The finding gives the ncu command that profiles one representative launch:
    ``--kernel-name`` with the base name (``regex:`` and escaped when it is not a plain identifier),
    ``--launch-skip N`` where N is the number of its launches before the analysis window (start-up and
    warm-up launches pay lazy module loading, cold caches and clocks ramping up), at least 1 when it has
    several launches so the first one is never the one profiled, ``--launch-count 1`` and ``--set full``.
    """

    id = "KRN005"
    extra_type = DominantKernelExtra
    name = "kernel.dominant"
    verdict_kind = None  # the GPU-bound verdict speaks for it (its ncu command)
    stands_for = "gpu_bound_kernel"
    busy_role = "dominant_kernel"
    leads_idle = False  # a busy GPU's verdict: never the cause of an idle one
    next_step = ""
    category = "kernel"
    requires = ("kernels",)
    thresholds = {
        "min_share_pct": Threshold(50.0, "%", "a kernel at least this share of its device's kernel time dominates",
                                   minimum=0.0, maximum=100.0),
    }
    summary = "One kernel takes most of the GPU time: profile it with ncu"
    advice = (
        "Profile that kernel with ncu (the command given) and follow its memory and compute findings; "
        "fusing or tuning anything else cannot gain more than the rest of the GPU time.")

    def check_report(self, trace: Trace, ctx: RuleContext) -> list[Finding]:
        device_ns: dict[Any, int] = {}
        per: dict[tuple, list] = {}  # (device, kname) of compute kernels -> [ns, launches, first, last start, pid]
        for pid, device, kname, category, _, _, launches, ns, first, _, last_start in kernel_groups(trace):
            device_ns[device] = device_ns.get(device, 0) + int(ns)
            if category != "compute":
                continue
            acc = per.setdefault((device, kname), [0, 0, int(first), int(last_start), pid])
            acc[0] += int(ns)
            acc[1] += int(launches)
            acc[2] = min(acc[2], int(first))
            acc[3] = max(acc[3], int(last_start))
            if pid is not None and (acc[4] is None or pid < acc[4]):
                acc[4] = pid
        share_min = ctx.params["min_share_pct"] / 100.0
        rows = sorted(((device, kname, v[0], device_ns[device], v[1], v[2], v[3], v[4])
                       for (device, kname), v in per.items() if v[0] >= share_min * device_ns[device] > 0),
                      # ties by device and process: the order must not depend on where the clock starts
                      key=lambda r: (-r[2], r[1], -1 if r[0] is None else r[0], -1 if r[7] is None else r[7]))
        if not rows:
            return []
        kname = rows[0][1]
        mine = [r for r in rows if r[1] == kname]
        ns = sum(int(r[2]) for r in mine)
        total_ns = sum(int(r[3]) for r in mine)
        launches = sum(int(r[4]) for r in mine)
        share = 100.0 * ns / total_ns
        pid = mine[0][7]
        # A kernel is its full (demangled) name, template arguments included: a base name shared by several
        # instances is one template family, and "one kernel dominates" holds only if one instance does.
        inst = instances(trace, kname, [r[0] for r in mine])
        top_name, top_ns, top_launches = inst[0] if inst else (kname, ns, launches)
        family = len(inst) > 1 and top_ns < share_min * total_ns
        if len(inst) > 1 and not family:  # one instance dominates: it is the kernel, with its own time
            kname, ns, launches, share = top_name, top_ns, top_launches, 100.0 * top_ns / total_ns
        if len(inst) > 1:
            before = launches_before_window(trace, top_name, pid, full=True)
            skip = before or (1 if top_launches > 1 else 0)
            command = ncu_command(top_name, skip, process_name(trace, pid), full=True)
        else:
            before = launches_before_window(trace, kname, pid)
            skip = before or (1 if launches > 1 else 0)
            command = ncu_command(kname, skip, process_name(trace, pid))
        evidence = tuple(
            Evidence(start_ns=int(r[5]), end_ns=int(r[6]), device=r[0], pid=r[7], rank=trace.rank, name=r[1],
                     value_ns=int(r[2]), detail={"share_pct": round(100.0 * int(r[2]) / int(r[3]), 3),
                                                 "launches": int(r[4])})
            for r in mine)
        top_share = 100.0 * top_ns / total_ns
        why_skip = ("its launches before the analysis window (start-up, warm-up) are skipped" if before else
                    "the first launch pays lazy module loading and cold caches" if skip else "its only launch")
        if family:
            title = (f"One template family is {fmt.pct(share)} of GPU time: {kname} ({fmt.count(len(inst))} instances, "
                     f"the costliest {fmt.pct(top_share)})")
            message = (f"{kname} is {fmt.count(len(inst))} different kernels (template instances), together {fmt_ms(ns)} in "
                       f"{fmt.count(launches)} launch(es), {fmt.pct(share)} of the kernel time of the device(s) they run on; no "
                       f"single instance dominates (the costliest, {top_name}, is {fmt_ms(top_ns)}, "
                       f"{fmt.pct(top_share)}). Profile the costliest instance with Nsight Compute: {command}  "
                       f"(--launch-skip {skip}: {why_skip}), then the next ones: each instance is its own code.")
        else:
            title = f"One kernel is {fmt.pct(share)} of GPU time: {kname}"  # kname: the instance when there are several
            message = (f"{kname} runs {fmt_ms(ns)} in {fmt.count(launches)} launch(es), {fmt.pct(share)} of the kernel time of "
                       f"the device(s) it runs on. Profile it with Nsight Compute: {command}  (--launch-skip {skip}: "
                       f"{why_skip}).")
        return [Finding(
            rule_id=self.id,
            title=title,
            message=message,
            impact_ns=ns, impact_pct=pct(ns, report_span_ns(trace)),
            advice=(f"Profile this kernel first: {command}. Its memory and compute sections say whether it is "
                    "memory- or compute-bound; nothing else on this GPU can gain as much."),
            evidence=evidence, evidence_total=len(mine), report=trace.label, rank=trace.rank,
            extra=DominantKernelExtra(
                kernel=kname, share_pct=round(share, 3), launches=launches, ncu_command=command, launch_skip=skip,
                instances=max(1, len(inst)), is_family=family, instance=top_name,
                instance_share_pct=round(top_share, 3)),
        )]


def instances(trace: Trace, kname: str, devices: list[Any]) -> list[tuple[str, int, int]]:
    """The distinct kernels (full names: template instances) under one base name on ``devices``, costliest
    first: (name, ns, launches)."""
    acc: dict[str, list[int]] = {}
    for n, device, t, c in trace.sql("""
            SELECT COALESCE(name, short_name) AS n, device, SUM(end_ns - start_ns)::BIGINT, COUNT(*)
            FROM kernels WHERE COALESCE(short_name, name) = $k AND end_ns > start_ns AND category = 'compute'
            GROUP BY n, device""", {"k": kname}):
        if device in devices:
            v = acc.setdefault(str(n), [0, 0])
            v[0] += int(t)
            v[1] += int(c)
    rows = sorted(((n, t, c) for n, (t, c) in acc.items()), key=lambda r: (-r[1], r[0]))
    return rows


def launches_before_window(trace: Trace, kname: str, pid: Any, *, full: bool = False) -> int:
    """How many launches of ``kname`` (in process ``pid``; ``full``: by full name, one template instance) start
    before the trace's analysis window."""
    info = trace.memo.get("phase_info")
    base = getattr(info, "base", None)
    if trace.window is None or base is None:
        return 0
    col = "COALESCE(name, short_name)" if full else "COALESCE(short_name, name)"
    return int(base.scalar(
        f"SELECT COUNT(*) FROM kernels WHERE {col} = $n AND pid IS NOT DISTINCT FROM $pid "  # noqa: S608 - constants
        "AND start_ns < $lo", {"n": kname, "pid": pid, "lo": int(trace.window[0])}) or 0)


def process_name(trace: Trace, pid: Any) -> str | None:
    if pid is None or not trace.has_rows("processes"):
        return None
    name = trace.scalar("SELECT MIN(name) FROM processes WHERE pid = $pid", {"pid": int(pid)})
    return str(name) if name else None


def ncu_command(kname: str, skip: int, app: str | None, *, full: bool = False) -> str:
    """The ncu command line that profiles one launch of ``kname`` after ``skip`` launches of it (shell-quoted);
    ``full``: ``kname`` is one template instance's demangled name, matched as such (``--kernel-name-base
    demangled``)."""
    plain = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", kname) is not None
    name = kname if plain else f"regex:^{re.escape(kname)}$"
    out = re.sub(r"[^A-Za-z0-9_.-]+", "_", kname)[:60] or "kernel"
    base = "--kernel-name-base demangled " if full else ""
    return (f"ncu {base}--kernel-name {shlex.quote(name)} --launch-skip {skip} --launch-count 1 --set full "
            f"-o {shlex.quote(out)} {shlex.quote(app) if app else '<app>'} [args]")
