"""SYNC001: blocking host synchronization, costed by the GPU idle that follows it."""

from __future__ import annotations

from analysis import fmt
from analysis.diagnosis.findings import Evidence, Finding, SampledFunction
from analysis.diagnosis.rules.base import MAX_US, RoundTrip, Rule, RuleContext, Threshold
from analysis.diagnosis.rules.nsys.common import (
    SYNC_API_RE,
    api_name_in,
    fmt_ms,
    nvtx_at,
    pct,
    report_span_ns,
)
from analysis.diagnosis.rules.nsys.gaps import (
    OPENED_CODES,
    opened_count,
    owned,
    owned_sync_calls,
    owned_top,
    sync_names,
)
from analysis.diagnosis.rules.nsys.hostcpu import functions_in_marked
from analysis.diagnosis.rules.nsys.idle_claims import claims
from analysis.model.trace import Trace
from analysis.results import SyncExtra


class BlockingSync(Rule):
    """Blocking host synchronization: the host waits for the GPU to drain, then the GPU waits for the host.

    *Why it matters*: ``cudaDeviceSynchronize``, ``cudaStreamSynchronize``, ``cudaEventSynchronize``,
    ``cudaThreadSynchronize`` and the driver's ``cuCtxSynchronize``/``cuStreamSynchronize``/
    ``cuEventSynchronize`` stop the host until queued work finishes. Nothing new is queued meanwhile,
    so the GPU idles from the moment it drains until the host launches again.

    *How it is detected*: the idle anatomy paints each idle instant (NVIDIA's gaps, see GPU001) with what the
    launching threads were doing; the instants inside a blocking sync call are this rule's (``owns_idle``,
    see ``gaps``). Impact: that idle, the GPU waiting while the host waits for it (the part a non-blocking
    design recovers); the idle after the sync returned, while the host did something else, belongs to what
    it did. Also reported: the gaps that opened while a sync was in progress, how many sync calls there are
    and how many per kernel (one per kernel is the classic pattern).

    Evidence from CPU sampling (``--sample=cpu``): when the report has CPU samples, ``host_functions``
    lists the leaf functions the launching threads were sampled in during this rule's own gaps (HOST002's
    samples, most sampled first), so the finding says where the host was.
    """

    id = "SYNC001"
    extra_type = SyncExtra
    opened_in = "sync"
    name = "sync.blocking-host-sync"
    verdict_kind = "sync_bound"
    round_trip = RoundTrip("in synchronizations", "drop the per-kernel synchronizations (stream order suffices; a "
                                                  "flag on the device instead of a host check)")
    next_step = ("remove the blocking synchronizations from the loop (stream order, events, non-blocking checks) "
                 "so the host queues work ahead")
    category = "sync"
    requires = ("kernels", "cuda_api")
    thresholds = {
        "min_idle_us": Threshold(100.0, "us", "report when the idle inside sync calls adds up to at least this",
                                 minimum=0.0, maximum=MAX_US),
    }
    summary = "Blocking synchronize calls that leave the GPU idle"
    owns_idle = ("sync",)
    advice = (
        "Drop syncs used for timing/debugging; order work with events and streams (cudaStreamWaitEvent) "
        "and synchronize once per step; use async copies to pinned memory.")

    def check_report(self, trace: Trace, ctx: RuleContext) -> list[Finding]:
        cl = claims(trace, ctx.claimers).by_rule.get(self.id)
        total = cl.ns if cl is not None else 0
        if total <= 0 or total < ctx.params["min_idle_us"] * 1000:
            return []
        units = owned(trace, ctx.all_params, ctx.claimers)
        n = opened_count(units, type(self))
        n_owning = owned_sync_calls(units)
        calls = trace.sql(f"""SELECT name, COUNT(*), SUM(end_ns - start_ns) FROM cuda_api
                              WHERE {api_name_in(trace, SYNC_API_RE)} GROUP BY name ORDER BY 2 DESC""")  # noqa: S608 - escaped names
        n_calls = sum(int(c[1]) for c in calls)
        n_kernels = int(trace.scalar("SELECT COUNT(*) FROM kernels") or 0)
        per_kernel = n_calls / n_kernels if n_kernels else None
        top = owned_top(units, type(self))
        nvtx = nvtx_at(trace, [(g.pid, g.start_ns) for g in top])
        names = sync_names(trace, [(g.pid, g.start_ns) for g in top])
        evidence = tuple(
            Evidence(start_ns=g.start_ns, end_ns=g.end_ns, device=g.device, pid=g.pid, rank=trace.rank, name=name,
                     nvtx=v, value_ns=g.ns)
            for g, v, name in zip(top, nvtx, names, strict=True))
        if not evidence and cl is not None:  # idle inside syncs that started after their gap opened
            evidence = tuple(Evidence(name=nm, value_ns=ns, rank=trace.rank, detail={"calls": k})
                             for nm, ns, k in cl.names)
        share = pct(total, report_span_ns(trace))
        listed = ", ".join(f"{c[0]} x{fmt.count(c[1])}" for c in calls[:4])
        freq = f"; {fmt.number(per_kernel)} sync call(s) per kernel" if per_kernel is not None else ""
        return [Finding(
            rule_id=self.id,
            title=(f"GPU idle {fmt_ms(total)} inside blocking syncs, after {fmt.count(n_owning)} of {fmt.count(n_calls)} sync calls"
                   if n_owning else f"GPU idle {fmt_ms(total)} inside sync calls"
                   + (f" ({'/'.join(nm for nm, _, _ in cl.names[:3])})" if cl and cl.names else "")),
            message=((f"{fmt.count(n)} idle gap(s) followed {fmt.count(n_owning)} blocking synchronize call(s); " if n else "")
                     + f"{fmt_ms(total)} of GPU idle passed inside sync calls"
                     + (f" ({fmt.pct(share)} of the GPU-active span)" if share is not None else "")
                     + (": " + "; ".join(f"{nm} {fmt_ms(ns)} (x{fmt.count(k)})" for nm, ns, k in cl.names[:4]) if cl else "")
                     + ("" if n else "; no idle gap opened while one was in progress (each was called with the GPU "
                                     "already idle)")
                     + f". {fmt.count(n_calls)} sync call(s): {listed}{freq}."),
            impact_ns=total, impact_pct=share,
            advice=self.advice,
            evidence=evidence, evidence_total=int(n), report=trace.label, rank=trace.rank,
            extra=SyncExtra(
                sync_calls=n_calls, sync_calls_per_kernel=per_kernel, sync_call_names={c[0]: int(c[1]) for c in calls},
                idle_gaps=int(n), syncs_followed_by_idle=n_owning, idle_ns=total,
                names=[{"name": nm, "ns": ns, "calls": k} for nm, ns, k in cl.names] if cl else []),
            host_functions=_host(trace, units),
        )]


def _host(trace: Trace, units: list) -> list[SampledFunction] | None:
    """``host_functions``: where the launching threads' CPU was in the gaps that opened inside a sync (HOST002's
    samples), if sampled."""
    code = OPENED_CODES[str(BlockingSync.opened_in)]
    return functions_in_marked(trace, [(u.unit.pid, u.gap_start, u.gap_end, u.opened_in == code) for u in units]) or None
