"""NVTX ranges projected onto the GPU: which GPU operations each host range launched, and when they ran."""

from __future__ import annotations

from analysis.model.trace import Trace
from analysis.result_parts import NvtxRange, NvtxSummary

# A GPU operation belongs to a range when its launching API call (joined on pid + correlation id, as
# correlation ids are unique only per process) starts inside the range on the range's thread.
#
# Set-based without a range join (a thread can hold 10^6 ranges and 10^6 launches, and an interval join
# on (pid, tid) would compare every pair): a thread's operations are numbered in launch order, so the
# operations inside a range are the contiguous run (lo, hi], where lo counts those launched before the
# range starts and hi those launched up to its end (two ASOF joins on the per-launch-time running counts).
# Count and summed duration are differences of running totals; first start and last end are window
# MIN/MAX over a per-range frame of that run, in a stream holding one row per range just before operation
# lo + 1. The frame is counted in ROWS (the span up to operation hi's row): DuckDB evaluates variable ROWS
# frames with a segment tree, while a variable RANGE frame was 20x slower on 10^6 ranges.
PROJECTED_SQL = """
    WITH r AS (
        SELECT ROW_NUMBER() OVER (ORDER BY pid, tid, start_ns, end_ns) AS rid,
               pid, tid, start_ns, end_ns, text, domain, kind, nesting
        FROM nvtx WHERE kind <> 'mark' AND end_ns IS NOT NULL AND end_ns >= start_ns
    ),
    ops AS (
        SELECT a.pid, a.tid, a.start_ns AS api_ns, g.start_ns, g.end_ns,
               ROW_NUMBER() OVER (PARTITION BY a.pid, a.tid ORDER BY a.start_ns, g.start_ns, g.end_ns) AS idx
        FROM (SELECT pid, correlation_id, start_ns, end_ns FROM kernels
              UNION ALL SELECT pid, correlation_id, start_ns, end_ns FROM memcpy
              UNION ALL SELECT pid, correlation_id, start_ns, end_ns FROM memset) g
        JOIN cuda_api a ON a.pid = g.pid AND a.correlation_id = g.correlation_id
        SEMI JOIN (SELECT DISTINCT pid, tid FROM r) t ON t.pid = a.pid AND t.tid = a.tid
    ),
    cum AS (
        SELECT pid, tid, api_ns, MAX(idx) AS cnt, arg_max(cdur, idx) AS cdur FROM (
            SELECT pid, tid, api_ns, idx, SUM(end_ns - start_ns) OVER (
                PARTITION BY pid, tid ORDER BY idx ROWS UNBOUNDED PRECEDING) AS cdur FROM ops)
        GROUP BY pid, tid, api_ns
    ),
    lo AS (
        SELECT r.rid, COALESCE(c.cnt, 0) AS lo, COALESCE(c.cdur, 0) AS lo_dur
        FROM r ASOF LEFT JOIN cum c ON c.pid = r.pid AND c.tid = r.tid AND r.start_ns > c.api_ns
    ),
    hi AS (
        SELECT r.rid, COALESCE(c.cnt, 0) AS hi, COALESCE(c.cdur, 0) AS hi_dur
        FROM r ASOF LEFT JOIN cum c ON c.pid = r.pid AND c.tid = r.tid AND r.end_ns >= c.api_ns
    ),
    runs AS (SELECT rid, lo, hi - lo AS n, hi_dur - lo_dur AS dur FROM lo JOIN hi USING (rid)),
    stream AS (
        SELECT pid, tid, idx AS pos, 1 AS k, start_ns, end_ns, NULL::BIGINT AS rid, NULL::BIGINT AS last FROM ops
        UNION ALL
        SELECT r.pid, r.tid, runs.lo + 1, 0, NULL, NULL, runs.rid, runs.lo + runs.n
        FROM runs JOIN r USING (rid) WHERE runs.n > 0
    ),
    numbered AS (SELECT *, ROW_NUMBER() OVER (PARTITION BY pid, tid ORDER BY pos, k, rid) AS rn FROM stream),
    spans AS (
        SELECT n.rid, o.rn - n.rn AS span FROM numbered n
        JOIN numbered o ON o.pid = n.pid AND o.tid = n.tid AND o.pos = n.last AND o.k = 1
        WHERE n.k = 0
    ),
    proj AS (
        SELECT rid, gpu_start, gpu_end FROM (
            SELECT rid, MIN(start_ns) OVER w AS gpu_start, MAX(end_ns) OVER w AS gpu_end
            FROM numbered LEFT JOIN spans USING (rid)
            WINDOW w AS (PARTITION BY pid, tid ORDER BY rn ROWS BETWEEN CURRENT ROW AND COALESCE(span, 0) FOLLOWING))
        WHERE rid IS NOT NULL
    )
    SELECT r.*, proj.gpu_start, proj.gpu_end, runs.n AS gpu_ops, CAST(runs.dur AS BIGINT) AS gpu_op_ns
    FROM r JOIN runs USING (rid) LEFT JOIN proj USING (rid)
"""


def projected_table(trace: Trace) -> str:
    """Temp table with one row per NVTX range and its GPU projection; returns its name."""
    from analysis.model.intervals import temp_table

    return temp_table(trace, "_gp_nvtx_proj", PROJECTED_SQL)


def nvtx_projection(trace: Trace, limit: int | None = 50) -> NvtxSummary:
    """Per NVTX range name (domain + text): host time and the projected GPU time.

    Returns whether the report has NVTX and its ranges (``NvtxRange``: domain, text, count, cpu_total_ns,
    gpu_ops, gpu_projected_ns, gpu_op_ns), largest projected GPU time first. ``gpu_projected_ns`` sums, over the instances,
    the time from the first to the last GPU operation the instance launched; ``gpu_op_ns`` sums those
    operations' own durations. ``has_nvtx`` is False (and ``top_ranges`` empty) when the report has no NVTX.
    """
    if not trace.has_rows("nvtx"):
        return NvtxSummary(has_nvtx=False, top_ranges=())
    table = projected_table(trace)
    rows = trace.sql(f"""
        SELECT domain, text, COUNT(*), SUM(end_ns - start_ns), SUM(gpu_ops),
               COALESCE(SUM(gpu_end - gpu_start), 0), SUM(gpu_op_ns)
        FROM {table} GROUP BY domain, text
        ORDER BY 6 DESC, 4 DESC, text {'' if limit is None else 'LIMIT ' + str(int(limit))}""")  # noqa: S608
    return NvtxSummary(has_nvtx=True, top_ranges=tuple(
        NvtxRange(domain=r[0], text=r[1], count=int(r[2]), cpu_total_ns=int(r[3]), gpu_ops=int(r[4]),
                  gpu_projected_ns=int(r[5]), gpu_op_ns=int(r[6])) for r in rows))
