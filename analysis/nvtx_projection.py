"""NVTX ranges projected onto the GPU: which GPU operations each host range launched, and when they ran."""

from __future__ import annotations

from typing import Any

from analysis.trace import Trace

# A GPU operation belongs to a range when its launching API call (joined on pid + correlation id, as
# correlation ids are unique only per process) starts inside the range on the range's thread.
PROJECTED_SQL = """
    WITH r AS (
        SELECT ROW_NUMBER() OVER (ORDER BY pid, tid, start_ns, end_ns) AS rid,
               pid, tid, start_ns, end_ns, text, domain, kind, nesting
        FROM nvtx WHERE kind <> 'mark' AND end_ns IS NOT NULL AND end_ns >= start_ns
    ),
    ops AS (
        SELECT g.pid, g.start_ns, g.end_ns, a.tid, a.start_ns AS api_ns
        FROM (SELECT pid, correlation_id, start_ns, end_ns FROM kernels
              UNION ALL SELECT pid, correlation_id, start_ns, end_ns FROM memcpy
              UNION ALL SELECT pid, correlation_id, start_ns, end_ns FROM memset) g
        JOIN cuda_api a ON a.pid = g.pid AND a.correlation_id = g.correlation_id
    ),
    proj AS (
        SELECT r.rid, MIN(ops.start_ns) AS gpu_start, MAX(ops.end_ns) AS gpu_end, COUNT(*) AS gpu_ops,
               SUM(ops.end_ns - ops.start_ns) AS gpu_op_ns
        FROM r JOIN ops ON ops.pid = r.pid AND ops.tid = r.tid
                       AND ops.api_ns >= r.start_ns AND ops.api_ns <= r.end_ns
        GROUP BY r.rid
    )
    SELECT r.*, proj.gpu_start, proj.gpu_end, COALESCE(proj.gpu_ops, 0) AS gpu_ops,
           COALESCE(proj.gpu_op_ns, 0) AS gpu_op_ns
    FROM r LEFT JOIN proj USING (rid)
"""


def projected_table(trace: Trace) -> str:
    """Temp table with one row per NVTX range and its GPU projection; returns its name."""
    from analysis.intervals import temp_table

    return temp_table(trace, "_gp_nvtx_proj", PROJECTED_SQL)


def nvtx_projection(trace: Trace, limit: int | None = 50) -> dict[str, Any]:
    """Per NVTX range name (domain + text): host time and the projected GPU time.

    Returns ``{has_nvtx, ranges: [{domain, text, count, cpu_total_ns, gpu_ops, gpu_projected_ns,
    gpu_op_ns}]}``, largest projected GPU time first. ``gpu_projected_ns`` sums, over the instances,
    the time from the first to the last GPU operation the instance launched; ``gpu_op_ns`` sums those
    operations' own durations. ``has_nvtx`` is False (and ``ranges`` empty) when the report has no NVTX.
    """
    if not trace.has_rows("nvtx"):
        return {"has_nvtx": False, "ranges": []}
    table = projected_table(trace)
    rows = trace.sql(f"""
        SELECT domain, text, COUNT(*), SUM(end_ns - start_ns), SUM(gpu_ops),
               COALESCE(SUM(gpu_end - gpu_start), 0), SUM(gpu_op_ns)
        FROM {table} GROUP BY domain, text
        ORDER BY 6 DESC, 4 DESC, text {'' if limit is None else 'LIMIT ' + str(int(limit))}""")  # noqa: S608
    return {"has_nvtx": True, "ranges": [
        {"domain": r[0], "text": r[1], "count": int(r[2]), "cpu_total_ns": int(r[3]), "gpu_ops": int(r[4]),
         "gpu_projected_ns": int(r[5]), "gpu_op_ns": int(r[6])} for r in rows]}
