"""A small file is queried, and a small export copied, with one DuckDB thread, and a small file's window is copied
into temporary tables instead of views (issue #43): where the time goes changes, never a number or a copied row."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from analysis.api import analyze, ingest
from analysis.model import trace as trace_module
from analysis.model.trace import DUCKDB_THREADS, Trace
from analysis.readers.nsys import ingest as nsys_ingest
from analysis.readers.nsys.spawn import IngestChild
from analysis.readers.schema import NSYS_TABLES
from tests.analysis.planting import ingested
from tests.conftest import corpus_file

EXPORT = "cupy-power-iteration.sqlite"  # kernels, copies, NVTX, a loop: most rules have work on it


def _threads(trace: Trace) -> int:
    return int(trace.scalar("SELECT current_setting('threads')"))


def test_a_small_file_gets_one_thread_a_large_one_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    path = ingested(corpus_file(EXPORT))
    assert path.stat().st_size < trace_module.ONE_THREAD_FILE_BYTES
    small = Trace(path, "t")
    try:
        assert _threads(small) == 1
    finally:
        small.close()
    monkeypatch.setattr(trace_module, "ONE_THREAD_FILE_BYTES", 0)  # every file counts as large
    large = Trace(path, "t")
    try:
        assert DUCKDB_THREADS > 1
        assert _threads(large) == DUCKDB_THREADS
    finally:
        large.close()


def _window_kinds(trace: Trace) -> set[bool]:
    """Whether the window's timed tables are temporary tables (True) or views (False)."""
    tables = {r[0] for r in trace.sql("SELECT table_name FROM duckdb_tables() WHERE temporary")}
    views = {r[0] for r in trace.sql("SELECT view_name FROM duckdb_views() WHERE temporary")}
    return {t in tables for t in ("kernels", "cuda_api") if t in tables | views}


def test_a_small_files_window_is_copied_into_tables_a_large_ones_stays_views(monkeypatch: pytest.MonkeyPatch) -> None:
    path = ingested(corpus_file(EXPORT))
    small = Trace(path, "t").windowed(0, 2**62)
    try:
        assert _window_kinds(small) == {True}
    finally:
        small.close()
    monkeypatch.setattr(trace_module, "ONE_THREAD_FILE_BYTES", 0)
    large = Trace(path, "t").windowed(0, 2**62)
    try:
        assert _window_kinds(large) == {False}
    finally:
        large.close()


def test_the_analysis_is_the_same_with_one_thread_and_tables_or_two_and_views(monkeypatch: pytest.MonkeyPatch) -> None:
    path = ingested(corpus_file(EXPORT))
    one = analyze([path], labels=["r"], window="steady").to_json()
    monkeypatch.setattr(trace_module, "ONE_THREAD_FILE_BYTES", 0)
    two = analyze([path], labels=["r"], window="steady").to_json()
    assert one["findings"]  # something to compare
    assert one["reports"][0]["window"]["start_ns"] is not None  # a window inside the report: its tables are read
    assert one == two


def _rows(path: Path) -> dict[str, list[tuple]]:
    trace = Trace(path, "t")
    try:
        return {t: sorted(trace.sql(f'SELECT * FROM "{t}"'), key=repr) for t in NSYS_TABLES}  # noqa: S608
    finally:
        trace.close()


def test_a_small_export_is_copied_with_one_thread_and_the_same_rows(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    src = corpus_file(EXPORT)
    plans: list[dict] = []
    run = IngestChild.run

    def spy(self: IngestChild, plan: dict, *args: Any, **kwargs: Any) -> Any:
        plans.append(plan)
        return run(self, plan, *args, **kwargs)

    monkeypatch.setattr(IngestChild, "run", spy)
    assert src.stat().st_size < nsys_ingest.ONE_THREAD_EXPORT_BYTES
    ingest(src, tmp_path / "one.duckdb")
    monkeypatch.setattr(nsys_ingest, "ONE_THREAD_EXPORT_BYTES", 0)  # every export counts as large
    ingest(src, tmp_path / "two.duckdb")
    assert plans[0].get("threads") == 1
    assert "threads" not in plans[1]
    one, two = _rows(tmp_path / "one.duckdb"), _rows(tmp_path / "two.duckdb")
    assert one["kernels"]
    assert one == two


@pytest.mark.parametrize("name", [EXPORT, "torchrun-2gpu-nccl-sendrecv-before-cropped.sqlite", "stdpar-um-gpu.sqlite"])
def test_a_small_files_window_tables_hold_the_views_rows(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Through a window cutting out the middle third of the report (rows cross both edges), each timed table copied
    without the longest-duration bound holds the rows of the view that has it, in the same order; a table without
    rows is left unshadowed (the stored one, empty)."""
    path = ingested(corpus_file(name))
    whole = Trace(path, "t")
    try:
        lo, hi = whole.sql("SELECT MIN(start_ns), MAX(end_ns) FROM cuda_api")[0]
        empty = {t for t in trace_module.WINDOWED_TABLES if t in whole.tables and not whole.has_rows(t)}
    finally:
        whole.close()
    third = (hi - lo) // 3

    def rows(trace: Trace) -> dict[str, list[tuple]]:
        try:
            return {t: trace.sql(f'SELECT * FROM "{t}"') for t in trace_module.WINDOWED_TABLES if t in trace.tables}  # noqa: S608
        finally:
            trace.close()

    small = Trace(path, "t").windowed(lo + third, hi - third)
    temporary = {r[0] for r in small.sql("SELECT table_name FROM duckdb_tables() WHERE temporary")}
    assert empty and not empty & temporary and temporary  # the empty tables are not copied, the others are
    tables = rows(small)
    monkeypatch.setattr(trace_module, "ONE_THREAD_FILE_BYTES", 0)
    views = rows(Trace(path, "t").windowed(lo + third, hi - third))
    crossing = [r for r in tables["cuda_api"] if lo + third in r or hi - third in r]
    assert crossing  # clipped rows at an edge: the branches that cross were read
    assert tables == views
