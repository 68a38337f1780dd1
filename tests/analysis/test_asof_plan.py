"""Analysis connections never run an ASOF join as a nested loop (issue #43): DuckDB chooses the loop when it
estimates the left side under ``asof_loop_join_threshold`` rows, which its filter estimates do for the NVTX
ranges of the projection; the sort-merge ASOF join gives the same rows in a fraction of the time."""

from __future__ import annotations

from analysis.model import trace as trace_module
from analysis.model.nvtx_projection import PROJECTED_SQL
from analysis.model.trace import Trace
from tests.analysis.planting import ingested
from tests.conftest import corpus_file

EXPORT = "cupy-power-iteration.sqlite"  # 786 NVTX ranges, 3,689 kernels: the loop's case
DUCKDB_DEFAULT = 64


def _rows(trace: Trace, threshold: int) -> list[tuple]:
    trace.sql(f"SET asof_loop_join_threshold = {threshold}")
    return sorted(trace.sql(PROJECTED_SQL), key=lambda r: r[0])


def _plan(trace: Trace, threshold: int) -> str:
    trace.sql(f"SET asof_loop_join_threshold = {threshold}")
    return "\n".join(r[1] for r in trace.sql("EXPLAIN (FORMAT json) " + PROJECTED_SQL))


def test_an_analysis_connection_never_loops_an_asof_join() -> None:
    trace = Trace(ingested(corpus_file(EXPORT)), "t")
    try:
        assert (
            trace.scalar("SELECT current_setting('asof_loop_join_threshold')")
            == trace_module.ASOF_LOOP_JOIN_ROWS
        )
        assert trace_module.ASOF_LOOP_JOIN_ROWS == 0
        plan = _plan(trace, trace_module.ASOF_LOOP_JOIN_ROWS)
        assert "NESTED_LOOP_JOIN" not in plan and '"ASOF_JOIN"' in plan
        assert "NESTED_LOOP_JOIN" in _plan(trace, DUCKDB_DEFAULT)  # what the setting avoids on this export
    finally:
        trace.close()


def test_the_projection_is_the_same_with_either_plan() -> None:
    trace = Trace(ingested(corpus_file(EXPORT)), "t")
    try:
        window = trace.windowed(*trace.sql("SELECT MIN(start_ns), MAX(end_ns) FROM kernels")[0])
        try:
            for t in (trace, window):
                merged = _rows(t, trace_module.ASOF_LOOP_JOIN_ROWS)
                assert len(merged) == 786 if t is trace else len(merged) > 0
                assert any(r[-2] for r in merged)  # ranges that launched GPU work: the joins matched
                assert _rows(t, DUCKDB_DEFAULT) == merged
        finally:
            window.close()
    finally:
        trace.close()
