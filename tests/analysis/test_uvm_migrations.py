"""MEM004 on the corpus's unified-memory exports: its numbers equal direct SQL on the raw export.

The idle it owns (``uvm_migration``) is the idle between two migrations of a device where no host activity is
recorded; of it, the host's work between migrations to the host (on the CPU) is not the migrations' cost; the
migrations overlapping kernels are the fault stalls inside them.
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


def _raw_all(short: str, sql: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{corpus_file(short)}?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchall()
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
    assert sum(v["ns"] for v in f["idle_by_direction"].values()) + f["host_work_ns"] == f["idle_ns"]
    painted = sum(c["ns"] for e in result["reports"][0]["idle_anatomy"] for c in e["categories"]
                  if c["category"] == "uvm_migration")
    assert painted == f["idle_ns"]
    # Fault stalls: each kernel with migrations inside, from its start until its last page arrived.
    stall = _raw(short, f"""
        SELECT COALESCE(SUM(last - s), 0) FROM (
            SELECT k.start s, MIN(MAX(m.end), k.end) last FROM CUPTI_ACTIVITY_KIND_KERNEL k
            JOIN CUPTI_ACTIVITY_KIND_MEMCPY m ON m.deviceId = k.deviceId AND m.start < k.end AND m.end > k.start
            WHERE m.{UVM} GROUP BY k.rowid)""")[0]  # noqa: S608
    # (the kernels of these exports do not overlap one another, so the sum is the union)
    assert f["fault_stall_ns"] == stall > 0
    assert f["impact_ns"] == f["fault_stall_ns"] + f["migration_only_ns"] + f["idle_waited_ns"]
    assert f["idle_waited_ns"] == f["idle_ns"] - f["host_work_ns"]


def test_a100_idle_is_the_read_back_between_migrations() -> None:
    """unified-memory-a100: every idle nanosecond lies between two migrations, all of it MEM004's but the few
    microseconds inside the process's CUDA calls (its only recorded host activity). It is the host reading the
    results back: between two migrations to the host the thread waits on the fault switched out (10.0 ms, from
    the scheduler's events: counted) and otherwise works on the pages it read (582 ms: not counted). That work is
    the host's own (the expert label's verification loop), not fault handling: the idle after each migration
    grows with the bytes it brought, at more than ten times the time per byte the migration itself took."""
    short = "unified-memory-a100.sqlite"
    f, result = _mem004(short)
    gap_ns = _raw(short, f"SELECT SUM(ge - gs) FROM ({_gaps_sql(short)})")[0]  # noqa: S608
    in_calls = _raw(short, f"""
        SELECT SUM(MIN(r.end, g.ge) - MAX(r.start, g.gs)) FROM ({_gaps_sql(short)}) g
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.start < g.ge AND r.end > g.gs""")[0]  # noqa: S608
    assert result["reports"][0]["breakdown"]["idle_ns"] == gap_ns
    assert f["idle_ns"] == gap_ns - in_calls
    assert set(f["idle_by_direction"]) == {"UVM_DtoH"}
    # The launching thread switched out inside those gaps (SCHED_EVENTS: switch-out to the next switch-in).
    waited = _raw(short, f"""
        WITH ev AS (SELECT start s, LEAD(start) OVER (PARTITION BY globalTid ORDER BY start) e, isSchedIn i,
                           globalTid t FROM SCHED_EVENTS),
        off AS (SELECT s, e FROM ev WHERE i = 0 AND e IS NOT NULL
                AND t = (SELECT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME LIMIT 1))
        SELECT SUM(MIN(o.e, g.ge) - MAX(o.s, g.gs)) FROM ({_gaps_sql(short)}) g
        JOIN off o ON o.s < g.ge AND o.e > g.gs""")[0]  # noqa: S608
    assert f["idle_waited_ns"] == waited == f["idle_by_direction"]["UVM_DtoH"]["ns"]
    assert f["host_work_ns"] == f["idle_ns"] - waited > 50 * waited
    # Per size of read-back migration: the idle after it per byte against the migration's own time per byte.
    rows = _raw_all(short, """
        WITH m AS (SELECT start s, end e, bytes b, LEAD(start) OVER (ORDER BY start) nx
                   FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 12)
        SELECT b, COUNT(*), AVG(nx - e) * 1.0 / b, AVG(e - s) * 1.0 / b FROM m
        WHERE nx IS NOT NULL AND b > 4096 GROUP BY b""")
    assert sum(r[1] for r in rows) > 700
    assert all(gap_per_byte > 10 * mig_per_byte for _, _, gap_per_byte, mig_per_byte in rows)
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
