"""Issue #39 class 8: CUDA graph replays are GPU work.

nsys traces a graph launch whole by default (``--cuda-graph-trace=graph``): one CUPTI_ACTIVITY_KIND_GRAPH_TRACE row
per replay, and none of its kernels in CUPTI_ACTIVITY_KIND_KERNEL. The corpus has no such export, so one is planted
from a real one at test time: gaussian-threadsync's 4,095 elimination steps (Fan1 then Fan2, each launched with
cudaLaunchKernel) become 4,095 replays of one graph, each a graph-trace row from Fan1's start to Fan2's end,
launched by one cudaGraphLaunch (Fan1's launch call renamed; Fan2's removed), after one capture and instantiation.
The replays then count as GPU work: the breakdown's busy time is the union of the export's GPU rows (graph rows
included) by direct SQL, the loop is still the 4,095 steps, the launches are graph launches with their GPU work and
the capture and instantiate cost beside it, and no kernel rule names a graph as a kernel.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from analysis.api import analyze
from tests.analysis.planting import clone_row, copy_export, ingest_copy, new_string, sqlite_rw
from tests.conftest import corpus_file

EXPORT = "gaussian-threadsync.sqlite"
GRAPH_ID = 7
SETUP = (("cudaGraphInstantiateWithFlags_v11040", 300_000), ("cudaStreamEndCapture_v10000", 20_000),
         ("cudaStreamBeginCapture_v10000", 50_000))


def _as_graphs(path: Path) -> int:
    """Each (Fan1, Fan2) pair replaced by one replay of graph ``GRAPH_ID``; returns the number of replays."""
    con = sqlite_rw(path)
    rows = con.execute("""
        SELECT k.rowid, k.start, k."end", k.correlationId, k.deviceId, k.contextId, k.streamId, k.globalPid, s.value
        FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName ORDER BY k.start""").fetchall()
    pairs = [(a, b) for a, b in zip(rows, rows[1:], strict=False) if a[8] == "Fan1" and b[8] == "Fan2"]
    launch = new_string(con, "cudaGraphLaunch_v10000")
    first = con.execute("SELECT rowid, start FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId = ?",
                        [pairs[0][0][3]]).fetchone()
    with con:
        # Capture and instantiate, on the launching thread just before the first replay.
        at = first[1]
        for name, dur in SETUP:
            clone_row(con, "CUPTI_ACTIVITY_KIND_RUNTIME", first[0], start=at - dur, end=at,
                      nameId=new_string(con, name), correlationId=0)
            at -= dur
        con.execute("""CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start INTEGER NOT NULL, end INTEGER NOT NULL,
                       deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, greenContextId INTEGER,
                       streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, graphId INTEGER NOT NULL,
                       graphExecId INTEGER)""")
        con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES (?, ?, ?, ?, NULL, ?, ?, ?, ?, ?)",
                        [(a[1], b[2], a[4], a[5], a[6], a[3], a[7], GRAPH_ID, GRAPH_ID) for a, b in pairs])
        con.executemany("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid = ?",
                        [(r[0],) for a, b in pairs for r in (a, b)])
        con.executemany("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId = ? WHERE correlationId = ?",
                        [(launch, a[3]) for a, _ in pairs])
        con.executemany("DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId = ?", [(b[3],) for _, b in pairs])
    con.close()
    return len(pairs)


def _busy_by_sql(path: Path) -> int:
    """The union of the export's GPU rows (kernels, copies, graph replays) in the analysis window's bounds."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        ops = con.execute("""SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL
                             SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_MEMCPY UNION ALL
                             SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE ORDER BY 1, 2""").fetchall()
    finally:
        con.close()
    busy, reach = 0, None
    for s, e in ops:
        if reach is None or s >= reach:
            busy += e - s
            reach = e
        elif e > reach:
            busy += e - reach
            reach = e
    return busy


def test_graph_replays_are_gpu_work(tmp_path) -> None:
    src = copy_export(corpus_file(EXPORT), tmp_path / "g.sqlite")
    replays = _as_graphs(src)
    assert replays == 4095
    result = analyze([ingest_copy(src, tmp_path / "g.duckdb")], window="all").to_json()
    report = result["reports"][0]
    bd = report["breakdown"]
    assert bd["span_ns"] - bd["idle_ns"] == _busy_by_sql(src)
    assert bd["idle_ns"] < 0.25 * bd["span_ns"]  # the replays fill the GPU as the kernels did
    assert report["counts"]["kernels"] == replays  # one row per replay, no kernel of its own
    assert abs(int(report["iterations"]["count"]) - replays) <= 1
    launches = report["launches"]
    graph = launches["graph"]
    assert graph["launches"] == replays and launches["stream"] is None, launches
    # Set-up against replays: the capture and instantiate calls, and the GPU work the replays ran (direct SQL).
    assert (graph["setup_calls"], graph["setup_ns"]) == (len(SETUP), sum(d for _, d in SETUP))
    con = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    try:
        work = con.execute('SELECT SUM("end" - start) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE').fetchone()[0]
    finally:
        con.close()
    assert graph["work_ns"] == work and graph["call_median_ns"] < work / replays
    # No kernel rule takes a graph for a kernel (no ncu command for "CUDA graph 7").
    for f in result["findings"]:
        if f["rule_id"] in ("KRN003", "KRN004", "KRN005"):
            assert "CUDA graph" not in f["title"], f["title"]
    assert "ncu --kernel-name CUDA graph" not in (result["verdict"]["next_step"] or "")
