"""The idle anatomy's ``off_cpu``: idle while a speaking thread was switched out by the scheduler, after every
recorded activity (calls, ranges, CPU samples) and before the device's migration bursts and ``none``; on a
tiny report with known numbers and on real exports where a thread is planted off CPU across a new GPU gap."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import duckdb
import pytest

from analysis.diagnosis.idle_anatomy import idle_anatomy
from analysis.model.trace import Trace
from tests.analysis.planting import (
    api,
    copy_export,
    ingest_copy,
    kernel,
    normalized,
    open_gap,
    raw_gaps,
    sqlite_rw,
)
from tests.conftest import corpus_file


def _anatomy(path: Path) -> dict[tuple, dict[str, tuple[int, list[tuple[str, int, int]]]]]:
    """Per (pid, device): category -> (ns, top names as (name, ns, calls))."""
    t = Trace(path, path.name)
    try:
        out = [e.to_json() for e in idle_anatomy(t)]
    finally:
        t.close()
    return {(e["pid"], e["device"]): {c["category"]: (c["ns"], [(n["name"], n["ns"], n["calls"]) for n in c["top"]])
                                      for c in e["categories"]} for e in out}


def _off(start: int, end: int, *, tid: int = 1, block: str | None = None) -> dict:
    return {"pid": 1, "tid": tid, "start_ns": start, "end_ns": end, "cpu": 0, "state": "unknown", "block": block}


def test_off_cpu_is_painted_after_recorded_activity(tmp_path):
    """Idle 100-1000. Thread 1 (the launcher) is off CPU 100-900: a CUDA call 100-200, a user range 300-400 and
    a CPU sample's half periods 500-540 say more; the rest of it is off_cpu, named by what it blocked on. Thread
    2 does not speak for the device: its time off CPU counts for nothing."""
    ks = [kernel(0, 100), kernel(1000, 1100)]
    nvtx = [{"pid": 1, "tid": 1, "start_ns": 300, "end_ns": 400, "text": "step", "kind": "push_pop"}]
    samples = [{"pid": 1, "tid": 1, "start_ns": s, "cpu": 0, "function": "f", "module": "m"} for s in (510, 530)]
    off = [_off(100, 600), _off(650, 900, block="mutex"), _off(900, 1000, tid=2)]
    path = normalized(tmp_path / "r.duckdb", kernels=ks, cuda_api=[api(100, 200, "cudaMalloc")], nvtx=nvtx,
                      cpu_samples=samples, off_cpu=off)
    got = _anatomy(path)[(1, 0)]
    assert {c: ns for c, (ns, _) in got.items()} == {
        "allocation": 100, "user_range": 100, "host_cpu": 40, "off_cpu": 100 + 100 + 60 + 250, "none": 50 + 100}
    assert got["off_cpu"][1] == [("off CPU", 260, 1), ("off CPU: mutex", 250, 1)]


def test_a_schema_4_report_without_the_table_paints_none(tmp_path):
    """A report ingested before off_cpu existed (schema 4) lacks the table: that idle stays ``none``."""
    path = normalized(tmp_path / "r.duckdb", kernels=[kernel(0, 100), kernel(500, 600)], off_cpu=[_off(100, 500)])
    assert {c: ns for c, (ns, _) in _anatomy(path)[(1, 0)].items()} == {"off_cpu": 400}
    con = duckdb.connect(str(path))
    try:
        con.execute("DROP TABLE off_cpu")
    finally:
        con.close()
    assert {c: ns for c, (ns, _) in _anatomy(path)[(1, 0)].items()} == {"none": 400}


def test_off_cpu_needs_the_launching_thread(tmp_path):
    """Kernels without their launching thread (no correlation to API calls): any thread of the process speaks for
    calls and ranges, but a thread asleep is no evidence about the one that launched, so nothing is off_cpu."""
    ks = [kernel(0, 100, tid=None), kernel(500, 600, tid=None)]
    path = normalized(tmp_path / "r.duckdb", kernels=ks, cuda_api=[api(100, 150, "cudaMalloc", tid=7)],
                      off_cpu=[_off(100, 500, tid=7), _off(100, 500, tid=8)])
    assert {c: ns for c, (ns, _) in _anatomy(path)[(1, 0)].items()} == {"allocation": 50, "none": 350}


def _quiet_instant(con: sqlite3.Connection) -> tuple[int, int, int]:
    """(globalTid, cpu, t): the middle of a GPU gap of a one-thread process where that thread is on CPU (its last
    scheduler event before is a switch-in), outside its calls, ranges and profiler overhead, and a sampling
    period from its CPU samples (each covers half a period either side). Read from the raw export."""
    ((gtid,),) = con.execute("SELECT DISTINCT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchall()
    spans, samples = [], []
    for table in ("CUPTI_ACTIVITY_KIND_RUNTIME", "OSRT_API", "NVTX_EVENTS", "PROFILER_OVERHEAD"):
        if con.execute("SELECT 1 FROM sqlite_master WHERE name = ?", [table]).fetchone():
            spans += con.execute(f'SELECT start, COALESCE("end", start) FROM {table} WHERE globalTid = ?',  # noqa: S608
                                 [gtid]).fetchall()
    if con.execute("SELECT 1 FROM sqlite_master WHERE name = 'COMPOSITE_EVENTS'").fetchone():
        samples = sorted(s for (s,) in con.execute("SELECT start FROM COMPOSITE_EVENTS WHERE globalTid = ?", [gtid]))
    period = sorted(b - a for a, b in zip(samples, samples[1:], strict=False))[len(samples) // 2] if len(samples) > 2 else 0
    for _, _, gs, ge in raw_gaps(con):
        t = (gs + ge) // 2
        if any(s <= t + 1000 and e >= t - 1000 for s, e in spans) or any(abs(s - t) <= period for s in samples):
            continue
        last = con.execute("SELECT isSchedIn, cpu FROM SCHED_EVENTS WHERE globalTid = ? AND start <= ? "
                           "ORDER BY start DESC LIMIT 1", [gtid, t]).fetchone()
        if last and last[0]:
            return gtid, last[1], t
    raise AssertionError("no quiet on-CPU instant in a GPU gap")


def _plant_off_cpu(tmp_path: Path, short: str, delta: int) -> tuple[Path, int]:
    """A copy of the export with a GPU gap of ``delta`` opened at a quiet instant of its launching thread, the
    thread switched out for exactly that stretch; returns the copy and the thread's globalTid."""
    src = copy_export(corpus_file(short), tmp_path / "planted.sqlite")
    con = sqlite_rw(src)
    gtid, cpu, t = _quiet_instant(con)
    con.close()
    open_gap(src, t, delta)  # the point events (scheduler switches, CPU samples) move too
    con = sqlite_rw(src)
    with con:
        con.executemany("INSERT INTO SCHED_EVENTS (start, cpu, isSchedIn, globalTid) VALUES (?, ?, ?, ?)",
                        [(t, cpu, 0, gtid), (t + delta, cpu, 1, gtid)])
    con.close()
    return src, gtid


@pytest.mark.parametrize("short", ["openmp-offload-t4.sqlite", "clue-um-t4.sqlite", "devsync-heavy-report13.sqlite"])
def test_a_thread_switched_out_across_a_new_gap_paints_it_off_cpu(tmp_path, short):
    """A GPU gap opened at a quiet instant of the launching thread (everything after it, scheduler events and CPU
    samples too, moves later), the thread switched out for exactly the new stretch: the device's idle grows by
    it, all of it ``off_cpu`` (one more stretch named "off CPU"); every other category keeps its time."""
    delta = 50_000_000
    src, gtid = _plant_off_cpu(tmp_path, short, delta)
    before = _anatomy(ingest_copy(corpus_file(short), tmp_path / "before.duckdb"))
    after = _anatomy(ingest_copy(src, tmp_path / "after.duckdb"))
    key = ((gtid >> 24) & 0xFFFFFF, 0)
    assert set(before) == set(after) == {key}
    b, a = before[key], after[key]
    assert a["off_cpu"][0] == b.get("off_cpu", (0, []))[0] + delta
    assert {c: v[0] for c, v in a.items() if c != "off_cpu"} == {c: v[0] for c, v in b.items() if c != "off_cpu"}
    names_b = {n: (ns, k) for n, ns, k in b.get("off_cpu", (0, []))[1]}
    names_a = {n: (ns, k) for n, ns, k in a["off_cpu"][1]}
    assert names_a["off CPU"] == (names_b.get("off CPU", (0, 0))[0] + delta, names_b.get("off CPU", (0, 0))[1] + 1)


def test_host001_owns_the_idle_off_cpu(tmp_path):
    """The planted stretch off CPU is HOST001's: its ``off_cpu`` idle grows by exactly the stretch, which its
    calls name ("off CPU") and class (``off_cpu``) and whose advice says what it can be; devsync-heavy-report13
    traces OS calls too, which HOST001 owns beside it."""
    from analysis.api import analyze

    delta = 50_000_000
    short = "devsync-heavy-report13.sqlite"
    src, _ = _plant_off_cpu(tmp_path, short, delta)

    def host001(path: Path) -> dict:
        result = analyze([path], window="all").to_json()
        return next((f for f in result["findings"] if f["rule_id"] == "HOST001"), {"by_category": {}, "by_call": {}})

    b = host001(ingest_copy(corpus_file(short), tmp_path / "before.duckdb"))
    a = host001(ingest_copy(src, tmp_path / "after.duckdb"))
    assert a["by_category"]["off_cpu"] == b["by_category"].get("off_cpu", 0) + delta
    assert a["by_call"]["off CPU"] == b["by_call"].get("off CPU", 0) + delta
    assert a["by_class"]["off_cpu"] >= delta and a["main_class"] == "off_cpu"
    # It traces OS calls already (issue #39 class 5): the advice says no traced call holds the stretch, and does not
    # ask for --trace=osrt again.
    assert "--trace=osrt" not in a["advice"] and "no traced OS call holds it" in a["advice"], a["advice"]
    assert {k: v for k, v in a["by_category"].items() if k != "off_cpu"} == \
        {k: v for k, v in b["by_category"].items() if k != "off_cpu"}


def test_read_back_idle_counts_migrations_not_pieces():
    """Issue #39, class 7: the idle before each migration to the host is split by what the host did (off CPU:
    waited on the migration; on CPU: worked on the pages), often into several pieces per gap. ``xN`` counts
    migrations: on unified-memory-a100 the read-back idle's names count the gaps before a UVM_DtoH migration that
    hold on-CPU (resp. off-CPU) idle, by a direct SQL count over the ingested tables, not the pieces (the CLI
    said x3,070 for 1,536 migrations)."""
    from tests.analysis.planting import ingested
    from tests.conftest import corpus_dir

    name = "SpaceManV3__cp3__unified-memory-a100.sqlite"
    path = ingested(corpus_dir() / "nsys" / name)
    got = _anatomy(path)
    (key,) = [k for k, v in got.items() if "uvm_migration" in v]
    calls = {n: k for n, _, k in got[key]["uvm_migration"][1]}
    pid, dev = key
    ops = " UNION ALL ".join(
        f"SELECT start_ns, end_ns, {kind} AS kind FROM {t} WHERE pid = {pid} AND device = {dev}"  # noqa: S608
        for t, kind in (("memcpy", "copy_kind"), ("kernels", "'kernel'")))
    gaps = f"""SELECT * FROM (SELECT MAX(end_ns) OVER (ORDER BY start_ns, end_ns ROWS BETWEEN UNBOUNDED PRECEDING
                   AND 1 PRECEDING) AS gs, start_ns AS ge, kind, LAG(kind) OVER (ORDER BY start_ns, end_ns) AS prev
               FROM ({ops})) WHERE kind = 'UVM_DtoH' AND prev LIKE 'UVM%' AND ge > gs"""  # noqa: S608
    # The thread that launched the device's work (the one whose off-CPU time the anatomy reads).
    off = (f"SELECT start_ns, end_ns FROM off_cpu WHERE pid = {pid} AND end_ns > start_ns AND tid IN "  # noqa: S608
           f"(SELECT DISTINCT tid FROM kernels WHERE pid = {pid} AND device = {dev})")
    con = duckdb.connect(str(path), read_only=True)
    try:
        n_gaps = con.execute(f"SELECT count(*) FROM ({gaps})").fetchone()[0]  # noqa: S608 - constants
        # Gaps the thread spent partly off CPU, and gaps it was not off CPU for all of (off-CPU stretches of one
        # thread do not overlap).
        waited, worked = con.execute(f"""
            SELECT count(*) FILTER (WHERE off_ns > 0), count(*) FILTER (WHERE off_ns < ge - gs) FROM (
                SELECT g.gs, g.ge, COALESCE(SUM(CASE WHEN o.start_ns IS NOT NULL  -- LEAST/GREATEST skip NULLs
                    THEN LEAST(o.end_ns, g.ge) - GREATEST(o.start_ns, g.gs) END), 0) AS off_ns
                FROM ({gaps}) g LEFT JOIN ({off}) o ON o.start_ns < g.ge AND o.end_ns > g.gs GROUP BY g.gs, g.ge)
            """).fetchone()  # noqa: S608 - constants
        n_dtoh = con.execute("SELECT count(*) FROM memcpy WHERE copy_kind = 'UVM_DtoH'").fetchone()[0]
    finally:
        con.close()
    assert calls["UVM_DtoH, host on CPU"] == worked
    assert calls["UVM_DtoH"] == waited
    # MEM004's claim, painted by the gap rules (its ``idle_by_direction`` gaps), counts the same.
    from analysis.diagnosis.rules.nsys.idle_claims import claims
    from analysis.diagnosis.rules.registry import default_registry

    tr = Trace(path, name)
    try:
        owned = {n: k for n, _, k in claims(tr, default_registry().idle_claimers()).by_rule["MEM004"].names}
    finally:
        tr.close()
    assert owned == {"UVM_DtoH, host on CPU": worked, "UVM_DtoH": waited}
    assert worked <= n_gaps <= n_dtoh and waited <= n_gaps
    assert 0 < waited < worked == n_gaps  # both kinds of idle, in different numbers of gaps
