"""PHASE001 start-up cost and PHASE002 warm-up cost: the time before the loop runs at its steady pace."""

from __future__ import annotations

import re

import numpy as np

from analysis import fmt
from analysis.diagnosis.findings import Evidence, Finding
from analysis.diagnosis.rules.base import MAX_US, Rule, RuleContext, Threshold
from analysis.diagnosis.rules.nsys.common import fmt_ms, pct
from analysis.diagnosis.rules.nsys.startup_fill import describe, startup_fill, unrecorded
from analysis.loops.phases import activity_bounds, loop_warmup, phase_info, phase_of, top_calls
from analysis.model.trace import Run, Trace
from analysis.results import StartupExtra, WarmupExtra

# What fills a start-up, by call or range name; the first match decides the advice.
FILLERS = (
    ("nccl", re.compile(r"^nccl", re.IGNORECASE),
     "NCCL communicator set-up dominates: create communicators once and keep them (persistent process "
     "groups), split them instead of creating new ones (ncclCommSplit), and let NCCL connect lazily "
     "(NCCL_RUNTIME_CONNECT=1, the default in recent NCCL)."),
    ("autotune", re.compile(r"^(cudnn|cublas)", re.IGNORECASE),
     "Library autotuning dominates: cache its results (cuDNN/cuBLASLt heuristics caches, torch.compile and "
     "TensorRT timing caches) so later runs skip the search."),
    ("module", re.compile(r"^cu(da)?(Module|Library|Link|Func)|^cudaFree$|^cu(Init|CtxCreate|DevicePrimaryCtx)",
                          re.IGNORECASE),
     "Context creation and module loading dominate: load modules lazily (CUDA_MODULE_LOADING=LAZY, the "
     "default since CUDA 12.2) and keep one process per GPU alive across jobs where possible."),
    ("alloc", re.compile(r"^cu(da)?(Host|Mem)?(Alloc|Malloc|HostRegister|MemAlloc)|Malloc|Alloc", re.IGNORECASE),
     "Allocations dominate: allocate once up front (a caching allocator, one pinned host pool) rather than "
     "growing memory during set-up."),
)
ONE_OFF = " It is paid once per job: it matters in proportion to how short the job is."


class _PhaseRule(Rule):
    """A rule about the phases around the analysis window: it needs GPU work in the whole report, not
    in the window (a start-up window may hold no kernel at all)."""

    stands_for = "startup"  # the one-off start-up verdict speaks for the phases around the window

    def applicable(self, run: Run) -> list[Trace]:
        return [t for t in run.of_tool(self.tool) if phase_info(t).base.has_rows("kernels")]


def _cap(severity_pct: float | None) -> str:
    """A one-off cost is at most a warning: the profile cannot know how long the job runs."""
    if severity_pct is not None and severity_pct >= 2.0:
        return "warning"
    return "info"


class StartupCost(_PhaseRule):
    """Start-up cost: the time from the first recorded activity to the first iteration of the loop.

    *Why it matters*: context creation, module loading, allocations, NCCL communicator set-up and
    library autotuning delay the first useful step; for short jobs (and every restart) they are a
    large share of the time paid for.

    *How it is detected*: the report's loop (NVTX steps, else the repeating sequence of GPU operations,
    see ``analysis.loops.periods``) is found first; start-up runs from the first recorded activity (any
    table) to the first iteration, or, in a one-shot program (no loop), to the first GPU operation after
    set-up (context creation, module loading, NCCL communicators, MPI_Init; see ``analysis.loops.phases``).
    Reported when at least ``min_ms`` long. What fills it: the CUDA API calls and NCCL/CUDA NVTX ranges
    that cover most of it, the GPU's busy time, and the idle anatomy of the loop's device over it
    (``analysis.diagnosis.idle_anatomy``): what its launching threads were doing while the GPU idled, by category
    with the top calls, ranges and sampled functions, and the first CUDA call when it is long enough to
    include the context's creation. Impact: its length (severity at most *warning*: a one-off cost).
    """

    id = "PHASE001"
    extra_type = StartupExtra
    name = "phase.startup-cost"
    verdict_kind = None  # the one-off start-up verdict speaks for it
    one_off_phase = "startup"
    wall_phase = "startup"
    next_step = ""
    category = "phase"
    requires = ("kernels",)
    thresholds = {"min_ms": Threshold(1.0, "ms", "report a start-up at least this long",
                                      minimum=0.0, maximum=MAX_US / 1000)}
    summary = "Time before the first iteration, with what fills it"
    advice = (
        "Fitting the category that fills most of it: allocate once and create the context once, lazy "
        "module loading and compile caches, persistent NCCL communicators, faster input, the sampled host"
        " work; when nothing recorded explains it, the capture flags that would (``--sample=cpu``, "
        "``--trace=osrt``).")

    def check_report(self, trace: Trace, ctx: RuleContext) -> list[Finding]:
        info = phase_info(trace)
        start = phase_of(info.phases, "startup")
        if start is None or start.end_ns - start.start_ns < ctx.params["min_ms"] * 1e6:
            return []
        base, lo, hi = info.base, start.start_ns, start.end_ns
        length = hi - lo
        calls = top_calls(base, lo, hi, 5)
        busy = int(base.scalar(f"""SELECT COALESCE(SUM(LEAST(end_ns, {hi}) - GREATEST(start_ns, {lo})), 0)
                                   FROM kernels WHERE start_ns < {hi} AND end_ns > {lo}""") or 0)  # noqa: S608
        anatomy = startup_fill(base, info.loop.unit, lo, hi)
        advice = anatomy.advice if anatomy is not None else next(
            (a for _, rx, a in FILLERS if calls and calls[0][1] >= 0.25 * length and rx.search(calls[0][0])),
            unrecorded(base))
        bounds = activity_bounds(base)
        share = pct(length, (bounds[1] - bounds[0]) if bounds else 0)
        fill = ", ".join(f"{n} {fmt_ms(t)}" for n, t in calls) or "no CUDA calls"
        # A one-shot program (no loop) has no first iteration: its start-up ends where its work starts.
        until = "the first iteration" if len(info.loop) else "the work starts (after set-up)"
        what = ""
        if anatomy is not None:
            what = f" While the GPU idled ({fmt_ms(anatomy.idle_ns)}) the host was: {describe(anatomy, fmt_ms)}."
            if anatomy.first_call is not None:
                what += (f" The first CUDA call, {anatomy.first_call[0]} ({fmt_ms(anatomy.first_call[1])}), "
                         "includes creating the CUDA context.")
        return [Finding(
            rule_id=self.id, title=f"Start-up takes {fmt_ms(length)} before {until}",
            message=(f"From the first recorded activity until {until}: {fmt_ms(length)}"
                     + (f" ({fmt.pct(share)} of the profiled time)" if share is not None else "")
                     + f"; largest calls: {fill}; GPU kernels ran {fmt_ms(busy)} of it." + what),
            impact_ns=length, impact_pct=share, severity=_cap(share), advice=advice + ONE_OFF,
            evidence=tuple(Evidence(start_ns=lo, end_ns=hi, rank=trace.rank, name=n, value_ns=t) for n, t in calls)
            or (Evidence(start_ns=lo, end_ns=hi, rank=trace.rank, value_ns=length),),
            report=trace.label, rank=trace.rank, phase="startup",
            extra=StartupExtra(
                startup_ns=length, gpu_busy_ns=busy, fillers=[{"name": n, "ns": t} for n, t in calls],
                idle_anatomy=None if anatomy is None else {
                    "idle_ns": anatomy.idle_ns, "categories": [c.to_json() for c in anatomy.categories],
                    "first_call": None if anatomy.first_call is None else
                    {"name": anatomy.first_call[0], "ns": anatomy.first_call[1]}}),
        )]


class WarmupCost(_PhaseRule):
    """Warm-up cost: the extra time of the first iterations over the steady iteration time.

    *Why it matters*: JIT compilation, autotuning, allocator growth and lazy initialization make the
    first iterations slow; with frequent restarts (preemptible jobs, short benchmarks) they add up.

    *How it is detected*: iteration times (start to next start) of the loop; an iteration is slow when
    it exceeds the median by more than 3 median absolute deviations (and by at least 10%); warm-up ends
    at the first 3 consecutive iterations that are not slow (see ``analysis.loops.phases``). Reported when the
    warm-up's extra time over the steady median is at least ``min_ms``. Impact: that extra time
    (severity at most *warning*: a one-off cost).
    """

    id = "PHASE002"
    extra_type = WarmupExtra
    name = "phase.warmup-cost"
    verdict_kind = None  # warm-up lies outside the steady window the verdict judges
    next_step = ""
    category = "phase"
    requires = ("kernels",)
    thresholds = {"min_ms": Threshold(1.0, "ms", "report a warm-up whose extra time is at least this",
                                      minimum=0.0, maximum=MAX_US / 1000)}
    summary = "Extra time of the first, slow iterations"
    advice = (
        "Capture the step once in a CUDA graph, cache compilation and autotuning results (torch.compile "
        "cache, cuDNN/TensorRT timing caches), pre-size the allocator.")

    def check_report(self, trace: Trace, ctx: RuleContext) -> list[Finding]:
        # The first loop's warm-up (the warm-up phase); another loop later in the run starts warm.
        loop = phase_info(trace).loop.all[0] if len(phase_info(trace).loop) else phase_info(trace).loop
        d = loop.durations
        w = loop_warmup(loop)
        if not w:
            return []
        med = float(np.median(d[w:]))
        extra_each = np.maximum(d[:w] - med, 0)
        extra = int(extra_each.sum())
        if extra < ctx.params["min_ms"] * 1e6:
            return []
        steady = int(max(loop.ends.max(), loop.starts[-1]) - loop.starts[w])
        share = pct(extra, steady + int(d[:w].sum()))
        evidence = tuple(Evidence(start_ns=int(loop.starts[i]), end_ns=int(loop.starts[i] + d[i]), rank=trace.rank,
                                  value_ns=int(extra_each[i]), detail={"iteration": i, "iteration_ns": int(d[i])})
                         for i in range(min(w, 20)))
        return [Finding(
            rule_id=self.id, title=f"Warm-up: {fmt.count(w)} slow iteration(s) cost {fmt_ms(extra)} over the steady pace",
            message=(f"The first {fmt.count(w)} iteration(s) took {fmt_ms(int(d[:w].sum()))} against a steady median of "
                     f"{fmt_ms(med)} per step: {fmt_ms(extra)} extra."),
            impact_ns=extra, impact_pct=share, severity=_cap(share),
            advice=("Warm-up comes from JIT compilation, autotuning and allocator growth: capture the step once "
                    "in a CUDA graph, keep compilation and autotune caches between runs (torch.compile cache, "
                    "cuDNN/TensorRT timing caches), pre-size the caching allocator." + ONE_OFF),
            evidence=evidence, evidence_total=w, report=trace.label, rank=trace.rank, phase="warmup",
            extra=WarmupExtra(warmup_iterations=w, steady_median_ns=int(med)),
        )]
