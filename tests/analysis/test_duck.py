"""Every DuckDB connection of the product is made by ``analysis.duck.connect``: bounded threads and memory,
and no progress bar (DuckDB draws it on stdout, which carries the CLI's JSON and the ingest child's
protocol)."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest

from analysis.duck import DUCKDB_THREADS, connect, publishing

ROOT = Path(__file__).resolve().parents[2]
# The product. Tests and benchmarks open DuckDB files on their own on purpose: they read what the product
# wrote, as an observer independent of it.
PRODUCT = ("analysis", "app", "workers", "goodput_cli", "scripts", "migrations")
CALL = re.compile(r"\bduckdb\s*\.\s*connect\s*\(")


def _setting(con, name: str) -> str:
    return con.execute("SELECT current_setting(?)", [name]).fetchone()[0]


def test_no_other_duckdb_connect_in_the_product():
    files = [p for d in PRODUCT if (ROOT / d).is_dir() for p in (ROOT / d).rglob("*.py")]
    assert len(files) > 100
    found = [f"{p.relative_to(ROOT)}:{n}" for p in files if p != ROOT / "analysis/duck.py"
             for n, line in enumerate(p.read_text().splitlines(), 1) if CALL.search(line)]
    assert found == [], "open DuckDB through analysis.duck.connect"
    assert CALL.search("con = duckdb.connect(str(path))")  # the pattern itself finds a call


def test_connect_sets_threads_memory_and_turns_the_progress_bar_off(tmp_path):
    with connect(memory_bytes=300 * 2**20) as con:
        assert int(_setting(con, "threads")) == DUCKDB_THREADS
        assert _setting(con, "enable_progress_bar") is False
        assert con.execute("SELECT current_setting('memory_limit')").fetchone()[0] in ("300.0 MiB", "314.5 MB")
    path = tmp_path / "x.duckdb"
    with connect(path, threads=3) as con:
        con.execute("CREATE TABLE t AS SELECT 1 AS a")
        assert int(_setting(con, "threads")) == 3
    with connect(path, read_only=True, memory_limit="64MB") as con:
        assert con.execute("SELECT a FROM t").fetchall() == [(1,)]
        assert _setting(con, "enable_progress_bar") is False
        assert _setting(con, "memory_limit") in ("61.0 MiB", "64.0 MB")


def test_publishing_writes_beside_and_renames_only_a_complete_file(tmp_path):
    out = tmp_path / "trace.duckdb"
    with publishing(out) as con:
        con.execute("CREATE TABLE t AS SELECT 1 AS a")
        assert not out.exists()  # written under a temporary name until the block ends
        assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.duckdb"]
    with duckdb.connect(str(out), read_only=True) as seen:
        assert seen.execute("SELECT a FROM t").fetchall() == [(1,)]


def test_publishing_leaves_the_old_file_and_nothing_else_on_error(tmp_path):
    out = tmp_path / "trace.duckdb"
    with publishing(out) as con:
        con.execute("CREATE TABLE t AS SELECT 'old' AS a")
    with pytest.raises(KeyboardInterrupt), publishing(out) as con:  # any error, a BaseException too
        con.execute("CREATE TABLE t AS SELECT 'new' AS a")
        raise KeyboardInterrupt
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.duckdb"]
    with duckdb.connect(str(out), read_only=True) as seen:
        assert seen.execute("SELECT a FROM t").fetchall() == [("old",)]


def test_every_reader_publishes_through_the_one_helper():
    """No reader renames its own output: the fsync + ``os.replace`` + directory fsync is ``analysis.duck.publish``."""
    readers = sorted((ROOT / "analysis/readers").rglob("*.py"))
    assert len(readers) > 10
    own = [f"{p.relative_to(ROOT)}:{n}" for p in readers for n, line in enumerate(p.read_text().splitlines(), 1)
           if re.search(r"\bos\.(replace|rename|fsync)\s*\(", line)]
    assert own == []
