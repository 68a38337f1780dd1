"""SYNC001: blocking host synchronization, costed by the GPU idle that follows it."""

from __future__ import annotations

from analysis.findings import Evidence, Finding
from analysis.rules.base import MAX_US, Rule, RuleContext, Threshold
from analysis.rules.nsys.common import SYNC_API_RE, api_name_in, fmt_ms, nvtx_at, pct, report_span_ns
from analysis.rules.nsys.gaps import OWNER_CODES, owned, owned_sync_calls, owned_top, owned_total, sync_names
from analysis.rules.nsys.hostcpu import functions_in
from analysis.trace import Trace


class BlockingSync(Rule):
    """Blocking host synchronization: the host waits for the GPU to drain, then the GPU waits for the host.

    *Why it matters*: ``cudaDeviceSynchronize``, ``cudaStreamSynchronize``, ``cudaEventSynchronize``,
    ``cudaThreadSynchronize`` and the driver's ``cuCtxSynchronize``/``cuStreamSynchronize``/
    ``cuEventSynchronize`` stop the host until queued work finishes. Nothing new is queued meanwhile,
    so the GPU idles from the moment it drains until the host launches again.

    *How it is detected*: for every idle gap (NVIDIA's pairing, see GPU001), a sync call of the same
    process that had started before the device went idle and was still running then owns the gap.
    Impact: the GPU idle from that moment until the next GPU work on that device (the part a
    non-blocking design recovers), not the duration of the sync calls. Also reported: how many sync
    calls there are and how many per kernel (one per kernel is the classic pattern).

    Evidence from CPU sampling (``--sample=cpu``): when the report has CPU samples, ``host_functions``
    lists the leaf functions the launching threads were sampled in during this rule's own gaps (HOST002's
    samples, most sampled first), so the finding says where the host was.
    """

    id = "SYNC001"
    name = "sync.blocking-host-sync"
    category = "sync"
    requires = ("kernels", "cuda_api")
    thresholds = {
        "min_idle_us": Threshold(100.0, "us", "report when the idle that follows syncs adds up to at least this",
                                 minimum=0.0, maximum=MAX_US),
    }
    summary = "Blocking synchronize calls that leave the GPU idle"
    advice = (
        "Drop syncs used for timing/debugging; order work with events and streams (cudaStreamWaitEvent) "
        "and synchronize once per step; use async copies to pinned memory.")

    def check_report(self, trace: Trace, ctx: RuleContext) -> list[Finding]:
        units = owned(trace, ctx.all_params)
        total, n = owned_total(units, self.id)
        if n == 0 or total < ctx.params["min_idle_us"] * 1000:
            return []
        n_owning = owned_sync_calls(units)
        calls = trace.sql(f"""SELECT name, COUNT(*), SUM(end_ns - start_ns) FROM cuda_api
                              WHERE {api_name_in(trace, SYNC_API_RE)} GROUP BY name ORDER BY 2 DESC""")  # noqa: S608 - escaped names
        n_calls = sum(int(c[1]) for c in calls)
        n_kernels = int(trace.scalar("SELECT COUNT(*) FROM kernels") or 0)
        per_kernel = n_calls / n_kernels if n_kernels else None
        top = owned_top(units, self.id)
        nvtx = nvtx_at(trace, [(g.pid, g.start_ns) for g in top])
        names = sync_names(trace, [(g.pid, g.start_ns) for g in top])
        evidence = tuple(
            Evidence(start_ns=g.start_ns, end_ns=g.end_ns, device=g.device, pid=g.pid, rank=trace.rank, name=name,
                     nvtx=v, value_ns=g.ns)
            for g, v, name in zip(top, nvtx, names, strict=True))
        share = pct(total, report_span_ns(trace))
        listed = ", ".join(f"{c[0]} x{c[1]}" for c in calls[:4])
        freq = f"; {per_kernel:.2f} sync call(s) per kernel" if per_kernel is not None else ""
        return [Finding(
            rule_id=self.id,
            title=f"Blocking syncs leave the GPU idle {fmt_ms(total)} after {n_owning} of {n_calls} sync calls",
            message=(f"{n} idle gap(s) followed {n_owning} blocking synchronize call(s), {fmt_ms(total)} in all"
                     + (f" ({share:.1f}% of the GPU-active span)" if share is not None else "")
                     + f". {n_calls} sync call(s): {listed}{freq}."),
            impact_ns=total, impact_pct=share,
            advice=self.advice,
            evidence=evidence, evidence_total=int(n), report=trace.label, rank=trace.rank,
            extra={"sync_calls": n_calls, "sync_calls_per_kernel": per_kernel,
                   "sync_call_names": {c[0]: int(c[1]) for c in calls}, "idle_gaps": int(n),
                   "syncs_followed_by_idle": n_owning, **_host(trace, units)},
        )]


def _host(trace: Trace, units: list) -> dict:
    """``host_functions``: where the launching threads' CPU was in SYNC001's gaps (HOST002's samples), if sampled."""
    code = OWNER_CODES["SYNC001"]
    found = functions_in(trace, [(u.unit.pid, u.gap_start[u.owner == code], u.gap_end[u.owner == code])
                                 for u in units])
    return {"host_functions": found} if found else {}
