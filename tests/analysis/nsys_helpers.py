"""Shared helpers for the nsys reader tests: ingest each corpus file once, query exports directly."""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from pathlib import Path

import pytest

from analysis.api import Limits, ingest
from analysis.model.trace import Trace

_CACHE: dict[Path, Path] = {}
_ROOT: list[Path] = []


def ingested(src: Path) -> Path:
    """The normalized DuckDB file of a corpus export, ingested once per test session."""
    src = Path(src)
    if src not in _CACHE:
        if not _ROOT:
            _ROOT.append(Path(tempfile.mkdtemp(prefix="goodput-nsys-tests-")))
        out = _ROOT[0] / f"{len(_CACHE)}.duckdb"
        ingest(src, out, limits=Limits(timeout_s=120))
        _CACHE[src] = out
    return _CACHE[src]


@pytest.fixture(scope="session", autouse=False)
def ingest_cache():
    yield ingested
    for root in _ROOT:
        shutil.rmtree(root, ignore_errors=True)
    _ROOT.clear()
    _CACHE.clear()


def open_trace(src: Path) -> Trace:
    return Trace(ingested(src), Path(src).name)


def export_query(src: Path, sql: str, params: tuple = ()) -> list[tuple]:
    """Run SQL on the export itself (read-only), independently of the ingest code."""
    con = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


def export_tables(src: Path) -> set[str]:
    return {r[0] for r in export_query(src, "SELECT name FROM sqlite_master WHERE type = 'table'")}
