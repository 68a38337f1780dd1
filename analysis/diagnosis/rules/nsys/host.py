"""HOST001: the GPU idle while its launching threads sat blocked in OS runtime calls, by call, class and thread."""

from __future__ import annotations

import numpy as np

from analysis.diagnosis.findings import Evidence, Finding
from analysis.diagnosis.rules.base import MAX_US, Rule, RuleContext, Threshold
from analysis.diagnosis.rules.nsys.causes import CAUSE_CODES, launchers, owned_gap_causes
from analysis.diagnosis.rules.nsys.common import fmt_ms, nvtx_at, pct, report_span_ns
from analysis.diagnosis.rules.nsys.gaps import OWNER_CODES, owned
from analysis.diagnosis.rules.nsys.hostcpu import functions_in
from analysis.model.activity import top_order
from analysis.model.osrt import WRITES, base_name, os_class
from analysis.model.trace import Run, Trace

OS_CAUSE = CAUSE_CODES.index("os_runtime")
GAPS_PER_QUERY = 4096  # gaps sent to DuckDB per range join (bounded SQL text)

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
}


class HostBlocked(Rule):
    """Host blocked while the GPU waits: idle gaps during which the launching threads sat in OS calls.

    *Why it matters*: the GPU gets work only from the threads that launch it. When such a thread blocks
    in the operating system (reading a file, waiting on a lock or a queue, sleeping) while nothing is
    queued, the GPU idles for exactly as long: "the GPU waited 300 ms while the launcher blocked in
    read" is the data pipeline, not the model.

    *How it is detected*: the idle gaps GPU001 would own (NVIDIA's pairing, at least
    ``GPU001.min_gap_us``, no blocking sync or copy in progress) whose cause is ``os_runtime``: the
    OS runtime calls of the process's launching threads (those that launched any of its GPU work)
    cover at least half of the gap, and at least as much of it as their CUDA API calls
    (``analysis.diagnosis.rules.nsys.causes``). Inside those gaps the calls' time is summed by call name, by
    class (file I/O, lock/wait, poll, sleep, network, driver ioctl, memory) and by thread, as thread
    time clipped to the gaps. Impact: the length of those gaps.

    Ownership: between MEM002 and GPU001 in the idle-gap precedence (``analysis.diagnosis.rules.nsys.gaps``):
    SYNC001 > MEM002 > HOST001 > GPU001 > KRN001 > GPU002. GPU001 keeps its gaps with the other causes.
    Needs the OS runtime trace (``nsys profile --trace=cuda,osrt``); skipped without it.

    Evidence from CPU sampling (``--sample=cpu``): when the report has CPU samples, ``host_functions``
    lists the leaf functions the launching threads were sampled in during this rule's own gaps (HOST002's
    samples, most sampled first), so the finding says where the host was.
    """

    id = "HOST001"
    name = "host.blocked-while-gpu-idle"
    judges_pacing_idle = True
    category = "host"
    requires = ("kernels", "osrt")
    thresholds = {
        "min_idle_us": Threshold(1000.0, "us", "report when the idle gaps with the host blocked add up to at least "
                                               "this (each gap is at least GPU001.min_gap_us)",
                                 minimum=0.0, maximum=MAX_US),
    }
    summary = "GPU idle while its launching threads sat in OS runtime calls (file I/O, locks, poll, sleep)"
    advice = (
        "By the class that takes most of the time: file reads (read ahead on worker processes, cache the "
        "data, GPUDirect Storage), file writes (background or async writers), locks and queues (let the "
        "producer run ahead), poll (prefetch further), sleeps (remove them), ioctl and mmap (allocate "
        "once).")

    def missing(self, run: Run) -> str | None:
        traces = run.of_tool(self.tool)
        if traces and not any(t.has_rows("osrt") for t in traces):
            return "no OS runtime trace in the report: collect it with nsys profile --trace=cuda,osrt"
        return super().missing(run)

    def check_report(self, trace: Trace, ctx: RuleContext) -> list[Finding]:
        units = owned(trace, ctx.all_params)
        gaps, devs, kept = [], [], 0
        for pg in owned_gap_causes(trace, units, OWNER_CODES["GPU001"]):
            m = (pg.cause == OS_CAUSE) & (pg.kept > 0)
            kept += int(pg.kept[m].sum())
            if pg.pid is not None and m.any():  # gaps of no known process have no cause (gap_causes)
                dev = np.concatenate([np.full(len(p.gap_start), -1 if p.device is None else p.device, dtype=np.int64)
                                      for p in pg.parts])
                gaps.append((pg.pid, pg.gap_start[m], pg.gap_end[m]))
                devs.append(dev[m])
        total = kept  # the gaps' time less what rules that own idle by category took out of them
        if not gaps or total < ctx.params["min_idle_us"] * 1000:
            return []
        tids = launchers(trace)
        by_call: dict[str, int] = {}
        by_thread: dict[tuple[int, int], int] = {}
        for pid, gs, ge in gaps:
            for a in range(0, len(gs), GAPS_PER_QUERY):
                for name, tid, ns in _calls_in(trace, pid, tids.get(pid, []), gs[a:a + GAPS_PER_QUERY],
                                               ge[a:a + GAPS_PER_QUERY]):
                    by_call[name] = by_call.get(name, 0) + int(ns)
                    by_thread[(pid, tid)] = by_thread.get((pid, tid), 0) + int(ns)
        by_class: dict[str, int] = {}
        for name, ns in by_call.items():
            by_class[os_class(name)] = by_class.get(os_class(name), 0) + ns
        os_total = sum(by_call.values())
        main = max(by_class, key=lambda c: (by_class[c], c)) if by_class else "other"
        file_share = pct(by_class.get("file_io", 0), os_total)
        n_gaps = sum(len(gs) for _, gs, _ in gaps)
        cands = []
        for (pid, gs, ge), dev in zip(gaps, devs, strict=True):
            for i in top_order(ge - gs, gs, 20):
                cands.append((pid, int(gs[i]), int(ge[i]), None if dev[i] < 0 else int(dev[i])))
        top = sorted(cands, key=lambda g: (-(g[2] - g[1]), g[1]))[:20]
        evidence = _evidence(trace, top, tids)
        calls = sorted(by_call.items(), key=lambda kv: (-kv[1], kv[0]))
        threads = sorted(by_thread.items(), key=lambda kv: (-kv[1], kv[0]))
        names = ", ".join(f"{n} {fmt_ms(v)}" for n, v in calls[:5])
        share = pct(total, report_span_ns(trace))
        return [Finding(
            rule_id=self.id,
            title=(f"GPU idle {fmt_ms(total)} while its launching thread blocked in the OS, mostly "
                   f"{calls[0][0] if calls else 'OS calls'}"),
            message=(f"In {n_gaps} idle gap(s) ({fmt_ms(total)}"
                     + (f", {share:.1f}% of the GPU-active span" if share is not None else "")
                     + f") the launching threads sat in OS runtime calls: {names}"
                     + (f"; file I/O is {file_share:.0f}% of that call time." if file_share is not None else ".")),
            impact_ns=total, impact_pct=share, advice=ADVICE[_advice_key(main, by_call)], evidence=evidence,
            evidence_total=n_gaps, report=trace.label, rank=trace.rank,
            extra={"by_call": {n: v for n, v in calls[:20]}, "by_class": by_class,
                   "by_thread": [{"pid": p, "tid": t, "os_ns": v} for (p, t), v in threads[:20]],
                   "os_call_ns": os_total, "file_io_pct": None if file_share is None else round(file_share, 3),
                   "main_class": main, "idle_gaps": n_gaps,
                   # Where the CPU was when it was not blocked: HOST002's samples in these same gaps.
                   **({"host_functions": fns} if (fns := functions_in(trace, gaps)) else {})},
        )]


def _advice_key(main: str, by_call: dict[str, int]) -> str:
    """File I/O splits into reads (the data pipeline) and writes (output, logs, checkpoints)."""
    if main != "file_io":
        return main
    writes = sum(v for n, v in by_call.items() if os_class(n) == "file_io" and base_name(n) in WRITES)
    reads = sum(v for n, v in by_call.items() if os_class(n) == "file_io") - writes
    return "file_write" if writes > reads else "file_io"


def _calls_in(trace: Trace, pid: int | None, tids: list[int], gs: np.ndarray, ge: np.ndarray) -> list[tuple]:
    """(name, tid, thread time inside the gaps) of the OS calls of the launching threads ``tids``."""
    if pid is None or not tids:
        return []
    values = ", ".join(f"({int(s)}, {int(e)})" for s, e in zip(gs, ge, strict=True))
    return trace.sql(f"""
        WITH g(gs, ge) AS (VALUES {values})
        SELECT o.name, o.tid, SUM(LEAST(o.end_ns, g.ge) - GREATEST(o.start_ns, g.gs))
        FROM osrt o JOIN g ON o.start_ns < g.ge AND o.end_ns > g.gs
        WHERE o.pid = {int(pid)} AND o.tid IN ({", ".join(str(int(t)) for t in tids)})
        GROUP BY ALL""")  # noqa: S608 - integers only


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
