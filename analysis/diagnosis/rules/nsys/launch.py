"""KRN001: launch-bound work, long runs of short kernels with the GPU idle between them."""

from __future__ import annotations

import numpy as np

from analysis import fmt
from analysis.diagnosis.findings import Evidence, Finding
from analysis.diagnosis.launches import launch_summary
from analysis.diagnosis.rules.base import MAX_US, RoundTrip, Rule, RuleContext, Threshold
from analysis.diagnosis.rules.nsys.common import fmt_ms, nvtx_at, pct, report_span_ns
from analysis.diagnosis.rules.nsys.gaps import (
    KernelRun,
    KernelRuns,
    OwnedUnit,
    krn_idle_runs,
    owned,
    ownership_params,
)
from analysis.model.trace import Trace
from analysis.results import LaunchBoundExtra


def _first_names(trace: Trace, runs: list[KernelRun]) -> list[str | None]:
    """The name of the kernel that opens each run of a bounded sample (one equality join)."""
    if not runs:
        return []
    def lit(v: int | None) -> str:  # a unit's pid or device is NULL in exports that lack them
        return "NULL::BIGINT" if v is None else str(int(v))

    values = ", ".join(f"({i}, {lit(r.pid)}, {lit(r.device)}, {int(r.start_ns)})" for i, r in enumerate(runs))
    found = dict(trace.sql(f"""
        WITH pts(i, pid, device, t) AS (VALUES {values})
        SELECT i, MIN(k.name) FROM pts JOIN kernels k ON k.pid IS NOT DISTINCT FROM pts.pid
                                                    AND k.device IS NOT DISTINCT FROM pts.device
                                                    AND k.start_ns = pts.t
        GROUP BY i"""))  # noqa: S608 - integers only
    return [found.get(i) for i in range(len(runs))]


class LaunchBound(Rule):
    """Launch-bound kernels: runs of very short kernels that the host cannot launch fast enough.

    *Why it matters*: launching a kernel costs the host a few microseconds; when kernels run for less
    than that, the GPU finishes each before the next arrives and idles between them.

    *How it is detected*: per process and device, kernels in start order; a run is a maximal stretch of
    kernels shorter than ``short_kernel_us`` with no longer kernel in between, counted when it has at
    least ``min_run_kernels`` kernels. Impact: the idle gaps inside the runs (NVIDIA's pairing), except
    gaps a blocking sync or copy explains (SYNC001, MEM002) and gaps long enough to be GPU001's.

    What a CUDA graph would save (``graph_saving_ns``, an estimate beside the impact, not a second
    impact): one graph launch replaces a run's N stream launches, so the N - 1 launches it removes each
    stop costing the host the measured per-launch overhead, the median duration of the report's stream
    launch calls (``analysis.diagnosis.launches``: ``cudaLaunchKernel``/``cuLaunchKernel`` calls joined to their
    kernels by pid and correlation id); the GPU cannot gain more than the run's idle. Per run:
    ``min(idle_ns, (N - 1) * per_launch_overhead_ns)``, summed over the runs. Absent (None) when the
    report has no CUDA API trace to measure launches with (``nsys profile --trace=cuda``).
    """

    id = "KRN001"
    extra_type = LaunchBoundExtra
    gap_role = "short_runs"
    name = "kernel.launch-bound"
    verdict_kind = "launch_bound"
    next_step = "capture the kernel sequence in a CUDA graph or fuse the small kernels"
    round_trip = RoundTrip("between launches", "", whole=True)
    category = "kernel"
    requires = ("kernels",)
    thresholds = {
        "short_kernel_us": Threshold(10.0, "us",
                                     "a kernel shorter than this is short", minimum=0.0, maximum=MAX_US),
        "min_run_kernels": Threshold(20.0, "count",
                                     "fewest consecutive short kernels that make a run",
                                     minimum=1.0, maximum=1e9),
        "min_idle_us": Threshold(100.0, "us", "report when the idle inside runs adds up to at least this",
                                 minimum=0.0, maximum=MAX_US),
    }
    summary = "Runs of short kernels with the GPU idle between launches"
    advice = (
        "Capture the repeated sequence in a CUDA graph (``torch.cuda.graphs``, "
        "``cudaStreamBeginCapture``), fuse elementwise kernels (``torch.compile``, custom fused kernels),"
        " or give each kernel more work (larger batches, fewer and bigger launches).")

    def check_report(self, trace: Trace, ctx: RuleContext) -> list[Finding]:
        units = owned(trace, ctx.all_params, ctx.claimers)
        rows = krn_idle_runs(units)
        total = int(rows.idle_ns.sum())
        if not len(rows) or total < ctx.params["min_idle_us"] * 1000:
            return []
        kernels = int(rows.kernels.sum())
        busy = int(rows.kernel_ns.sum())
        top = rows.top(20)
        first = _first_names(trace, top)  # the name of the kernel that opens each run
        nvtx = nvtx_at(trace, [(r.pid, r.start_ns) for r in top])
        evidence = tuple(
            Evidence(start_ns=r.start_ns, end_ns=r.end_ns, device=r.device, pid=r.pid, rank=trace.rank, name=name,
                     nvtx=v, value_ns=r.idle_ns, detail={"kernels": r.kernels, "kernel_ns": r.kernel_ns})
            for r, name, v in zip(top, first, nvtx, strict=True))
        share = pct(total, report_span_ns(trace))
        overhead, saving = graph_saving(trace, rows)
        advice = ("Capture the repeated kernel sequence in a CUDA graph, fuse small kernels (torch.compile, "
                  "custom fused kernels), or give each launch more work.")
        if overhead is not None and saving is not None:
            advice += (f" Measured launch overhead: {fmt.duration(overhead)} per stream launch; capturing these "
                       f"runs as CUDA graphs would save up to {fmt_ms(saving)} of the idle.")
        return [Finding(
            rule_id=self.id,
            title=f"Launch-bound: {fmt.count(kernels)} short kernels in {fmt.count(len(rows))} run(s), GPU idle {fmt_ms(total)}",
            message=(f"{fmt.count(len(rows))} run(s) of kernels under {fmt.exact(ctx.params['short_kernel_us'])} us ({fmt.count(kernels)} kernels, "
                     f"{fmt_ms(busy)} of kernel time) left the GPU idle {fmt_ms(total)} between launches"
                     + (f" ({fmt.pct(share)} of the GPU-active span)." if share is not None else ".")),
            impact_ns=total, impact_pct=share,
            advice=advice, evidence=evidence, evidence_total=len(rows), report=trace.label, rank=trace.rank,
            extra=LaunchBoundExtra(
                runs=len(rows), short_kernels=kernels, short_kernel_ns=busy, per_launch_overhead_ns=overhead,
                graph_saving_ns=saving,
                **short_gap_idle(units, int(ownership_params(ctx.all_params, ctx.claimers)["min_gap_ns"]))),
        )]


def short_gap_idle(units: list[OwnedUnit], long_ns: int) -> dict[str, int]:
    """The idle in the window's gaps shorter than GPU001's long gap (``short_gap_idle_ns``, ``short_gaps``): the
    per-launch round trip of the host, whichever call (launch, sync, copy, allocation) or host code sits in each
    gap. The cost of a launch-bound loop is all of it, not only the gaps inside runs of short kernels."""
    ns = n = 0
    for u in units:
        d = u.gap_end - u.gap_start
        short = d < long_ns
        ns += int(d[short].sum())
        n += int(short.sum())
    return {"short_gap_idle_ns": ns, "short_gaps": n}


def graph_saving(trace: Trace, rows: KernelRuns) -> tuple[int | None, int | None]:
    """(per-launch overhead, what graphs would save) for KRN001's runs ``rows``; (None, None) when no stream
    launch was measured."""
    stream = launch_summary(trace).stream
    if stream is None:
        return None, None
    overhead = int(stream.call_median_ns)
    return overhead, int(np.minimum(rows.idle_ns, (rows.kernels - 1) * overhead).sum())
