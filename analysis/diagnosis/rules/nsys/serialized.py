"""COMM004: NCCL kernels on the same stream as compute kernels, so that communication cannot overlap compute."""

from __future__ import annotations

import numpy as np

from analysis import fmt
from analysis.diagnosis.findings import Evidence, Finding
from analysis.diagnosis.rules.base import MAX_US, Rule, RuleContext, Threshold
from analysis.diagnosis.rules.nsys.common import fmt_ms, nvtx_at, pct, report_span_ns
from analysis.model.activity import union_ns, unit_ops
from analysis.model.intervals import COMPUTE, NCCL
from analysis.model.trace import Trace
from analysis.results import SerializedCommExtra

# Every NCCL kernel with its unit and whether a compute kernel of the same process and device ran on its
# stream; the same rows as the breakdown's NCCL operations, in the units' (start, end) order.
_NCCL_SQL = """
    WITH cs AS (SELECT DISTINCT pid, device, stream FROM kernels WHERE category = 'compute' AND stream IS NOT NULL)
    SELECT u.i::INTEGER AS unit, k.start_ns, k.end_ns, COALESCE(k.stream, -1) AS stream,
           (cs.stream IS NOT NULL) AS shared, k.rowid AS row_id
    FROM kernels k JOIN (VALUES {units}) u(i, pid, device)
      ON u.pid IS NOT DISTINCT FROM k.pid AND u.device IS NOT DISTINCT FROM k.device
    LEFT JOIN cs ON cs.pid IS NOT DISTINCT FROM k.pid AND cs.device IS NOT DISTINCT FROM k.device
                AND cs.stream = k.stream
    WHERE k.category = 'nccl' AND k.start_ns IS NOT NULL AND k.end_ns >= k.start_ns
"""


def serialized_exposed(trace: Trace) -> dict[tuple[int | None, int | None], dict]:
    """Per unit (pid, device) with NCCL kernels on a compute stream: ``{exposed_ns, nccl_ns, kernels,
    streams, rows}``, where exposed_ns = |compute u shared NCCL| - |compute| (the shared NCCL time with no
    compute running). Cached on the trace; COMM001 subtracts it from its own exposed time."""
    cached = trace.memo.get("comm004")
    if cached is not None:
        return cached
    out: dict[tuple[int | None, int | None], dict] = {}
    units = [u for u in unit_ops(trace) if len(u) and (u.cat == NCCL).any()]
    if units:
        values = ", ".join(f"({i}, {'NULL' if u.pid is None else int(u.pid)}, "
                           f"{'NULL' if u.device is None else int(u.device)})" for i, u in enumerate(units))
        d = trace.arrays(_NCCL_SQL.replace("{units}", values))
        order = np.lexsort((d["end_ns"], d["start_ns"], d["unit"]))
        d = {k: v[order] for k, v in d.items()}
        bounds = np.searchsorted(d["unit"], np.arange(len(units) + 1))
        for i, u in enumerate(units):
            shared = d["shared"][bounds[i]:bounds[i + 1]]
            if not shared.any():
                continue
            pos = np.flatnonzero(u.cat == NCCL)
            if len(pos) != len(shared):
                raise RuntimeError(f"unit {u.pid}/{u.device}: {len(pos)} NCCL ops but {len(shared)} NCCL kernels")
            compute = u.cat == COMPUTE
            covered = compute.copy()
            covered[pos[shared]] = True
            sl = slice(bounds[i], bounds[i + 1])
            dur = (d["end_ns"][sl] - d["start_ns"][sl])[shared]
            out[(u.pid, u.device)] = {
                "exposed_ns": union_ns(u.start, u.end, covered) - union_ns(u.start, u.end, compute),
                "nccl_ns": int(dur.sum()), "kernels": int(shared.sum()),
                "streams": sorted({int(s) for s in d["stream"][sl][shared]}),
                "rows": d["row_id"][sl][shared][np.argsort(-dur, kind="stable")[:20]].tolist()}
    trace.memo["comm004"] = out
    return out


class SerializedCommunication(Rule):
    """Communication serialized with compute: NCCL kernels queued on the same stream as compute kernels.

    *Why it matters*: kernels of one stream run one after another, so a collective launched on the
    stream that also runs the model's kernels can never overlap them: every microsecond of it is
    added to the step. The same collective on its own stream (ordered with events) runs while
    compute proceeds.

    *How it is detected*: per process and device, the NCCL kernels whose stream also carries compute
    kernels of that process and device. Impact: their exposed time, the time such NCCL kernels run
    with no compute kernel running on the device (|compute u serialized NCCL| - |compute|, union
    lengths), reported when at least ``min_exposed_us``. Not detected yet: cross-stream dependencies
    (an event wait that makes a compute stream wait for a communication stream).

    Ownership: COMM004 > COMM001. This time is part of the breakdown's exposed communication; COMM001
    reports the rest (the breakdown itself is unchanged). Kernel time, never idle or memory-only time.
    """

    id = "COMM004"
    extra_type = SerializedCommExtra
    name = "comm.serialized-with-compute"
    verdict_kind = "communication"
    next_step = "put NCCL on its own stream so it overlaps compute"
    category = "communication"
    requires = ("kernels",)
    thresholds = {"min_exposed_us": Threshold(100.0, "us", "report when the serialized NCCL time with no compute "
                                                            "beside it adds up to at least this",
                                              minimum=0.0, maximum=MAX_US)}
    summary = "NCCL kernels on the compute stream, unable to overlap compute"
    advice = (
        "Launch collectives on a dedicated communication stream and order them with events "
        "(cudaEventRecord + cudaStreamWaitEvent); in PyTorch rely on the process group's own streams.")

    def check_report(self, trace: Trace, ctx: RuleContext) -> list[Finding]:
        units = serialized_exposed(trace)
        total = sum(v["exposed_ns"] for v in units.values())
        if not units or total < ctx.params["min_exposed_us"] * 1000:
            return []
        rows = [r for v in units.values() for r in v["rows"]]
        top = trace.sql(f"""SELECT pid, device, stream, start_ns, end_ns, name FROM kernels
                            WHERE rowid IN ({", ".join(str(int(r)) for r in rows)})
                            ORDER BY end_ns - start_ns DESC, start_ns LIMIT 20""")  # noqa: S608 - integers
        nvtx = nvtx_at(trace, [(r[0], r[3]) for r in top])
        evidence = tuple(Evidence(start_ns=int(r[3]), end_ns=int(r[4]), device=r[1], stream=r[2], pid=r[0],
                                  rank=trace.rank, name=r[5], nvtx=n, value_ns=int(r[4]) - int(r[3]))
                         for r, n in zip(top, nvtx, strict=True))
        n = sum(v["kernels"] for v in units.values())
        nccl = sum(v["nccl_ns"] for v in units.values())
        share = pct(total, report_span_ns(trace))
        return [Finding(
            rule_id=self.id,
            title=f"{fmt.count(n)} NCCL kernel(s) share a stream with compute: {fmt_ms(total)} cannot overlap",
            message=(f"On {fmt.count(len(units))} device(s), {fmt.count(n)} NCCL kernel(s) ({fmt_ms(nccl)}) ran on a stream that also runs "
                     f"compute kernels; {fmt_ms(total)} of it ran with no compute beside it"
                     + (f" ({fmt.pct(share)} of the GPU-active span)." if share is not None else ".")),
            impact_ns=total, impact_pct=share,
            advice=self.advice,
            evidence=evidence, evidence_total=n, report=trace.label, rank=trace.rank,
            extra=SerializedCommExtra(devices=[
                {"pid": k[0], "device": k[1], "exposed_ns": v["exposed_ns"], "nccl_ns": v["nccl_ns"],
                 "kernels": v["kernels"], "streams": v["streams"]} for k, v in units.items()]),
        )]
