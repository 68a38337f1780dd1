"""What keeps the 10M-kernel analysis under its memory target changes no number (issue #43): DuckDB's cached blocks
dropped between rules and after big results (``Trace.shed_cache``), and the host functions of marked gaps looked
up among all of a device's gaps instead of copies of the marked ones (``functions_in_marked``)."""

from __future__ import annotations

import shutil

import duckdb
import numpy as np
import pytest

from analysis.api import analyze
from analysis.diagnosis.rules.nsys.gaps import owned
from analysis.diagnosis.rules.nsys.hostcpu import functions_in, functions_in_marked
from analysis.diagnosis.rules.registry import default_registry
from analysis.model import trace as trace_module
from analysis.model.trace import Trace
from tests.analysis.planting import ingested
from tests.conftest import corpus_file

BIG_ENOUGH = 0  # every file counts as big: the shedding runs on corpus exports


def _cached(trace: Trace) -> int:
    return int(trace.sql("SELECT COALESCE(SUM(memory_usage_bytes), 0) FROM duckdb_memory() "
                         "WHERE tag = 'BASE_TABLE'")[0][0])


def test_shedding_drops_the_cached_blocks_and_keeps_the_limit(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setattr(trace_module, "SHED_FILE_BYTES", BIG_ENOUGH)
    monkeypatch.setattr(trace_module, "SHED_KEEP_BYTES", 0)
    path = tmp_path / "grown.duckdb"
    shutil.copyfile(ingested(corpus_file("cupy-power-iteration.sqlite")), path)
    con = duckdb.connect(str(path))
    for _ in range(5):  # 32 times the calls: a few MiB of blocks to cache
        con.execute("INSERT INTO cuda_api SELECT * FROM cuda_api")
    con.close()
    trace = Trace(path, "t")
    try:
        limit = trace.sql("SELECT current_setting('memory_limit')")[0][0]
        trace.sql("SELECT SUM(end_ns - start_ns), COUNT(DISTINCT name) FROM cuda_api")
        before = _cached(trace)
        trace.shed_cache()
        assert before > 2 << 20 and _cached(trace) <= 1 << 20  # DuckDB's smallest limit: 1 MiB
        assert trace.sql("SELECT current_setting('memory_limit')")[0][0] == limit
    finally:
        trace.close()


def test_a_small_file_keeps_its_cache() -> None:
    trace = Trace(ingested(corpus_file("cupy-power-iteration.sqlite")), "t")
    try:
        trace.sql("SELECT SUM(end_ns - start_ns) FROM cuda_api")
        before = _cached(trace)
        trace.shed_cache()
        assert before > 0 and _cached(trace) == before
    finally:
        trace.close()


@pytest.mark.parametrize("name", ["cupy-power-iteration.sqlite", "vecadd-2026.sqlite"])
def test_the_analysis_with_shedding_is_the_analysis_without(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    path = ingested(corpus_file(name))
    plain = analyze([path]).to_json()
    monkeypatch.setattr(trace_module, "SHED_FILE_BYTES", BIG_ENOUGH)
    monkeypatch.setattr(trace_module, "SHED_KEEP_BYTES", 0)
    assert analyze([path]).to_json() == plain


def test_host_functions_of_marked_gaps_equal_those_of_the_copied_gaps() -> None:
    trace = Trace(ingested(corpus_file("cupy-power-iteration.sqlite")), "t")
    try:
        units = owned(trace, None, default_registry().idle_claimers())
        assert sum(len(u.gap_start) for u in units) > 100
        rng = np.random.default_rng(43)
        marks = [[np.ones(len(u.gap_start), dtype=bool) for u in units],
                 [u.owner == u.owner.max() for u in units],
                 [rng.random(len(u.gap_start)) < 0.3 for u in units],
                 [np.zeros(len(u.gap_start), dtype=bool) for u in units]]
        for marked in marks:
            pairs = list(zip(units, marked, strict=True))
            copied = functions_in(trace, [(u.unit.pid, u.gap_start[m], u.gap_end[m]) for u, m in pairs])
            got = functions_in_marked(trace, [(u.unit.pid, u.gap_start, u.gap_end, m) for u, m in pairs])
            assert got == copied
            if marked is marks[0]:
                assert got  # samples do fall in the gaps
    finally:
        trace.close()
