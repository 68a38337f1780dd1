"""The ``off_cpu`` table against the export's SCHED_EVENTS read directly: every stretch from a thread's switch-out
to its next switch-in, on every corpus export (none where the export has no scheduler's events)."""

from __future__ import annotations

import pytest

from analysis.readers.nsys.enums import THREAD_BLOCK, THREAD_STATE
from analysis.readers.schema import THREAD_BLOCKS, THREAD_STATES
from tests.analysis.nsys_helpers import export_query, export_tables, ingest_cache, ingested, open_trace  # noqa: F401
from tests.conftest import NSYS_FILES, corpus_file

pytestmark = pytest.mark.usefixtures("ingest_cache")


def _stretches(src) -> list[tuple[int, int, int, int]]:
    """(pid, tid, out, in) in the export's clock, paired in plain Python: per thread in time order (a switch-in
    first at equal times), each switch-out followed by a switch-in."""
    if "SCHED_EVENTS" not in export_tables(src):
        return []
    rows = export_query(src, "SELECT globalTid, start, isSchedIn <> 0 FROM SCHED_EVENTS WHERE globalTid IS NOT NULL")
    by: dict[int, list[tuple[int, bool]]] = {}
    for g, t, is_in in rows:
        by.setdefault(g, []).append((t, bool(is_in)))
    out = []
    for g, ev in by.items():
        ev.sort(key=lambda x: (x[0], not x[1]))
        out += [((g >> 24) & 0xFFFFFF, g & 0xFFFFFF, a[0], b[0]) for a, b in zip(ev, ev[1:], strict=False) if not a[1] and b[1]]
    return sorted(out)


@pytest.mark.parametrize("src", NSYS_FILES, ids=lambda p: p.name.split("__")[-1])
def test_off_cpu_stretches_equal_the_scheduler_events(src):
    expected = _stretches(src)
    trace = open_trace(src)
    try:
        off = int(trace.meta.get("time_offset_ns") or 0)
        got = trace.sql("SELECT pid, tid, start_ns, end_ns FROM off_cpu ORDER BY ALL")
    finally:
        trace.close()
    assert got == [(p, t, a - off, b - off) for p, t, a, b in expected]


def test_exports_with_scheduler_events_have_stretches():
    with_events = [p for p in NSYS_FILES if "SCHED_EVENTS" in export_tables(p)]
    assert len(with_events) == 16
    assert all(_stretches(p) for p in with_events)


def test_absolute_clock_stretches_are_session_relative():
    src = corpus_file("nccl-ring-2node-r0-ault43.sqlite")
    shift = int(export_query(src, "SELECT value FROM META_DATA_EXPORT WHERE name = 'EXPORT_CONFIG_TIME_SHIFT'")[0][0])
    first = min(s[2] for s in _stretches(src))
    trace = open_trace(src)
    try:
        assert trace.scalar("SELECT min(start_ns) FROM off_cpu") == first - shift
        assert 0 < first - shift < 60 * 10**9  # seconds into the session, not 1.7e18
    finally:
        trace.close()


def test_thread_state_decoded_where_the_export_has_it():
    """nsys >= 2024.5 writes threadState (and threadBlock, NULL on these Linux captures); older exports neither."""
    trace = open_trace(corpus_file("pytorch-nvfuser-h200.sqlite"))
    try:
        assert trace.sql("SELECT state, block, count(*) FROM off_cpu GROUP BY ALL") == [("unknown", None, 5502)]
    finally:
        trace.close()
    # The 292 switch-outs of exiting threads (state Terminated) have no switch-in after them: no stretch.
    src = corpus_file("pytorch-nvfuser-h200.sqlite")
    assert export_query(src, "SELECT count(*) FROM SCHED_EVENTS WHERE isSchedIn = 0 AND threadState = 5")[0][0] == 292
    old = open_trace(corpus_file("openmp-offload-t4.sqlite"))
    try:
        assert "threadState" not in {r[1] for r in export_query(corpus_file("openmp-offload-t4.sqlite"),
                                                                   "PRAGMA table_info(SCHED_EVENTS)")}
        assert old.scalar("SELECT count(*) FROM off_cpu") > 0
        assert old.scalar("SELECT count(*) FROM off_cpu WHERE state IS NOT NULL OR block IS NOT NULL") == 0
    finally:
        old.close()


def test_built_in_enums_are_the_schema_vocabulary():
    assert tuple(THREAD_STATE.values()) == THREAD_STATES and list(THREAD_STATE) == list(range(len(THREAD_STATES)))
    assert tuple(THREAD_BLOCK.values()) == THREAD_BLOCKS and list(THREAD_BLOCK) == list(range(len(THREAD_BLOCKS)))
    # The export's own enum rows name the same values (vecadd-2026 lists all 62 reasons).
    src = corpus_file("vecadd-2026.sqlite")
    assert len(export_query(src, "SELECT id FROM ENUM_SCHEDULING_THREAD_BLOCK")) == len(THREAD_BLOCKS)
