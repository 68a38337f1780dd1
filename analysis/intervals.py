"""Interval algebra over GPU activity as set-based DuckDB SQL: one sweep gives the breakdown and the gaps.

Everything here returns SQL text over the normalized tables, so that rules and summaries compose it in
one query and DuckDB runs it with window functions (never per-row Python over millions of rows).
A GPU "unit" is ``(pid, device)``: ``device`` is the CUDA ordinal as one process saw it, so two
processes of one file that both say device 0 may be different GPUs and are never merged.
"""

from __future__ import annotations

from analysis.trace import Trace

# GPU operations of every kind, with the category code the breakdown needs. Zero-length rows are kept:
# they change no union but still mark "work arrived" for gap pairing, as in nsys.
GPU_OPS_SQL = """
    SELECT pid, device, start_ns, end_ns, CASE WHEN category = 'nccl' THEN 1 ELSE 0 END::UTINYINT AS cat
    FROM kernels WHERE start_ns IS NOT NULL AND end_ns >= start_ns
    UNION ALL
    SELECT pid, device, start_ns, end_ns, 2::UTINYINT FROM memcpy
    WHERE start_ns IS NOT NULL AND end_ns >= start_ns
    UNION ALL
    SELECT pid, device, start_ns, end_ns, 2::UTINYINT FROM memset
    WHERE start_ns IS NOT NULL AND end_ns >= start_ns
"""
# Category codes (small integers keep the sweep's sort and sums cheap).
COMPUTE, NCCL, MEMORY, OVERHEAD = 0, 1, 2, 3

# NVIDIA's gpu_gaps semantics: profiler overhead of a process counts as busy on each of its devices,
# clipped to the device's span (first GPU operation's start to last one's end), so overhead before or
# after the GPU work never creates a gap of its own.
OVERHEAD_OPS_SQL = """
    SELECT o.pid, u.device, GREATEST(o.start_ns, u.u0) AS start_ns, LEAST(o.end_ns, u.u1) AS end_ns,
           3::UTINYINT AS cat
    FROM overhead o
    JOIN (SELECT pid, device, MIN(start_ns) AS u0, MAX(end_ns) AS u1 FROM gpu_ops GROUP BY pid, device) u
      ON u.pid = o.pid AND o.start_ns < u.u1 AND o.end_ns > u.u0
    WHERE o.start_ns IS NOT NULL AND o.end_ns >= o.start_ns
"""

# Sweep line over every unit: each elementary segment between two consecutive event times knows how
# many compute, nccl, memory and profiler-overhead operations run in it. One sort of the 2N events
# gives the breakdown (any partition of the span) and the idle gaps at once.
#
# The gaps equal NVIDIA's gpu_gaps pairing (the i-th smallest end against the (i+1)-th smallest start
# per process and device): both find the stretches where as many operations have ended as started,
# i.e. where every counter is zero; a zero-length operation splits a gap in both. The corpus tests
# check the equality against a direct implementation of the pairing.
SEGMENTS_SQL = f"""
    WITH gpu_ops AS ({GPU_OPS_SQL}),
    ops AS (SELECT * FROM gpu_ops UNION ALL {OVERHEAD_OPS_SQL}),
    ev AS (
        SELECT pid, device, start_ns AS t, (cat = 0)::TINYINT AS dc, (cat = 1)::TINYINT AS dn,
               (cat = 2)::TINYINT AS dm, (cat = 3)::TINYINT AS dox
        FROM ops
        UNION ALL
        SELECT pid, device, end_ns, -(cat = 0)::TINYINT, -(cat = 1)::TINYINT, -(cat = 2)::TINYINT,
               -(cat = 3)::TINYINT
        FROM ops),
    run AS (
        -- One global sort by unit and time (parallel, unlike a single PARTITION BY). Running sums need no
        -- reset between units: each unit's +1/-1 events sum to zero. Among events at the same time only
        -- the last carries the full state to the next time; the others make zero-length segments.
        SELECT pid, device, t AS seg_start, LEAD(t) OVER w AS seg_end,
               LEAD(pid) OVER w AS next_pid, LEAD(device) OVER w AS next_device,
               SUM(dc) OVER w AS nc, SUM(dn) OVER w AS nn, SUM(dm) OVER w AS nm, SUM(dox) OVER w AS no
        FROM ev
        WINDOW w AS (ORDER BY pid, device, t ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW))
    SELECT pid, device, seg_start, seg_end, seg_end - seg_start AS seg_ns,
           nc::INT AS nc, nn::INT AS nn, nm::INT AS nm, no::INT AS no
    FROM run WHERE seg_end > seg_start
      AND next_pid IS NOT DISTINCT FROM pid AND next_device IS NOT DISTINCT FROM device
"""  # noqa: S608 - constants only


def segments_table(trace: Trace) -> str:
    """Temp table ``_gp_segments`` of the sweep (see ``SEGMENTS_SQL``), built once per open trace."""
    return temp_table(trace, "_gp_segments", SEGMENTS_SQL)


# Idle gaps (NVIDIA's semantics, see above) from the segments table.
GAPS_SQL = """
    SELECT pid, device, seg_start AS gap_start, seg_end AS gap_end, seg_ns AS gap_ns
    FROM _gp_segments WHERE nc = 0 AND nn = 0 AND nm = 0 AND no = 0
"""


def temp_table(trace: Trace, name: str, sql: str, params: dict | None = None) -> str:
    """Materialize ``sql`` once per open trace as a temporary table (read-only files allow them)."""
    exists = trace.scalar(
        "SELECT count(*) FROM duckdb_tables() WHERE temporary AND table_name = $n", {"n": name})
    if not exists:
        # Nothing here relies on row order (every reader sorts), so let DuckDB build in parallel freely.
        trace.con.execute("SET preserve_insertion_order = false")
        trace.con.execute(f'CREATE TEMP TABLE "{name}" AS {sql}', params or {})
    return name
