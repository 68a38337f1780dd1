"""MEM004 on the corpus's unified-memory exports: its numbers equal direct SQL on the raw export.

The idle it owns (``uvm_migration``) is the idle between two migrations of a device where no host activity is
recorded; the migrations overlapping kernels are the fault stalls inside them.
"""

from __future__ import annotations

import sqlite3

import pytest

from analysis.api import analyze
from tests.analysis.planting import ingested
from tests.conftest import corpus_file

UVM = "copyKind IN (11, 12, 13)"  # ENUM_CUDA_MEMCPY_OPER: unified-memory HtoD, DtoH, DtoD


def _raw(short: str, sql: str) -> tuple:
    con = sqlite3.connect(f"file:{corpus_file(short)}?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchone()
    finally:
        con.close()


def _has(short: str, table: str) -> bool:
    return bool(_raw(short, f"SELECT COUNT(*) FROM sqlite_master WHERE name = '{table}'")[0])  # noqa: S608


def _gaps_sql(short: str) -> str:
    """Each device's idle between a migration and the next GPU operation when that is a migration too."""
    memset = (" UNION ALL SELECT deviceId, start, end, 0 FROM CUPTI_ACTIVITY_KIND_MEMSET"
              if _has(short, "CUPTI_ACTIVITY_KIND_MEMSET") else "")
    return f"""
        WITH ops AS (SELECT deviceId d, start s, end e, {UVM} u FROM CUPTI_ACTIVITY_KIND_MEMCPY
                     UNION ALL SELECT deviceId, start, end, 0 FROM CUPTI_ACTIVITY_KIND_KERNEL{memset}),
        w AS (SELECT d, s, u, LAG(u) OVER (PARTITION BY d ORDER BY s, e) pu,
                     MAX(e) OVER (PARTITION BY d ORDER BY s, e ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) pe
              FROM ops)
        SELECT pe AS gs, s AS ge FROM w WHERE u AND pu AND s > pe"""  # noqa: S608 - constants


def _mem004(short: str) -> tuple[dict, dict]:
    result = analyze([ingested(corpus_file(short))]).to_json()
    return next(f for f in result["findings"] if f["rule_id"] == "MEM004"), result


@pytest.mark.parametrize("short", ["unified-memory-a100.sqlite", "stdpar-um-gpu.sqlite"])
def test_mem004_equals_sql_on_the_raw_export(short: str) -> None:
    f, result = _mem004(short)
    n, nbytes, htod, dtoh, b_htod, b_dtoh = _raw(short, f"""
        SELECT COUNT(*), SUM(bytes), SUM(copyKind = 11), SUM(copyKind = 12),
               SUM(CASE WHEN copyKind = 11 THEN bytes ELSE 0 END), SUM(CASE WHEN copyKind = 12 THEN bytes ELSE 0 END)
        FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE {UVM}""")  # noqa: S608
    assert n > 1000
    assert (f["migrations"], f["bytes"], f["to_device"], f["to_host"]) == (n, nbytes, htod, dtoh)
    assert (f["bytes_to_device"], f["bytes_to_host"]) == (b_htod, b_dtoh)
    k, kbytes = _raw(short, f"""
        SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM CUPTI_ACTIVITY_KIND_MEMCPY m WHERE {UVM} AND EXISTS (
            SELECT 1 FROM CUPTI_ACTIVITY_KIND_KERNEL k
            WHERE k.deviceId = m.deviceId AND k.start < m.end AND k.end > m.start)""")  # noqa: S608
    assert k > 0
    assert (f["in_kernel_migrations"], f["in_kernel_bytes"]) == (k, kbytes)
    # The idle between migrations, less what recorded host activity explains, is MEM004's; the anatomy agrees.
    gaps, gap_ns = _raw(short, f"SELECT COUNT(*), SUM(ge - gs) FROM ({_gaps_sql(short)})")  # noqa: S608
    assert 0 < f["idle_ns"] <= gap_ns
    assert sum(v["gaps"] for v in f["idle_by_direction"].values()) <= gaps
    assert sum(v["ns"] for v in f["idle_by_direction"].values()) == f["idle_ns"]
    painted = sum(c["ns"] for e in result["reports"][0]["idle_anatomy"] for c in e["categories"]
                  if c["category"] == "uvm_migration")
    assert painted == f["idle_ns"]
    assert f["impact_ns"] == f["idle_ns"] + f["migration_only_ns"]


def _rows(short: str, sql: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{corpus_file(short)}?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_a100_idle_is_the_read_back_between_migrations() -> None:
    """unified-memory-a100: every idle nanosecond lies between two migrations; all of it is MEM004's but what the
    process's thread is recorded doing: inside its CUDA calls (a few microseconds), or switched out by the
    scheduler (10.0 ms of its SCHED_EVENTS; ``off_cpu`` comes before ``uvm_migration``)."""
    short = "unified-memory-a100.sqlite"
    f, result = _mem004(short)
    gap_ns = _raw(short, f"SELECT SUM(ge - gs) FROM ({_gaps_sql(short)})")[0]  # noqa: S608
    gaps = _rows(short, f"SELECT gs, ge FROM ({_gaps_sql(short)}) ORDER BY gs")  # noqa: S608
    # The thread's CUDA calls and its stretches off CPU (a switch-out to its next switch-in), unioned.
    host = _rows(short, """
        SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_RUNTIME
        UNION ALL SELECT s, n FROM (
            SELECT start s, isSchedIn i, LEAD(start) OVER w n, LEAD(isSchedIn) OVER w ni FROM SCHED_EVENTS
            WHERE globalTid IN (SELECT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME)
            WINDOW w AS (PARTITION BY globalTid ORDER BY start, isSchedIn <> 0 DESC))
        WHERE i = 0 AND ni <> 0 ORDER BY 1""")
    merged: list[list[int]] = []
    for a, z in host:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], z)
        else:
            merged.append([a, z])
    explained = sum(max(0, min(z, ge) - max(a, gs)) for gs, ge in gaps for a, z in merged if a < ge and z > gs)
    assert result["reports"][0]["breakdown"]["idle_ns"] == gap_ns
    assert f["idle_ns"] == gap_ns - explained
    cats = {c["category"]: c["ns"] for e in result["reports"][0]["idle_anatomy"] for c in e["categories"]}
    assert cats["off_cpu"] > 9_000_000  # the labels' 10.001 ms off CPU
    assert set(f["idle_by_direction"]) == {"UVM_DtoH"}
    # One kernel: the fault stalls are the migrations' time clipped to it (the migrations do not overlap).
    overlap, overlapping_pairs = _raw(short, f"""
        SELECT (SELECT SUM(MIN(m.end, k.end) - MAX(m.start, k.start)) FROM CUPTI_ACTIVITY_KIND_MEMCPY m
                JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.start < m.end AND k.end > m.start WHERE m.{UVM}),
               (SELECT COUNT(*) FROM (SELECT start, MAX(end) OVER (ORDER BY start, end ROWS BETWEEN UNBOUNDED
                PRECEDING AND 1 PRECEDING) pe FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE {UVM}) WHERE start < pe)""")  # noqa: S608
    assert _raw(short, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0] == 1
    assert overlapping_pairs == 0
    assert f["kernel_overlap_ns"] == overlap > 0
    assert result["verdict"]["kind"] == "uvm" and result["verdict"]["rule_id"] == "MEM004"


def test_recorded_host_activity_wins_over_the_migrations() -> None:
    """clue-um-t4: 184 idle stretches between migrations (242 ms in direct SQL), most of them spent in sampled
    printf formatting: the CPU samples keep that idle (GPU001's, host-bound as the label says), MEM004 takes
    only what nothing on the host explains."""
    short = "clue-um-t4.sqlite"
    f, result = _mem004(short)
    gaps, gap_ns = _raw(short, f"SELECT COUNT(*), SUM(ge - gs) FROM ({_gaps_sql(short)})")  # noqa: S608
    assert gaps > 100
    assert 0 < f["idle_ns"] < gap_ns / 10
    cats: dict[str, int] = {}
    for e in result["reports"][0]["idle_anatomy"]:
        for c in e["categories"]:
            cats[c["category"]] = cats.get(c["category"], 0) + c["ns"]
    assert cats["uvm_migration"] == f["idle_ns"]
    assert cats["host_cpu"] > gap_ns / 2
    assert result["verdict"]["kind"] == "host_bound"
