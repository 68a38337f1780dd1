"""Analysis connections are bounded like the ingest: DuckDB threads and the memory limit
(GOODPUT_ANALYSIS_MEMORY_BYTES in the service) reach every report's connection and stay set."""

from __future__ import annotations

from analysis.api import analyze
from analysis.model.trace import DUCKDB_THREADS, ONE_THREAD_FILE_BYTES, Run
from tests.analysis.planting import ingested
from tests.conftest import corpus_file

EXPORT = "cupy-power-iteration.sqlite"


def _setting(con, name: str) -> str:
    return con.execute(f"SELECT current_setting('{name}')").fetchone()[0]


def test_memory_limit_and_threads_reach_the_connection():
    with Run.open([ingested(corpus_file(EXPORT))], memory_bytes=300 * 2**20) as run:
        con = run.traces[0].con
        assert _setting(con, "memory_limit") == "300.0 MiB"
        # A file under ONE_THREAD_FILE_BYTES gets one thread (faster on small files, tests/analysis/test_small_threads.py).
        small = run.traces[0].path.stat().st_size < ONE_THREAD_FILE_BYTES
        assert int(_setting(con, "threads")) == (1 if small else DUCKDB_THREADS)
        # Fetching arrays hands DuckDB's buffers back by setting the limit again: the same limit.
        run.traces[0].arrays("SELECT start_ns FROM kernels")
        assert _setting(con, "memory_limit") == "300.0 MiB"


def test_a_small_memory_limit_gives_the_same_analysis():
    path = ingested(corpus_file(EXPORT))
    small, default = analyze([path], memory_bytes=64 * 2**20).to_json(), analyze([path]).to_json()
    assert small["findings"] == default["findings"] and small["reports"] == default["reports"]
    assert default["findings"], "the export has findings to compare"



def test_duckdb_draws_no_progress_bar_on_stdout():
    # DuckDB draws its bar on stdout for any query past progress_bar_time (2 s), also on a pipe:
    # `goodput analyze --format json` on a 10M-kernel export got "100% ▕███▏" in its JSON. Every analysis
    # connection (a report's, a windowed report's, the run's) turns it off.
    with Run.open([ingested(corpus_file(EXPORT))]) as run:
        window = run.traces[0].windowed(0, 2**62)
        for con in (run.traces[0].con, window.con, run.con):
            assert _setting(con, "enable_progress_bar") is False
        window.close()
