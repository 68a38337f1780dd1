"""A file ingested for one analysis (`goodput analyze`) without its stored iterations analyzes the same."""

from __future__ import annotations

import json

import duckdb

from analysis.api import analyze, ingest
from tests.conftest import corpus_file


def _tables(path) -> set[str]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    finally:
        con.close()


def test_without_stored_iterations_the_analysis_finds_the_same_loop(tmp_path):
    src = corpus_file("cupy-power-iteration.sqlite")  # a loop of 44 NVTX steps
    stored, once = tmp_path / "stored.duckdb", tmp_path / "once.duckdb"
    ingest(src, stored, summarize=False)
    ingest(src, once, summarize=False, iterations=False)
    assert "iterations" in _tables(stored) and "iterations" not in _tables(once)
    assert "net_transfers" in _tables(once)  # written by the ingest child either way
    results = [json.dumps(analyze([p], labels=["r"], window=w).to_json(), sort_keys=True)
               for w in ("steady", "all") for p in (stored, once)]
    assert results[0] == results[1] and results[2] == results[3]
    assert json.loads(results[0])["reports"][0]["iterations"]["count"] == 44  # there is a loop to find
