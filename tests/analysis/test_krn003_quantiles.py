"""KRN003's per-shape statistics equal DuckDB's scalar quantile_disc over the raw export's durations, and the
temporary table of shapes (outliers.sql: the joins build on it instead of on the kernels) is gone after the check.

Gaussian elimination (gaussian-threadsync, Rodinia): Fan2's durations spread (a trend), so KRN003 reports shapes.
"""

from __future__ import annotations

import sqlite3

import duckdb

from analysis.api import analyze
from analysis.diagnosis.rules.base import RuleContext, evaluate
from analysis.diagnosis.rules.nsys.outliers import _SHAPES, KernelOutliers
from analysis.diagnosis.rules.registry import default_registry
from analysis.model.trace import Run
from analysis.run.runner import make_context
from tests.analysis.nsys_helpers import ingested
from tests.conftest import corpus_file

SHORT = "gaussian-threadsync.sqlite"


def _raw_durations(name: str, grid: list[int], block: list[int]) -> list[int]:
    """The durations of one launch shape, straight from the export (the whole report: window "all")."""
    con = sqlite3.connect(f"file:{corpus_file(SHORT)}?mode=ro", uri=True)
    try:
        return [int(d) for (d,) in con.execute("""
            SELECT k."end" - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k
            JOIN StringIds s ON s.id = COALESCE(k.demangledName, k.shortName)
            WHERE s.value = ? AND k.gridX = ? AND k.gridY = ? AND k.gridZ = ? AND k.blockX = ? AND k.blockY = ?
              AND k.blockZ = ? AND k."end" >= k.start""", [name, *grid, *block])]
    finally:
        con.close()


def test_shapes_quantiles_equal_scalar_quantile_disc_on_the_raw_export() -> None:
    result = analyze([ingested(corpus_file(SHORT))], rules=["KRN003"], window="all").to_json()
    (f,) = [x for x in result["findings"] if x["rule_id"] == "KRN003"]
    assert f["shapes"]
    for s in f["shapes"]:
        durs = _raw_durations(s["name"], s["grid"], s["block"])
        row = duckdb.execute(
            "SELECT COUNT(*), SUM(d), quantile_disc(d, 0.1), quantile_disc(d, 0.5), quantile_disc(d, 0.9), MAX(d) "
            "FROM (SELECT UNNEST($1::BIGINT[]) AS d)", [durs]).fetchone()
        assert row is not None
        n, total, p10, p50, p90, mx = row
        assert (s["count"], s["total_ns"], s["p10_ns"], s["median_ns"], s["p90_ns"], s["max_ns"]) == (
            n, total, p10, p50, p90, mx), s["name"]


def test_the_temporary_table_of_shapes_is_dropped_after_the_check() -> None:
    ctx = make_context(window="all")
    with Run.open([ingested(corpus_file(SHORT))]) as run:
        found, results = evaluate(run, [KernelOutliers], RuleContext(run, all_params=ctx.all_params, window=ctx.spec,
                                                                   claimers=default_registry().idle_claimers()),
                                  ctx.all_params)
        assert results[0].status == "ok" and found
        left = run.traces[0].sql("SELECT count(*) FROM duckdb_tables() WHERE table_name = $t", {"t": _SHAPES})
        assert left == [(0,)]
