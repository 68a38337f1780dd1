"""GPU001 idle gaps with a cause for each, and GPU002 low-utilization windows."""

from __future__ import annotations

import numpy as np

from analysis import fmt
from analysis.diagnosis.findings import Evidence, Finding, SampledFunction
from analysis.diagnosis.idle_classes import WORDS
from analysis.diagnosis.rules.base import MAX_US, Rule, RuleContext, Threshold
from analysis.diagnosis.rules.nsys.causes import CAUSE_CODES, cause_names, launchers, owned_gap_causes
from analysis.diagnosis.rules.nsys.common import fmt_ms, nvtx_at, pct, report_span_ns
from analysis.diagnosis.rules.nsys.gaps import (
    Gap,
    low_regions,
    owned,
    owner_code,
    ownership_params,
)
from analysis.diagnosis.rules.nsys.hostcpu import functions_in
from analysis.diagnosis.rules.nsys.idle_claims import claims
from analysis.diagnosis.system_metrics import SM_METRIC_RE, sampled_during
from analysis.model.activity import top_order
from analysis.model.capture import missing as capture_missing
from analysis.model.trace import Trace
from analysis.results import IdleGapsExtra, LowUtilizationExtra

CAUSES = {
    "os_runtime": "the launching thread sat mostly in OS runtime calls (the idle inside them is HOST001's; this is "
                  "the rest of those gaps)",
    "cuda_api": "the launching thread was busy in CUDA API calls",
    "no_activity": "no CUDA or OS call on the launching thread (host busy elsewhere: data loading, Python, CPU "
                   "work)",
    "setup": "the process was setting up (CUDA context, modules, allocations, NCCL communicators)",
}
# How GPU001's message names the anatomy's categories it keeps (allocation in a loop is MEM006's).
CATEGORY_WORDS = {**WORDS, "allocation": "in allocation calls (outside a loop)"}

ADVICE = {
    "os_runtime": "The host thread that feeds the GPU was blocked in the OS (I/O, locks, sleeps). Move "
                  "that work off the launching thread or overlap it with GPU work (prefetch, async I/O).",
    "cuda_api": "The host spent the gap in CUDA API calls (allocation, launch setup). Allocate once "
                "up front (caching allocator), avoid per-step cudaMalloc/cudaFree, batch launches.",
    "no_activity": "Nothing on the launching thread explains the gap: the host was computing elsewhere "
                   "(data loading, Python, preprocessing). Add NVTX ranges to the host code, prefetch data "
                   "(more DataLoader workers, pinned memory), and queue GPU work ahead of the host.",
    # ``no_activity`` told by what the anatomy did see in that idle, when it saw something: CPU samples of the
    # launching thread, or its own NVTX ranges.
    "host_cpu": "The launching thread was computing on the CPU in these gaps (in the sampled functions the finding "
                "names): move that work off the thread that feeds the GPU (a worker thread or process, more "
                "DataLoader workers), precompute or cache it, or queue GPU work far enough ahead that the host's work "
                "overlaps it.",
    "user_range": "The idle passes inside the program's own NVTX ranges, with no CUDA or OS call: what those "
                  "ranges do on the host is what the GPU waits for (the sampled functions, when the finding names "
                  "them, show what runs in them; else sample the CPU with nsys --sample=cpu). Move that work off "
                  "the thread that feeds the GPU or overlap it with queued GPU work.",
    "setup": "The GPU waited while the process set itself up (NCCL communicator creation, CUDA context and "
             "module loading, host and device allocations): a one-off cost, not the loop's. Create communicators "
             "once, load modules lazily (CUDA_MODULE_LOADING=LAZY), allocate once up front; analyze the steady "
             "window (the default) to judge the loop itself.",
}


class IdleGaps(Rule):
    """GPU idle gaps: stretches where a device ran nothing while its process was alive.

    *Why it matters*: every idle millisecond of a GPU is paid for and produces nothing; gaps inside
    the active span usually mean the host could not feed the device fast enough.

    *How it is detected*: NVIDIA's ``gpu_gaps`` pairing per process and device (sorted operation ends
    against sorted starts, so concurrent streams are handled; profiler overhead counts as busy; idle
    before the first and after the last operation is excluded). Gaps of at least ``min_gap_us`` count,
    less the instants rules that own idle by what the host was doing take out of them (``idle_claims``:
    SYNC001 inside syncs, MEM002 inside synchronous copies, HOST001 inside OS calls, ...); a gap they take
    whole is not GPU001's, and evidence lists only gaps GPU001 keeps some of. Each gap gets a cause from its device's launching threads
    during the gap: an OS runtime call or CUDA API work covering at least half of it, else no CUDA or OS call
    (``no_activity``; its advice follows what the anatomy saw most of in the idle GPU001 keeps: CPU samples of
    the launching thread, the program's own NVTX ranges, or nothing recorded); but when set-up work of any
    thread of the process (CUDA context, module and memory set-up calls, NCCL communicator set-up ranges)
    covers at least half of it, the cause is ``setup`` (never data loading). Impact: the time GPU001 keeps of those gaps. ``by_category`` splits that time exactly by
    what the idle anatomy painted there (the categories no rule claims: nothing recorded, CPU samples, user
    ranges, launch and other CUDA calls, NCCL communicator set-up, allocation outside the loop), so the
    finding says how much of it has nothing recorded at all.

    Evidence from CPU sampling (``--sample=cpu``): when the report has CPU samples, ``host_functions``
    lists the leaf functions the launching threads were sampled in during this rule's own gaps (HOST002's
    samples, most sampled first), so the finding says where the host was.
    """

    id = "GPU001"
    extra_type = IdleGapsExtra
    gap_role = "long_gap"
    name = "gpu.idle-gaps"
    verdict_kind = "host_bound"
    next_step = ("find the host work in the gaps (NVTX ranges, CPU samples) and move it off the GPU's critical "
                 "path")
    host_work = True
    unnamed_host_work = True
    judges_pacing_idle = True
    category = "gpu"
    requires = ("kernels",)
    thresholds = {
        "min_gap_us": Threshold(1000.0, "us",
                                "smallest idle gap reported (nsys' expert system uses 500 ms)",
                                minimum=0.0, maximum=MAX_US),
    }
    summary = "GPU idle gaps inside the active span, each with a cause"
    advice = (
        "Depends on the dominant cause: overlap host I/O with GPU work, allocate memory once, or find the"
        " host work (data loading, Python) with NVTX ranges and move it off the critical path.")

    @classmethod
    def finding_kind(cls, finding: Finding) -> str | None:
        """Idle whose main cause is set-up (context, module, memory and communicator set-up calls) is start-up."""
        setup = isinstance(finding.extra, IdleGapsExtra) and finding.extra.main_cause == "setup"
        return "startup" if setup else super().finding_kind(finding)

    @classmethod
    def idle_unrecorded(cls, finding: Finding) -> bool:
        """At least half of the idle is ``none`` by its anatomy categories (``by_category``), or, without them, the
        main cause is ``no_activity`` and no sampled function is named."""
        extra = finding.extra if isinstance(finding.extra, IdleGapsExtra) else None
        cats = extra.by_category if extra is not None else None
        if cats:
            return 2 * int(cats.get("none", 0)) >= sum(int(v) for v in cats.values())
        return extra is not None and extra.main_cause == "no_activity" and not finding.host_functions

    def check_report(self, trace: Trace, ctx: RuleContext) -> list[Finding]:
        units = owned(trace, ctx.all_params, ctx.claimers)
        long_ns = int(ownership_params(ctx.all_params, ctx.claimers)["min_gap_ns"])
        tids = launchers(trace)
        by_cause: dict[str, list[int]] = {}
        whole = 0  # the gaps' full length (what GPU001 keeps of them is less where other rules claimed idle)
        cands: list[tuple[Gap, str]] = []  # the longest gaps of each device, with their causes
        mine_gaps: list[tuple[int | None, np.ndarray, np.ndarray]] = []  # GPU001's own gaps, for host_functions
        for pg in owned_gap_causes(trace, units, owner_code(type(self)), ctx.claimers, long_ns):
            gs, ge, codes = pg.gap_start, pg.gap_end, pg.cause
            mine_gaps.append((pg.pid, gs, ge))
            whole += int((ge - gs)[pg.kept > 0].sum())
            for c, name in enumerate(CAUSE_CODES):
                sel = codes == c
                sel &= pg.kept > 0  # gaps whose idle was all claimed by what the host did are not GPU001's
                if sel.any():
                    acc = by_cause.setdefault(name, [0, 0])
                    acc[0] += int(sel.sum())
                    acc[1] += int(pg.kept[sel].sum())
            at = 0
            for part in pg.parts:  # the longest gaps of each device that stay (partly) GPU001's
                ugs, uge = part.gap_start, part.gap_end
                mine = np.flatnonzero(pg.kept[at:at + len(ugs)] > 0)
                for i in mine[top_order(uge[mine] - ugs[mine], ugs[mine], 20)]:
                    cands.append((Gap(pg.pid, part.device, int(ugs[i]), int(uge[i]), int(uge[i] - ugs[i])),
                                  CAUSE_CODES[codes[at + i]]))
                at += len(ugs)
        if not by_cause:
            return []
        total = sum(v[1] for v in by_cause.values())
        n_gaps = sum(v[0] for v in by_cause.values())
        # What the host was doing in the idle GPU001 keeps (the anatomy's categories no rule claims), exactly;
        # the gaps of processes the export does not name have nothing recorded.
        by_cat = dict(claims(trace, ctx.claimers, int(ctx.params["min_gap_us"] * 1000)).long_by_category)
        unknown = sum(int(pg.kept[pg.kept > 0].sum())
                      for pg in owned_gap_causes(trace, units, owner_code(type(self)), ctx.claimers, long_ns) if pg.pid is None)
        if unknown:
            by_cat["none"] = by_cat.get("none", 0) + unknown
        by_cat = dict(sorted(by_cat.items(), key=lambda kv: (-kv[1], kv[0])))
        top_caused = sorted(cands, key=lambda gc: (-gc[0].ns, gc[0].start_ns))[:20]
        top = [g for g, _ in top_caused]
        causes_top = [c for _, c in top_caused]
        names = cause_names(trace, [(g.pid, g.start_ns, g.end_ns, c) for g, c in top_caused], tids)
        nvtx = nvtx_at(trace, [(g.pid, g.start_ns) for g in top])
        evidence = tuple(
            Evidence(start_ns=g.start_ns, end_ns=g.end_ns, device=g.device, pid=g.pid, rank=trace.rank,
                     name=name, nvtx=n, value_ns=g.ns, detail={"cause": c})
            for g, n, c, name in zip(top, nvtx, causes_top, names, strict=True))
        main = max(by_cause, key=lambda c: by_cause[c][1])
        share = pct(total, report_span_ns(trace))
        # Per cause: the idle this rule keeps, and how many gaps it lies in (a gap keeps only what no other rule
        # claims, so a cause's idle can be far below its gaps' count times the minimum gap).
        causes = "; ".join(f"{CAUSES[c].split(' (')[0]} {fmt_ms(v[1])} (in {fmt.count(v[0])} gap(s))"
                           for c, v in sorted(by_cause.items(), key=lambda kv: -kv[1][1]))
        host = _host(trace, mine_gaps)
        return [Finding(
            rule_id=self.id,
            title=f"GPU idle in {fmt.count(n_gaps)} gap(s) of at least {fmt.exact(ctx.params['min_gap_us'] / 1000)} ms",
            message=(f"{fmt.count(n_gaps)} idle gap(s) of at least {fmt.exact(ctx.params['min_gap_us'] / 1000)} ms add up to "
                     f"{fmt_ms(whole)}; longest {fmt_ms(top[0].ns)}; "
                     + (f"{fmt_ms(total)} of it stays this rule's (the rest is the idle of rules that name what the "
                        "host did in it)" if whole > total else "all of it this rule's")
                     + (f", {fmt.pct(share)} of the GPU-active span" if share is not None else "")
                     + f". Causes of the idle this rule keeps: {causes}. The host was: "
                     + ", ".join(f"{CATEGORY_WORDS.get(c, c)} {fmt_ms(v)}" for c, v in list(by_cat.items())[:4])
                     + "." + _unrecorded(trace, main, host)),
            impact_ns=total, impact_pct=share, advice=_advice(trace, _advice_key(main, by_cat)), evidence=evidence,
            evidence_total=n_gaps, report=trace.label, rank=trace.rank,
            extra=IdleGapsExtra(
                causes={c: {"count": v[0], "total_ns": v[1]} for c, v in by_cause.items()}, main_cause=main,
                by_category=by_cat),
            host_functions=host,
        )]


def _advice_key(main: str, by_cat: dict[str, int]) -> str:
    """The advice for the main cause; for ``no_activity``, what the anatomy saw most of in the idle GPU001 keeps
    when that is CPU samples or the program's NVTX ranges (else nothing recorded: the general advice)."""
    if main == "no_activity" and by_cat:
        top = max(by_cat, key=lambda c: by_cat[c])
        if top in ("host_cpu", "user_range"):
            return top
    return main


def _advice(trace: Trace, key: str) -> str:
    """``ADVICE[key]``, without asking for CPU samples when the capture took them (``analysis.model.capture``)."""
    advice = ADVICE[key]
    if "--sample=cpu" not in capture_missing(trace):
        advice = advice.replace("; else sample the CPU with nsys --sample=cpu", "")
    return advice


def _unrecorded(trace: Trace, main: str, host: list[SampledFunction] | None) -> str:
    """When nothing recorded explains most of the idle: the sampled functions, else the capture flags that
    would show what the host did."""
    if main != "no_activity":
        return ""
    if host:
        fns = ", ".join(f"{f['function']} ({fmt.share(f['share_pct'])})" for f in host[:3])
        return f" The launching threads were sampled in: {fns}."
    missing = capture_missing(trace)  # a flag already on is never asked for (analysis.model.capture)
    return (f" Nothing recorded shows what the host did: profile with {' and '.join(missing)} to see it."
            if missing else "")


def _host(trace: Trace, gaps: list) -> list[SampledFunction] | None:
    """``host_functions``: where the launching threads' CPU was in these gaps (HOST002's samples), if sampled."""
    return functions_in(trace, gaps) or None


class LowUtilization(Rule):
    """Low GPU utilization windows: stretches where the device is busy less than a set share of time.

    *Why it matters*: many small gaps, none long enough to be an idle gap, can still leave a device
    half empty; summed over a run this is often the largest waste of all.

    *How it is detected*: each device's active span is cut into windows sized to the trace
    (span / ``max_windows``, never shorter than ``window_min_us``); a window's busy share is
    one minus its idle share (idle from the same gap pairing as GPU001, profiler overhead busy).
    Windows under ``max_busy_pct`` are reported, adjacent ones merged. Impact: the idle of gaps that
    start in those windows and that no other rule owns (not sync-caused, not a blocking copy, shorter
    than GPU001's minimum, not inside a launch-bound run), so impacts never overlap.

    When the export has GPU metrics samples (``--gpu-metrics-devices=all``), ``measured_sm`` gives the SM
    activity metrics sampled in the regions shown as evidence (mean and max there, mean over the capture).
    """

    id = "GPU002"
    extra_type = LowUtilizationExtra
    gap_role = "low_utilization"
    name = "gpu.low-utilization"
    verdict_kind = "host_bound"
    next_step = "reduce per-step host overhead between kernels (fuse, CUDA graphs, queue ahead)"
    judges_pacing_idle = True
    category = "gpu"
    requires = ("kernels",)
    thresholds = {
        "max_busy_pct": Threshold(50.0, "%",
                                  "a window busier than this is not reported", minimum=0.0, maximum=100.0),
        "window_min_us": Threshold(1000.0, "us",
                                   "shortest window; longer when the span is long",
                                   minimum=1.0, maximum=MAX_US),
        "max_windows": Threshold(1000.0, "count",
                                 "at most this many windows per device span", minimum=1.0, maximum=1e6),
    }
    summary = "Windows where a GPU is busy less than half the time"
    advice = (
        "Find what the host does between kernels here (NVTX, CPU sampling): reduce per-op Python and "
        "launch overhead, fuse small kernels, or capture the loop in a CUDA graph.")
    premise = "the short gaps lie between GPU operations the host launched"

    def check_report(self, trace: Trace, ctx: RuleContext) -> list[Finding]:
        # Adjacent low windows merge into regions; the gaps no other rule owns that start in one are GPU002's.
        regions = low_regions(owned(trace, ctx.all_params, ctx.claimers), ownership_params(ctx.all_params, ctx.claimers))
        total = sum(r.owned_ns for r in regions)
        if not regions or total <= 0:
            return []
        low_ns = sum(r.end_ns - r.start_ns for r in regions)
        idle_ns = sum(r.idle_ns for r in regions)
        top = regions[:20]
        nvtx = nvtx_at(trace, [(r.pid, r.start_ns) for r in top])
        evidence = tuple(
            Evidence(start_ns=r.start_ns, end_ns=r.end_ns, device=r.device, pid=r.pid, rank=trace.rank, nvtx=n,
                     value_ns=r.owned_ns,
                     detail={"busy_pct": round(100.0 * (1 - r.idle_ns / (r.end_ns - r.start_ns)), 2),
                             "windows": r.windows})
            for r, n in zip(top, nvtx, strict=True))
        share = pct(total, report_span_ns(trace))
        launched, migrations = _operations_in(trace, regions)
        holds, premise = _pacing_premise(launched, migrations)
        return [Finding(
            rule_id=self.id,
            title=f"GPU busy under {fmt.exact(ctx.params['max_busy_pct'])}% for {fmt_ms(low_ns)} in {fmt.count(len(regions))} region(s)"
                  + ("" if holds else f" ({premise})"),
            message=(f"{fmt.count(len(regions))} region(s) totalling {fmt_ms(low_ns)} ran the GPU under "
                     f"{fmt.exact(ctx.params['max_busy_pct'])}% busy ({fmt_ms(idle_ns)} idle); {fmt_ms(total)} of that idle, "
                     "in short gaps no other finding explains, is counted here. "
                     f"Premise ({self.premise}): {'holds' if holds else 'does not hold'}, {premise}."),
            impact_ns=total, impact_pct=share,
            advice=self.advice,
            evidence=evidence, evidence_total=len(regions), report=trace.label, rank=trace.rank,
            extra=LowUtilizationExtra(
                low_span_ns=low_ns, low_idle_ns=idle_ns, premise_holds=holds, premise=premise,
                host_launched_ops=launched, uvm_migrations=migrations,
                # SM activity the GPU metrics sampled in the low regions shown, when they were collected.
                measured_sm=list(sampled_during(trace, SM_METRIC_RE, [(r.start_ns, r.end_ns) for r in top])) or None),
        )]


# Regions counted per statement by ``_operations_in``: one statement for a small report's few dozen regions,
# bounded for a large report's thousands (each region is a branch of the statement).
REGIONS_PER_QUERY = 100


def _operations_in(trace: Trace, regions: list) -> tuple[int, int]:
    """GPU operations starting inside GPU002's regions (on their device and process): those the host launched
    (kernels, copies other than unified-memory migrations, memsets) and the unified-memory migrations the driver
    issues on its own. Summed over the regions: each region's count is one branch of a UNION ALL (the filters a
    query per region had; 1-3 ms a query on a small report, with up to 60 regions there)."""
    launched = migrations = 0
    for table, kind in (("kernels", None), ("memcpy", "copy"), ("memset", None)):
        if table not in trace.tables:
            continue
        uvm = "copy_kind LIKE 'UVM%'" if kind else "FALSE"
        for at in range(0, len(regions), REGIONS_PER_QUERY):
            branches = " UNION ALL ".join(
                f"""SELECT COUNT(*) FILTER (WHERE NOT ({uvm})) AS a, COUNT(*) FILTER (WHERE {uvm}) AS b
                    FROM {table} WHERE start_ns >= {int(r.start_ns)} AND start_ns < {int(r.end_ns)}
                      AND device IS NOT DISTINCT FROM {_int_or_null(r.device)}"""  # noqa: S608 - integers, fixed names
                + ("" if r.pid is None else f" AND pid IS NOT DISTINCT FROM {int(r.pid)}")
                for r in regions[at:at + REGIONS_PER_QUERY])
            row = trace.sql(f"SELECT SUM(a), SUM(b) FROM ({branches})")  # noqa: S608 - integers, fixed names
            launched += int(row[0][0] or 0)
            migrations += int(row[0][1] or 0)
    return launched, migrations


def _int_or_null(value: int | None) -> str:
    return "NULL" if value is None else str(int(value))


def _pacing_premise(launched: int, migrations: int) -> tuple[bool, str]:
    """GPU002's mechanism is the host pacing its launches: short gaps between operations it issues. Gaps between
    unified-memory migrations (issued by the driver on page faults) or around a single operation are not that."""
    what = f"{fmt.count(launched)} host-launched operation(s) and {fmt.count(migrations)} unified-memory migration(s) in the regions"
    if launched < 2:
        return False, f"{what}: no gap between two launches"
    if migrations > launched:
        return False, f"{what}: most gaps lie between migrations the driver issues, not between launches"
    return True, what
