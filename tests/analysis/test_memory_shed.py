"""What keeps the 10M-kernel analysis under its memory target changes no number (issue #43): DuckDB's cached blocks
dropped after big results (``Trace.shed_cache``) and between rules where the resident set leaves too little room
(``Trace.make_room``), and the host functions of marked gaps looked up among all of a device's gaps instead of
copies of the marked ones (``functions_in_marked``)."""

from __future__ import annotations

import shutil
from pathlib import Path

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


@pytest.fixture(scope="module")
def grown(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A corpus export with 32 times its CUDA API calls: a few MiB of blocks to cache."""
    path = tmp_path_factory.mktemp("shed") / "grown.duckdb"
    shutil.copyfile(ingested(corpus_file("cupy-power-iteration.sqlite")), path)
    con = duckdb.connect(str(path))
    for _ in range(5):
        con.execute("INSERT INTO cuda_api SELECT * FROM cuda_api")
    con.close()
    return path


def test_shedding_drops_the_cached_blocks_and_keeps_the_limit(monkeypatch: pytest.MonkeyPatch, grown: Path) -> None:
    monkeypatch.setattr(trace_module, "SHED_FILE_BYTES", BIG_ENOUGH)
    monkeypatch.setattr(trace_module, "SHED_KEEP_BYTES", 0)
    trace = Trace(grown, "t")
    try:
        limit = trace.sql("SELECT current_setting('memory_limit')")[0][0]
        trace.sql("SELECT SUM(end_ns - start_ns), COUNT(DISTINCT name) FROM cuda_api")
        before = _cached(trace)
        trace.shed_cache()
        assert before > 2 << 20 and _cached(trace) <= 1 << 20  # DuckDB's smallest limit: 1 MiB
        assert trace.sql("SELECT current_setting('memory_limit')")[0][0] == limit
    finally:
        trace.close()


def test_room_is_made_only_where_the_next_rule_could_pass_the_peak(monkeypatch: pytest.MonkeyPatch, grown: Path) -> None:
    monkeypatch.setattr(trace_module, "SHED_FILE_BYTES", BIG_ENOUGH)
    monkeypatch.setattr(trace_module, "SHED_KEEP_BYTES", 0)
    resident = trace_module.resident_bytes()
    assert resident is not None and resident > 10 << 20  # this process, read from /proc
    trace = Trace(grown, "t")
    try:
        trace.sql("SELECT SUM(end_ns - start_ns), COUNT(DISTINCT name) FROM cuda_api")
        before = _cached(trace)
        # Room for DuckDB's whole memory limit above the resident set: the cache stays for the next rule.
        monkeypatch.setattr(trace_module, "SHED_PEAK_BYTES", resident + trace.memory_bytes + (256 << 20))
        trace.make_room()
        assert before > 2 << 20 and _cached(trace) == before
        # Less room than the limit: the blocks go, as ``shed_cache`` drops them.
        monkeypatch.setattr(trace_module, "SHED_PEAK_BYTES", resident + trace.memory_bytes - (1 << 20))
        trace.make_room()
        assert _cached(trace) <= 1 << 20  # DuckDB's smallest limit: 1 MiB
        # Where the resident set cannot be read, the blocks go before every rule.
        trace.sql("SELECT SUM(end_ns - start_ns), COUNT(DISTINCT name) FROM cuda_api")
        assert _cached(trace) > 1 << 20
        monkeypatch.setattr(trace_module, "SHED_PEAK_BYTES", 1 << 50)
        monkeypatch.setattr(trace_module, "resident_bytes", lambda: None)
        trace.make_room()
        assert _cached(trace) <= 1 << 20
    finally:
        trace.close()


def test_a_big_result_sheds_only_where_room_is_short(monkeypatch: pytest.MonkeyPatch, grown: Path) -> None:
    monkeypatch.setattr(trace_module, "SHED_FILE_BYTES", BIG_ENOUGH)
    monkeypatch.setattr(trace_module, "SHED_KEEP_BYTES", 0)
    monkeypatch.setattr(trace_module, "RELEASE_BYTES", 0)  # every result counts as big
    trace = Trace(grown, "t")
    try:
        monkeypatch.setattr(trace_module, "SHED_PEAK_BYTES", 1 << 50)
        got = trace.arrays("SELECT start_ns, end_ns FROM cuda_api ORDER BY start_ns")
        before = _cached(trace)
        assert before > 1 << 20 and len(got["start_ns"]) > 1000
        monkeypatch.setattr(trace_module, "SHED_PEAK_BYTES", 0)
        again = trace.arrays("SELECT start_ns, end_ns FROM cuda_api ORDER BY start_ns")
        assert _cached(trace) <= 1 << 20
        assert all(np.array_equal(got[k], again[k]) for k in got)
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
    monkeypatch.setattr(trace_module, "SHED_PEAK_BYTES", 0)  # before every rule too
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
