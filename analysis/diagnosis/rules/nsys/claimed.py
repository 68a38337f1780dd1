"""MEM006, HOST003, HOST004: GPU idle while the host allocated memory, communicated, or compiled code.

Each owns the idle instants painted with its categories (``owns_idle``; see ``idle_claims``), whatever rule
owns the gap around them, and names the calls or ranges behind them with their share.
"""

from __future__ import annotations

from typing import Any, TypeVar

from analysis import fmt
from analysis.diagnosis.findings import Evidence, Finding
from analysis.diagnosis.rules.base import MAX_US, RoundTrip, Rule, RuleContext, Threshold
from analysis.diagnosis.rules.nsys.common import fmt_ms, pct, report_span_ns
from analysis.diagnosis.rules.nsys.idle_claims import Claim, claims
from analysis.model.activity import unit_gaps
from analysis.model.trace import Trace
from analysis.results import AllocationExtra, ClaimedIdle, HostCommExtra, JitExtra


def _idle_ns(trace: Trace) -> int:
    return sum(int((ug.gap_end - ug.gap_start).sum()) for ug in unit_gaps(trace))


def _names(c: Claim, n: int = 3) -> str:
    return "/".join(name for name, _, _ in c.names[:n]) or "?"


def _cadence(c: Claim) -> str:
    """'every iteration', 'in k of n iterations', or '' without a loop."""
    if not c.iterations:
        return ""
    if c.iterations_with >= c.iterations:
        return "every iteration"
    return f"in {fmt.count(c.iterations_with)} of {fmt.count(c.iterations)} iterations"


E = TypeVar("E", bound=ClaimedIdle)


def claimed(extra: type[E], c: Claim, **own: Any) -> E:
    """A claiming rule's typed extra: the fields every one starts with (``ClaimedIdle``: the claimed idle, by
    category, the calls holding most of it, and the loop iterations with it), then the rule's ``own``."""
    return extra(idle_ns=c.ns, by_category=c.by_category,
                 names=[{"name": n, "ns": ns, "calls": k} for n, ns, k in c.names],
                 iterations_with=c.iterations_with, iterations=c.iterations, **own)


class _Claimed(Rule):
    """Shared: one finding from the rule's claim when it reaches ``min_idle_us``; a rule writes its text
    (``text``: title, message and its typed extra, built by ``claimed``; the advice is the rule's ``advice``) from the
    claim, the idle and the cadence."""

    def claim(self, trace: Trace, ctx: RuleContext) -> Claim | None:
        c = claims(trace, ctx.claimers).by_rule.get(self.id)
        if c is None or c.ns <= 0 or c.ns < ctx.params["min_idle_us"] * 1000:
            return None
        return c

    def evidence(self, trace: Trace, c: Claim) -> tuple[Evidence, ...]:
        return tuple(Evidence(name=name, value_ns=ns, rank=trace.rank, detail={"calls": calls})
                     for name, ns, calls in c.names)

    def text(self, c: Claim, idle: int, cadence: str) -> tuple[str, str, HostCommExtra | JitExtra | AllocationExtra]:
        raise NotImplementedError

    def check_report(self, trace: Trace, ctx: RuleContext) -> list[Finding]:
        c = self.claim(trace, ctx)
        if c is None:
            return []
        idle = _idle_ns(trace)
        title, message, extra = self.text(c, idle, _cadence(c))
        return [Finding(rule_id=self.id, title=title, message=message, impact_ns=c.ns,
                        impact_pct=pct(c.ns, report_span_ns(trace)), advice=self.advice, evidence=self.evidence(trace, c),
                        evidence_total=len(c.names), report=trace.label, rank=trace.rank,
                        extra=extra)]


class AllocationChurn(_Claimed):
    """Memory allocated and freed inside the loop while the GPU waits.

    *Why it matters*: ``cudaMalloc``/``cudaFree`` (and their pitch, array, host and managed variants) are
    expensive driver calls; ``cudaFree`` synchronizes the device. Called every iteration, they leave the GPU
    idle while the host manages memory instead of queueing work.

    *How it is detected*: the idle anatomy paints each idle instant of the loop (warm-up and steady phases)
    with what the launching threads were doing; the instants inside an allocation or free call
    (``cudaMalloc*``, ``cudaFree*``, ``cudaMallocAsync``, ``cudaHostAlloc``, ``cuMemAlloc*`` ...) are this
    rule's. Start-up is left out: the CUDA context is created inside the first allocation, a one-time cost
    PHASE001 reports. Impact: that idle time. Also given: the calls behind it and in how many iterations.
    """

    id = "MEM006"
    extra_type = AllocationExtra
    name = "memory.allocation-churn"
    verdict_kind = "allocation"
    next_step = "allocate once outside the loop (stream-ordered or caching allocator)"
    round_trip = RoundTrip("in allocation calls", "allocate once outside the loop and reuse the buffers (hoist the "
                                                  "cudaMalloc/cuMemAlloc; a data region in OpenACC/OpenMP)")
    category = "memory"
    requires = ("kernels", "cuda_api")
    thresholds = {"min_idle_us": Threshold(1000.0, "us", "report when the loop's idle inside allocation calls "
                                                         "adds up to at least this", minimum=0.0, maximum=MAX_US)}
    summary = "GPU idle while the loop allocates and frees memory"
    advice = (
        "Allocate once before the loop and reuse the buffers; where sizes vary, use a caching allocator "
        "(PyTorch's, RMM, CuPy's memory pool) or stream-ordered cudaMallocAsync/cudaFreeAsync with a "
        "memory pool that keeps its memory (cudaMemPoolAttrReleaseThreshold).")
    owns_idle = ("allocation",)
    idle_phases = ("warmup", "steady")

    def text(self, c: Claim, idle: int, cadence: str) -> tuple[str, str, AllocationExtra]:
        return (
            f"{fmt_ms(c.ns)} of GPU idle inside {_names(c)} in the loop" + (f", {cadence}" if cadence else ""),
            f"{fmt_ms(idle)} idle in the loop: {fmt_ms(c.ns)} inside {_names(c, 4)}" + (f", {cadence}" if cadence else "")
            + ". " + "; ".join(f"{n} {fmt_ms(ns)} ({fmt.count(k)} calls)" for n, ns, k in c.names[:5]) + ".",
            claimed(AllocationExtra, c, window_idle_ns=idle))


class HostCommunication(_Claimed):
    """The GPU waits while its host communicates (MPI, NCCL host calls, UCX, NVSHMEM).

    *Why it matters*: a blocking ``MPI_Send``/``MPI_Recv`` or a host-side collective on the thread that feeds
    the GPU stops it from queueing work; the GPU idles for the whole exchange and for any wait on a slower rank.

    *How it is detected*: idle instants during which the launching threads were inside a communication NVTX
    range (the MPI, NCCL, UCX or NVSHMEM domain, or a range named after such a call, as nsys' ``--trace=mpi``
    records them) and no CUDA call. Impact: that idle time; the ranges behind it by name. In a run whose MPI
    calls are matched across ranks, the idle inside this rank's waiting for another rank to reach the matching
    call is that rank's work, not communication: it is left out of the impact, and the text says how much.
    """

    id = "HOST003"
    extra_type = HostCommExtra
    name = "host.mpi-communication"
    verdict_kind = "communication"
    next_step = "overlap MPI/host communication with GPU work (non-blocking calls, GPU-aware MPI)"
    run_split = "mpi_waiting"
    host_work = True
    category = "host"
    requires = ("kernels", "nvtx")
    thresholds = {"min_idle_us": Threshold(1000.0, "us", "report when the idle inside communication ranges adds "
                                                         "up to at least this", minimum=0.0, maximum=MAX_US)}
    summary = "GPU idle while its host thread communicates (MPI and other host communication)"
    advice = (
        "Overlap communication with GPU work: post non-blocking MPI_Isend/MPI_Irecv before the compute "
        "and wait after it, use CUDA-aware MPI or NCCL on device buffers instead of host copies, or move "
        "the exchange to a communication thread; if most of it is waiting, balance the work across ranks.")
    owns_idle = ("mpi",)

    def text(self, c: Claim, idle: int, cadence: str) -> tuple[str, str, HostCommExtra]:
        return (
            f"GPU idle {fmt_ms(c.ns)} while the host communicates ({_names(c)})",
            f"Of {fmt_ms(idle)} GPU idle, {fmt_ms(c.ns)} ({fmt.pct(pct(c.ns, idle) or 0)}) passed inside host "
            f"communication: " + "; ".join(f"{n} {fmt_ms(ns)} (x{fmt.count(k)})" for n, ns, k in c.names[:5])
            + (f"; {cadence}" if cadence else "") + ".",
            claimed(HostCommExtra, c, window_idle_ns=idle))


class JitCompilation(_Claimed):
    """The GPU waits while the host compiles or loads code (NVRTC, module loading, Triton, Inductor, nvFuser).

    *Why it matters*: just-in-time compilation and module loading run on the host while nothing is queued.
    Once, at the start, it is a warm-up cost; every step, it means the code is compiled again (changing shapes,
    a cache that misses) and the cost never amortizes.

    *How it is detected*: idle instants inside CUDA module, library, linker and NVRTC calls
    (``cuModuleLoad*``, ``cuLibraryLoad*``, ``nvrtc*`` ...) or inside NVTX ranges naming compilation (compile,
    JIT, NVRTC, Triton, Inductor, nvFuser, autotuning). Impact: that idle time; the calls or ranges behind it,
    and in how many of the loop's iterations it happens (once or every step).
    """

    id = "HOST004"
    extra_type = JitExtra
    name = "host.jit-compilation"
    verdict_kind = "jit"
    next_step = "compile once and cache (warm up before measuring, persistent kernel caches)"
    category = "host"
    requires = ("kernels",)
    thresholds = {"min_idle_us": Threshold(1000.0, "us", "report when the idle inside compilation adds up to at "
                                                         "least this", minimum=0.0, maximum=MAX_US)}
    summary = "GPU idle while the host compiles or loads code (JIT, NVRTC, Triton, Inductor, nvFuser)"
    advice = (
        "Once: cache the compiled code (``CUDA_CACHE_PATH`` and a large ``CUDA_CACHE_MAXSIZE`` for PTX "
        "JIT, Inductor's and Triton's caches, nvFuser's), compile ahead of time (build for the GPU's "
        "architecture, AOT compilation) and warm up before timing. Every step: find what triggers "
        "recompilation (dynamic shapes, guards failing; ``TORCH_LOGS=recompiles``) and pad or mark shapes"
        " dynamic.")
    owns_idle = ("jit_module",)

    def text(self, c: Claim, idle: int, cadence: str) -> tuple[str, str, JitExtra]:
        every = c.iterations > 1 and 2 * c.iterations_with >= c.iterations
        of = f"in {fmt.count(c.iterations_with)} of {fmt.count(c.iterations)} iterations"
        when = (f"{of}: recompiled every step" if every else of if c.iterations else "outside any loop")
        return (
            f"GPU idle {fmt_ms(c.ns)} while the host compiles or loads code ({_names(c, 2)})",
            f"{fmt_ms(c.ns)} of GPU idle inside compilation or module loading, {when}: "
            + "; ".join(f"{n} {fmt_ms(ns)} (x{fmt.count(k)})" for n, ns, k in c.names[:5]) + ".",
            claimed(JitExtra, c, every_step=every))
