"""HOST001: the GPU idle while its launching threads sat blocked in OS runtime calls, by call and class."""

from __future__ import annotations

import numpy as np

from analysis import fmt
from analysis.diagnosis.findings import Evidence, Finding
from analysis.diagnosis.rules.base import MAX_US, Rule, RuleContext, Threshold
from analysis.diagnosis.rules.nsys.causes import CAUSE_CODES, launchers, owned_gap_causes
from analysis.diagnosis.rules.nsys.common import fmt_ms, nvtx_at, pct, report_span_ns
from analysis.diagnosis.rules.nsys.gaps import gap_rule, owned, owner_code, ownership_params
from analysis.diagnosis.rules.nsys.hostcpu import functions_in
from analysis.diagnosis.rules.nsys.idle_claims import claims
from analysis.model.activity import top_order
from analysis.model.capture import missing as capture_missing
from analysis.model.osrt import WRITES, base_name, os_class
from analysis.model.trace import Run, Trace
from analysis.results import OsBlockedExtra

OS_CAUSE = CAUSE_CODES.index("os_runtime")

ADVICE = {
    "file_io": ("The thread that feeds the GPU waited on file I/O: read data ahead on other threads or processes "
                "(DataLoader num_workers, prefetch_factor, persistent_workers), cache the dataset in memory or on "
                "local NVMe, use larger sequential reads, or read straight into GPU memory with GPUDirect Storage "
                "(cuFile, KvikIO, DALI). Move logging and checkpoint writes off the launching thread."),
    "file_write": ("The thread that feeds the GPU waited on file writes (output, logging, checkpoints): hand them to "
                   "a background thread or process (async checkpointing, buffered logging), write less often, or "
                   "write to local NVMe and copy out later."),
    "lock_wait": ("The launching thread waited on a lock or another thread (mutex, condition variable, join): find "
                  "the producer it waits for (data loader queue, a Python GIL holder, a logging or checkpoint "
                  "thread) and let it run ahead, or shrink the critical section."),
    "poll": ("The launching thread waited in poll/epoll/select for data or messages (a data loader queue, RPC, "
             "a parameter server): prefetch further ahead so the data is there when the GPU needs it."),
    "sleep": "The launching thread slept while the GPU was idle: remove sleeps and busy-wait backoffs from the "
             "training loop.",
    "network": "The launching thread waited on the network: overlap remote reads with GPU work or cache the data "
               "locally.",
    "driver_ioctl": ("The launching thread sat in driver ioctls outside CUDA calls (device or memory management): "
                     "look for per-step allocation, pinning or device queries and do them once up front."),
    "memory": "The launching thread mapped or unmapped memory: allocate once and reuse buffers (caching allocators).",
    "other": "See which OS calls the launching thread made during the idle gaps and move them off the critical path.",
    "off_cpu": ("The launching thread was switched out by the scheduler outside any traced call while the GPU idled: "
                "it blocked on something the trace does not show (trace OS calls with --trace=osrt to see what: "
                "a lock, a queue, I/O), or it was runnable but had no core (more busy threads than cores: fewer "
                "DataLoader workers or OpenMP threads, pin the launching thread to its own core)."),
}


def _advice(trace: Trace, key: str) -> str:
    """``ADVICE[key]``, without asking for the OS runtime trace when the capture had it (``analysis.model.capture``):
    then the switch-out is outside every traced OS call."""
    advice = ADVICE[key]
    if "--trace=osrt" not in capture_missing(trace):
        advice = advice.replace("(trace OS calls with --trace=osrt to see what: a lock, a queue, I/O)",
                                "(no traced OS call holds it: a lock, a page fault or I/O the OS trace does not show)")
    return advice


class HostBlocked(Rule):
    """Host blocked while the GPU waits: idle instants during which the launching threads sat in OS calls.

    *Why it matters*: the GPU gets work only from the threads that launch it. When such a thread blocks
    in the operating system (reading a file, waiting on a lock or a queue, sleeping) while nothing is
    queued, the GPU idles for exactly as long: "the GPU waited 300 ms while the launcher blocked in
    read" is the data pipeline, not the model.

    *How it is detected*: the idle anatomy (``analysis.diagnosis.idle_anatomy``) paints each idle instant of each
    device with what the launching threads were doing, most specific first; the instants inside an OS runtime
    call and in no CUDA call (``os_io``, ``os_wait``, ``os_other``), and those with the thread switched out by
    the scheduler and nothing more specific recorded (``off_cpu``: it blocked outside any traced call, or was
    preempted), are this rule's (``owns_idle``, see ``idle_claims``), in any gap, whatever rule owns the rest
    of the gap. Impact: that idle time. Given: the calls behind it (idle inside each, calls), by class (file
    I/O, lock/wait, poll, sleep, network, driver ioctl, memory, off CPU; over the named calls), by anatomy
    category, and as evidence the longest idle gaps (of at least ``GPU001.min_gap_us``) that OS calls mostly
    cover, with the call and thread that cover most of each. A CUDA call is more specific than the OS call
    inside it (an ioctl inside cudaMalloc is allocation). Needs the OS runtime trace (``nsys profile
    --trace=cuda,osrt``) or the scheduler's events (``--cpuctxsw=process-tree``, on with CPU sampling);
    skipped without both.

    Evidence from CPU sampling (``--sample=cpu``): when the report has CPU samples, ``host_functions``
    lists the leaf functions the launching threads were sampled in during those gaps (HOST002's
    samples, most sampled first), so the finding says where the host was.
    """

    id = "HOST001"
    extra_type = OsBlockedExtra
    name = "host.blocked-while-gpu-idle"
    verdict_kind = "host_bound"
    next_step = "move the blocking OS calls (I/O, locks, sleeps) off the launching thread"
    host_work = True
    may_be_pause = True  # a one-shot program's only CUDA thread may sleep on purpose
    judges_pacing_idle = True
    category = "host"
    requires = ("kernels",)
    thresholds = {
        "min_idle_us": Threshold(1000.0, "us", "report when the idle inside OS calls of the launching threads, or "
                                               "with them switched out, adds up to at least this",
                                 minimum=0.0, maximum=MAX_US),
    }
    owns_idle = ("os_io", "os_wait", "os_other", "off_cpu")
    summary = ("GPU idle while its launching threads sat in OS runtime calls (file I/O, locks, poll, sleep) or were "
               "switched out")
    advice = (
        "By the class that takes most of the time: file reads (read ahead on worker processes, cache the "
        "data, GPUDirect Storage), file writes (background or async writers), locks and queues (let the "
        "producer run ahead), poll (prefetch further), sleeps (remove them), ioctl and mmap (allocate "
        "once).")

    def missing(self, run: Run) -> str | None:
        traces = run.of_tool(self.tool)
        if traces and not any(t.has_rows("osrt") or t.has_rows("off_cpu") for t in traces):
            return ("no OS runtime trace or scheduler events in the report: collect them with nsys profile "
                    "--trace=cuda,osrt --cpuctxsw=process-tree")
        return super().missing(run)

    def check_report(self, trace: Trace, ctx: RuleContext) -> list[Finding]:
        c = claims(trace, ctx.claimers).by_rule.get(self.id)
        if c is None or c.ns <= 0 or c.ns < ctx.params["min_idle_us"] * 1000:
            return []
        total = c.ns
        by_call = {name: ns for name, ns, _ in c.names}
        by_class: dict[str, int] = {}
        for name, ns in by_call.items():
            cls = "off_cpu" if c.name_category.get(name) == "off_cpu" else os_class(name)
            by_class[cls] = by_class.get(cls, 0) + ns
        named = sum(by_call.values())
        main = max(by_class, key=lambda k: (by_class[k], k)) if by_class else "other"
        file_share = pct(by_class.get("file_io", 0), named)
        # Where: the longest gaps OS calls mostly cover (GPU001's gaps whose cause is an OS call).
        gaps, cands = [], []
        for pg in owned_gap_causes(trace, owned(trace, ctx.all_params, ctx.claimers), owner_code(gap_rule(ctx.claimers, "long_gap")),
                                   ctx.claimers, int(ownership_params(ctx.all_params, ctx.claimers)["min_gap_ns"])):
            m = pg.cause == OS_CAUSE
            if pg.pid is None or not m.any():
                continue
            dev = np.concatenate([np.full(len(p.gap_start), -1 if p.device is None else p.device, dtype=np.int64)
                                  for p in pg.parts])
            gs, ge, dv = pg.gap_start[m], pg.gap_end[m], dev[m]
            gaps.append((pg.pid, gs, ge))
            for i in top_order(ge - gs, gs, 20):
                cands.append((pg.pid, int(gs[i]), int(ge[i]), None if dv[i] < 0 else int(dv[i])))
        top = sorted(cands, key=lambda g: (-(g[2] - g[1]), g[1]))[:20]
        evidence = _evidence(trace, top, launchers(trace)) if top else tuple(
            Evidence(name=name, value_ns=ns, rank=trace.rank, detail={"calls": calls, "class": os_class(name)})
            for name, ns, calls in c.names)
        names = ", ".join(f"{n} {fmt_ms(v)} (x{fmt.count(k)})" for n, v, k in c.names[:5])
        share = pct(total, report_span_ns(trace))
        return [Finding(
            rule_id=self.id,
            title=(f"GPU idle {fmt_ms(total)} while its launching thread blocked in the OS, mostly "
                   f"{c.names[0][0] if c.names else 'OS calls'}"),  # an off-CPU name reads "off CPU ..."
            message=(f"{fmt_ms(total)} of GPU idle"
                     + (f" ({fmt.pct(share)} of the GPU-active span)" if share is not None else "")
                     + " passed while the launching threads sat in OS runtime calls"
                     + (" or were switched out" if "off_cpu" in c.by_category else "") + f": {names}"
                     + (f"; file I/O is {fmt.share(file_share)} of it." if file_share else ".")),
            impact_ns=total, impact_pct=share, advice=_advice(trace, _advice_key(main, by_call)), evidence=evidence,
            evidence_total=len(top) if top else len(c.names), report=trace.label, rank=trace.rank,
            extra=OsBlockedExtra(
                idle_ns=total, by_category=c.by_category,
                names=[{"name": n, "ns": ns, "calls": k} for n, ns, k in c.names],
                by_call=by_call, by_class=by_class, os_call_ns=named,
                file_io_pct=None if file_share is None else round(file_share, 3),
                main_class=main, idle_gaps=sum(len(g[1]) for g in gaps),
                iterations_with=c.iterations_with, iterations=c.iterations),
            # Where the CPU was when it was not blocked: HOST002's samples in those gaps.
            host_functions=(functions_in(trace, gaps) or None) if gaps else None,
        )]


def _advice_key(main: str, by_call: dict[str, int]) -> str:
    """File I/O splits into reads (the data pipeline) and writes (output, logs, checkpoints)."""
    if main != "file_io":
        return main
    writes = sum(v for n, v in by_call.items() if os_class(n) == "file_io" and base_name(n) in WRITES)
    reads = sum(v for n, v in by_call.items() if os_class(n) == "file_io") - writes
    return "file_write" if writes > reads else "file_io"


def _evidence(trace: Trace, top: list[tuple[int, int, int, int | None]],
              tids: dict[int, list[int]]) -> tuple[Evidence, ...]:
    """The longest gaps, (pid, start, end, device), with the call and thread that cover most of each."""
    if not top:
        return ()
    values = ", ".join(f"({i}, {int(p)}, {s}, {e})" for i, (p, s, e, _) in enumerate(top))
    threads = ", ".join(f"({int(p)}, {int(t)})" for p in {g[0] for g in top} for t in tids.get(p, [])) or "(NULL, NULL)"
    found = {int(r[0]): r[1:] for r in trace.sql(f"""
        WITH pts(i, pid, gs, ge) AS (VALUES {values}), th(pid, tid) AS (VALUES {threads})
        SELECT i, arg_max(o.name, LEAST(o.end_ns, pts.ge) - GREATEST(o.start_ns, pts.gs)),
               arg_max(o.tid, LEAST(o.end_ns, pts.ge) - GREATEST(o.start_ns, pts.gs)),
               SUM(LEAST(o.end_ns, pts.ge) - GREATEST(o.start_ns, pts.gs))
        FROM pts JOIN osrt o ON o.pid = pts.pid AND o.start_ns < pts.ge AND o.end_ns > pts.gs
        SEMI JOIN th ON th.pid = o.pid AND th.tid = o.tid
        GROUP BY i""")}  # noqa: S608 - integers only
    nvtx = nvtx_at(trace, [(g[0], g[1]) for g in top])
    out = []
    for i, ((p, s, e, dev), n) in enumerate(zip(top, nvtx, strict=True)):
        name, tid, os_ns = found.get(i, (None, None, 0))
        out.append(Evidence(start_ns=s, end_ns=e, device=dev, pid=p, rank=trace.rank, name=name,
                            nvtx=n, value_ns=e - s,
                            detail={"tid": tid, "os_call_ns": int(os_ns or 0), "class": os_class(name)}))
    return tuple(out)
