"""Interval algebra over GPU activity as set-based DuckDB SQL (unions, sweeps, NVIDIA's gap pairing).

Everything here returns SQL text over the normalized tables, so that rules and summaries compose it in
one query and DuckDB runs it with window functions (never per-row Python over millions of rows).
A GPU "unit" is ``(pid, device)``: ``device`` is the CUDA ordinal as one process saw it, so two
processes of one file that both say device 0 may be different GPUs and are never merged.
"""

from __future__ import annotations

from analysis.trace import Trace

# GPU operations of every kind, with the category the breakdown needs. Zero-length rows are kept:
# they change no union but still mark "work arrived" for gap pairing, as in nsys.
GPU_OPS_SQL = """
    SELECT pid, device, start_ns, end_ns,
           CASE WHEN category = 'nccl' THEN 'nccl' ELSE 'compute' END AS cat
    FROM kernels WHERE start_ns IS NOT NULL AND end_ns >= start_ns
    UNION ALL
    SELECT pid, device, start_ns, end_ns, 'memory' FROM memcpy
    WHERE start_ns IS NOT NULL AND end_ns >= start_ns
    UNION ALL
    SELECT pid, device, start_ns, end_ns, 'memory' FROM memset
    WHERE start_ns IS NOT NULL AND end_ns >= start_ns
"""

# NVIDIA's gpu_gaps semantics: profiler overhead of a process counts as busy on each of its devices,
# clipped to the device's span (first GPU operation's start to last one's end), so overhead before or
# after the GPU work never creates a gap of its own.
OVERHEAD_OPS_SQL = """
    SELECT o.pid, u.device, GREATEST(o.start_ns, u.u0) AS start_ns, LEAST(o.end_ns, u.u1) AS end_ns,
           'overhead' AS cat
    FROM overhead o
    JOIN (SELECT pid, device, MIN(start_ns) AS u0, MAX(end_ns) AS u1 FROM gpu_ops GROUP BY pid, device) u
      ON u.pid = o.pid AND o.start_ns < u.u1 AND o.end_ns > u.u0
    WHERE o.start_ns IS NOT NULL AND o.end_ns >= o.start_ns
"""

# NVIDIA's pairing: per (pid, device), the i-th smallest end against the (i+1)-th smallest start.
# Between them exactly i operations have started and i have ended, so the device is idle there;
# this handles concurrent streams without building a union. Leading/trailing idle never appears.
GAPS_SQL = f"""
    WITH gpu_ops AS ({GPU_OPS_SQL}),
    ops AS (SELECT * FROM gpu_ops UNION ALL {OVERHEAD_OPS_SQL}),
    starts AS (
        SELECT pid, device, start_ns,
               ROW_NUMBER() OVER (PARTITION BY pid, device ORDER BY start_ns) AS rn
        FROM ops),
    ends AS (
        SELECT pid, device, end_ns,
               ROW_NUMBER() OVER (PARTITION BY pid, device ORDER BY end_ns) AS rn
        FROM ops)
    SELECT e.pid, e.device, e.end_ns AS gap_start, s.start_ns AS gap_end,
           s.start_ns - e.end_ns AS gap_ns
    FROM starts s JOIN ends e
      ON s.rn - 1 = e.rn AND s.pid IS NOT DISTINCT FROM e.pid AND s.device IS NOT DISTINCT FROM e.device
    WHERE s.start_ns > e.end_ns
"""  # noqa: S608 - constants and server-made names

# Sweep line over the categories: each elementary segment between two consecutive event times knows
# how many compute, nccl and memory operations run in it. One sort of 2N events gives every partition.
SEGMENTS_SQL = f"""
    WITH gpu_ops AS ({GPU_OPS_SQL}),
    ev AS (
        SELECT pid, device, start_ns AS t,
               (cat = 'compute')::INT AS dc, (cat = 'nccl')::INT AS dn, (cat = 'memory')::INT AS dm
        FROM gpu_ops
        UNION ALL
        SELECT pid, device, end_ns, -(cat = 'compute')::INT, -(cat = 'nccl')::INT, -(cat = 'memory')::INT
        FROM gpu_ops),
    agg AS (
        SELECT pid, device, t, SUM(dc) AS dc, SUM(dn) AS dn, SUM(dm) AS dm
        FROM ev GROUP BY pid, device, t),
    run AS (
        SELECT pid, device, t AS seg_start,
               LEAD(t) OVER w AS seg_end,
               SUM(dc) OVER w_cum AS nc, SUM(dn) OVER w_cum AS nn, SUM(dm) OVER w_cum AS nm
        FROM agg
        WINDOW w AS (PARTITION BY pid, device ORDER BY t),
               w_cum AS (PARTITION BY pid, device ORDER BY t ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW))
    SELECT pid, device, seg_start, seg_end, seg_end - seg_start AS seg_ns, nc, nn, nm
    FROM run WHERE seg_end IS NOT NULL AND seg_end > seg_start
"""  # noqa: S608 - constants and server-made names


def union_sql(source_sql: str) -> str:
    """SQL merging the intervals of ``source_sql`` (columns pid, device, start_ns, end_ns) per unit.

    Returns rows ``(pid, device, start_ns, end_ns)`` that do not overlap; touching intervals merge.
    """
    return f"""
    WITH src AS ({source_sql}),
    flagged AS (
        SELECT pid, device, start_ns, end_ns,
               CASE WHEN start_ns <= MAX(end_ns) OVER (
                        PARTITION BY pid, device ORDER BY start_ns, end_ns
                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
                    THEN 0 ELSE 1 END AS is_new
        FROM src),
    grouped AS (
        SELECT *, SUM(is_new) OVER (PARTITION BY pid, device ORDER BY start_ns, end_ns
                                    ROWS UNBOUNDED PRECEDING) AS island
        FROM flagged)
    SELECT pid, device, MIN(start_ns) AS start_ns, MAX(end_ns) AS end_ns
    FROM grouped GROUP BY pid, device, island
    """  # noqa: S608 - constants and server-made names


def temp_table(trace: Trace, name: str, sql: str, params: dict | None = None) -> str:
    """Materialize ``sql`` once per open trace as a temporary table (read-only files allow them)."""
    exists = trace.scalar(
        "SELECT count(*) FROM duckdb_tables() WHERE temporary AND table_name = $n", {"n": name})
    if not exists:
        trace.con.execute(f'CREATE TEMP TABLE "{name}" AS {sql}', params or {})
    return name


def gpu_units(trace: Trace) -> list[tuple[int | None, int | None]]:
    """The (pid, device) pairs with any GPU operation, in order."""
    return trace.sql(f"SELECT DISTINCT pid, device FROM ({GPU_OPS_SQL}) ORDER BY 1, 2")  # noqa: S608 - constants and server-made names
