"""Interval algebra over GPU activity as set-based DuckDB SQL: NVIDIA's gap pairing and union lengths.

Everything here returns SQL text over the normalized tables, so that rules and summaries compose it in
one query and DuckDB runs it with window functions (never per-row Python over millions of rows).
A GPU "unit" is ``(pid, device)``: ``device`` is the CUDA ordinal as one process saw it, so two
processes of one file that both say device 0 may be different GPUs and are never merged.
"""

from __future__ import annotations

from analysis.model.trace import Trace, inline_params

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
COMPUTE, NCCL, MEMORY = 0, 1, 2

def pairing_gaps_sql(ops_sql: str) -> str:
    """The idle gaps of NVIDIA's gpu_gaps pairing over ``ops_sql`` (columns pid, device, start_ns, end_ns).

    NVIDIA pairs, per (pid, device), the i-th smallest end with the (i+1)-th smallest start: between them
    as many operations have ended as started, so nothing runs. The same gaps, in one sort instead of two
    sorts and a join: in start order, an operation that starts after every earlier one has ended opens
    a gap from the latest of those ends. Concurrent streams are handled, leading and trailing idle never
    appear, and a zero-length operation splits a gap exactly as in the pairing (the corpus tests check
    the equality against a direct implementation of the pairing). Returns
    ``(pid, device, gap_start, gap_end, gap_ns)``.
    """
    return f"""
    WITH ops AS ({ops_sql}),
    o AS (
        SELECT pid, device, start_ns,
               MAX(end_ns) OVER (PARTITION BY pid, device ORDER BY start_ns
                                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
        FROM ops)
    SELECT pid, device, prev_end AS gap_start, start_ns AS gap_end, start_ns - prev_end AS gap_ns
    FROM o WHERE start_ns > prev_end
    """  # noqa: S608 - composed from constants


def union_of_sql(ops: str) -> str:
    """Per unit, the length of the union of the intervals of ``ops`` (pid, device, start_ns, end_ns).

    Union length = (last end - first start) - the idle gaps between them (the same pairing), so no
    sweep over every event is needed. Returns ``(pid, device, s0, s1, union_ns)``.
    """
    return f"""
    WITH sp AS (SELECT pid, device, MIN(start_ns) AS s0, MAX(end_ns) AS s1 FROM ({ops}) GROUP BY pid, device),
    gp AS (SELECT pid, device, SUM(gap_ns) AS idle FROM ({pairing_gaps_sql(ops)}) GROUP BY pid, device)
    SELECT sp.pid, sp.device, sp.s0, sp.s1, sp.s1 - sp.s0 - COALESCE(gp.idle, 0) AS union_ns
    FROM sp LEFT JOIN gp ON gp.pid IS NOT DISTINCT FROM sp.pid AND gp.device IS NOT DISTINCT FROM sp.device
    """  # noqa: S608 - composed from constants


def table_exists(trace: Trace, name: str) -> bool:
    """Whether this open trace already has the temporary table ``name``."""
    return bool(trace.scalar(
        "SELECT count(*) FROM duckdb_tables() WHERE temporary AND table_name = $n", {"n": name}))


def temp_table(trace: Trace, name: str, sql: str, params: dict | None = None) -> str:
    """Materialize ``sql`` once per open trace as a temporary table (read-only files allow them)."""
    if not table_exists(trace, name):
        # Nothing here relies on row order (every reader sorts), so let DuckDB build in parallel freely.
        trace.con.execute("SET preserve_insertion_order = false")
        query, bound = inline_params(f'CREATE TEMP TABLE "{name}" AS {sql}', params)
        trace.con.execute(query, bound)
    return name
