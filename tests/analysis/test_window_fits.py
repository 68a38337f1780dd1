"""Windows against the report they are for: ``window_check`` (what the service asks before queuing a
re-analysis) and the analysis itself refuse a time range, a loop or iterations the report does not have with
``bad_window`` naming the valid range, by one check; windows inside the report are taken."""

from __future__ import annotations

import duckdb
import pytest

from analysis.api import analyze, window_check
from analysis.errors import TraceError
from tests.analysis.planting import ingested
from tests.conftest import corpus_file

CUPY = corpus_file("cupy-power-iteration.sqlite")  # an NVTX step loop
# Every table a report's recorded activity lives in (host and GPU).
ACTIVITY = ("kernels", "memcpy", "memset", "cuda_api", "nvtx", "osrt", "sync")


def _facts(path) -> tuple[int, int, int]:
    """(first start, last end, iterations) of the report, straight from its tables."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        union = " UNION ALL ".join(f"SELECT start_ns s, COALESCE(end_ns, start_ns) e FROM {t}"  # noqa: S608 - names
                                   for t in ACTIVITY if t in tables)
        lo, hi = con.execute(f"SELECT MIN(s), MAX(e) FROM ({union})").fetchone()  # noqa: S608 - constants
        n = con.execute("SELECT count(*) FROM iterations").fetchone()[0]
    finally:
        con.close()
    return int(lo), int(hi), int(n)


def _refused(path, window: str) -> str:
    """The message of both refusals (before queuing and in the analysis), which must be the same."""
    with pytest.raises(TraceError) as before:
        window_check(window, [(path, "r")])
    with pytest.raises(TraceError) as during:
        analyze([path], labels=["r"], window=window)
    assert before.value.code == during.value.code == "bad_window"
    assert before.value.message == during.value.message
    return before.value.message


def test_windows_outside_the_report_are_refused_naming_the_valid_range():
    path = ingested(CUPY)
    lo, hi, n = _facts(path)
    assert n > 3
    msg = _refused(path, f"time:{hi}ns-{hi + 10**9}ns")
    assert f"from {lo} ns to {hi} ns" in msg and f"T0 < {hi}ns" in msg
    if lo > 0:
        assert f"from {lo} ns to {hi} ns" in _refused(path, f"time:0ns-{lo}ns")
    msg = _refused(path, f"iterations:0-{n}")
    assert f"({n} found; valid: iterations:A-B with 0 <= A <= B <= {n - 1})" in msg
    assert f"({n} found;" in _refused(path, f"iterations:{n + 5}-{n + 9}")
    msg = _refused(path, "loop:7")
    assert "asks for a loop the report does not have" in msg and "valid: loop:0 to loop:0" in msg


def test_windows_inside_the_report_are_taken():
    path = ingested(CUPY)
    lo, hi, n = _facts(path)
    for window in (f"iterations:0-{n - 1}", f"iterations:{n - 1}-{n - 1}", "loop:0",
                   f"time:{hi - 1}ns-{hi + 10**9}ns", f"time:0ns-{lo + 1}ns", "all", "steady", "startup"):
        window_check(window, [(path, "r")])
    rep = analyze([path], labels=["r"], window=f"time:{hi - 10**6}ns-{hi + 10**9}ns").to_json()["reports"][0]
    assert rep["window"]["phase"] == "time" and rep["window"]["start_ns"] == hi - 10**6


def test_a_report_without_a_loop_says_so():
    path = ingested(corpus_file("vecadd-2026.sqlite"))  # one-shot: no loop
    assert "it has no loop" in _refused(path, "iterations:0-0")
    assert "it has no loop" in _refused(path, "loop:0")
