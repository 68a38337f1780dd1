"""Stream and CUDA graph launches: graph launches planted into copies of real exports, every
figure of the report's launch summary and KRN001's graph estimate recomputed from the raw export."""

from __future__ import annotations

import inspect
import math
import re
import sqlite3
from pathlib import Path

import pytest

from analysis import fmt
from analysis.api import analyze, ingest
from analysis.diagnosis.launches import launch_summary
from analysis.model.trace import Trace
from tests.analysis.planting import clone_row, copy_export, ingested, new_string, raw_gaps, sqlite_rw
from tests.analysis.rule_cases import KRN_SHORT_NS, _blocking_copy_calls, krn001_fires
from tests.conftest import corpus_file

MASK = 0xFFFFFF
# The rules' and summaries' own semantics over the whole export: the analysis reads the steady state by
# default, so these tests ask for all of it.
WHOLE = {"window": "all"} if "window" in inspect.signature(analyze).parameters else {}


def _disc(sorted_vals: list[int], q: float) -> int:
    """Nearest rank (DuckDB's quantile_disc): the value at 0-based rank max(1, ceil(q * n)) - 1."""
    return sorted_vals[max(1, math.ceil(q * len(sorted_vals))) - 1]


def _cols(con: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in con.execute(f'PRAGMA table_info("{table}")')}


def raw_launches(path: Path) -> dict[str, dict[str, int] | None]:
    """nsys' cuda_kern_exec figures per launch kind, written independently on the raw export: kernels joined to
    their launch call (a cu*/cuda* call with Launch in its name) by pid and correlation id."""
    con = sqlite_rw(path)
    dup = "WHERE r.eventClass IS NOT 67" if "eventClass" in _cols(con, "CUPTI_ACTIVITY_KIND_RUNTIME") else ""
    calls: dict[tuple[int, int], list] = {}
    setup = [0, 0]  # graph capture, build and instantiate calls: count, host time
    for s, e, name, pid, corr in con.execute(f"""
            SELECT r.start, r."end", s.value, (r.globalTid >> 24) & {MASK}, r.correlationId
            FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId {dup}"""):  # noqa: S608
        name = re.sub(r"_v\d+$", "", name)
        if "Launch" in name and name.startswith("cu"):  # the launch calls
            calls[(pid, corr)] = [s, e, name in ("cudaGraphLaunch", "cuGraphLaunch")]
        if re.match(r"cu(da)?(StreamBeginCapture|StreamEndCapture|GraphInstantiate|GraphUpload|GraphExecUpdate"
                    r"|GraphCreate$|GraphClone$|GraphAdd\w*Node)", name):
            setup[0] += 1
            setup[1] += e - s
    gid = "graphId" if "graphId" in _cols(con, "CUPTI_ACTIVITY_KIND_KERNEL") else "NULL"
    kernels = con.execute(f"""SELECT (globalPid >> 24) & {MASK}, correlationId, start, {gid}, "end" - start
                              FROM CUPTI_ACTIVITY_KIND_KERNEL""").fetchall()  # noqa: S608
    con.close()
    lat: dict[str, list[int]] = {"stream": [], "graph": []}
    queue: dict[str, list[int]] = {"stream": [], "graph": []}
    per_call: dict[str, dict[tuple[int, int], int]] = {"stream": {}, "graph": {}}
    work = 0
    for pid, corr, ks, g, dur in kernels:
        if (pid, corr) not in calls:
            continue
        cs, ce, is_graph = calls[(pid, corr)]
        kind = "graph" if is_graph or (g or 0) != 0 else "stream"
        lat[kind].append(ks - cs)
        queue[kind].append(max(0, ks - ce))
        per_call[kind][(pid, corr)] = ce - cs
        work += dur if kind == "graph" else 0
    out: dict[str, dict[str, int] | None] = {}
    for kind in ("stream", "graph"):
        if not lat[kind]:
            out[kind] = None
            continue
        la, qu, ca = sorted(lat[kind]), sorted(queue[kind]), sorted(per_call[kind].values())
        out[kind] = {"launches": len(ca), "kernels": len(la),
                     "call_median_ns": _disc(ca, 0.5), "call_p90_ns": _disc(ca, 0.9),
                     "latency_median_ns": _disc(la, 0.5), "latency_p90_ns": _disc(la, 0.9),
                     "queue_median_ns": _disc(qu, 0.5), "queue_p90_ns": _disc(qu, 0.9),
                     "work_ns": work if kind == "graph" else None,
                     "setup_calls": setup[0] if kind == "graph" else None,
                     "setup_ns": setup[1] if kind == "graph" else None}
    return out


def plant_graph_launch(path: Path, *, rename_call: bool, graph_id: bool, n: int = 3) -> None:
    """The last ``n`` kernels of the export become one CUDA graph's: their launching calls are replaced by one
    ``cudaGraphLaunch_v10000`` call (a copy of the first one, with a new correlation id) and/or the kernels
    get a non-zero ``graphId``."""
    con = sqlite_rw(path)
    rows = con.execute(f"""SELECT rowid, (globalPid >> 24) & {MASK}, correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL
                           ORDER BY start DESC LIMIT {n}""").fetchall()[::-1]  # noqa: S608
    with con:
        if rename_call:
            pid, corr = rows[0][1], rows[0][2]
            call = con.execute(f"""SELECT rowid FROM CUPTI_ACTIVITY_KIND_RUNTIME
                                   WHERE (globalTid >> 24) & {MASK} = ? AND correlationId = ?""",  # noqa: S608
                               [pid, corr]).fetchone()[0]
            new = con.execute("SELECT MAX(correlationId) + 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0]
            clone_row(con, "CUPTI_ACTIVITY_KIND_RUNTIME", call, correlationId=new,
                      nameId=new_string(con, "cudaGraphLaunch_v10000"))
            con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE rowid = ?", [call])
            for rowid, _, _ in rows:
                con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = ? WHERE rowid = ?", [new, rowid])
        if graph_id:
            for rowid, _, _ in rows:
                con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET graphId = 7 WHERE rowid = ?", [rowid])
    con.close()


def _summary(path: Path, tmp_path: Path) -> dict:
    out = tmp_path / "r.duckdb"
    ingest(path, out)
    return analyze([out], rules=["KRN001"], **WHOLE).to_json()["reports"][0]["launches"]


@pytest.mark.parametrize(("corpus", "rename_call", "graph_id"), [
    ("gaussian-threadsync.sqlite", True, False),         # a cudaGraphLaunch call (no graphId column)
    ("devsync-heavy-report13.sqlite", False, True),      # kernels' graph ids (2025.5+ exports)
    ("devsync-heavy-report13.sqlite", True, True),
])
def test_planted_graph_launch(corpus, rename_call, graph_id, tmp_path) -> None:
    path = copy_export(corpus_file(corpus), tmp_path / "a.sqlite")
    before = _summary(path, tmp_path)
    assert before["available"] and before["graph"] is None and before["stream"]
    plant_graph_launch(path, rename_call=rename_call, graph_id=graph_id)
    expected = raw_launches(path)
    got = _summary(path, tmp_path)
    assert got["graph"] == expected["graph"] and got["stream"] == expected["stream"]
    assert got["graph"]["kernels"] == 3
    assert got["graph"]["launches"] == (1 if rename_call else 3)
    assert got["stream"]["kernels"] == before["stream"]["kernels"] - 3


@pytest.mark.parametrize("corpus", ["gaussian-threadsync.sqlite", "vecadd-2026.sqlite", "cupy-a100.sqlite",
                                    "torchrun-2gpu-nccl-sendrecv-before-cropped.sqlite"])
def test_stream_launches_match_raw(corpus) -> None:
    """Silent case: real exports without graphs have stream launches only, matching the raw export (the
    two-process torchrun file needs the pid in the join)."""
    expected = raw_launches(corpus_file(corpus))
    t = Trace(ingested(corpus_file(corpus)), corpus)
    try:
        got = launch_summary(t).to_json()
    finally:
        t.close()
    assert got["graph"] is None and expected["graph"] is None
    assert got["stream"] == expected["stream"]


def test_no_cuda_trace_says_how_to_collect(tmp_path) -> None:
    out = tmp_path / "r.duckdb"
    ingest(corpus_file("poolformer-nvtx-only.sqlite"), out)
    got = analyze([out], rules=["KRN001"], **WHOLE).to_json()["reports"][0]["launches"]
    assert not got["available"] and "--trace=cuda" in got["reason"]


def _krn001_runs(path: Path) -> list[tuple[int, int]]:
    """(kernels, owned idle) of each run KRN001 reports on the planted Gaussian solver, from the raw export
    (the definition krn001_fires uses, per run)."""
    con = sqlite_rw(path)
    kernels: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for p, d, s, e in con.execute(f"""SELECT (globalPid >> 24) & {MASK}, deviceId, start, "end"
                                      FROM CUPTI_ACTIVITY_KIND_KERNEL"""):  # noqa: S608
        kernels.setdefault((p, d), []).append((s, e))
    runs = []
    for unit, ks in kernels.items():
        run: list[tuple[int, int]] = []
        for s, e in sorted(ks) + [(0, 10**18)]:
            if e - s < KRN_SHORT_NS:
                run.append((s, e))
                continue
            if len(run) >= 20:
                runs.append((unit, run[0][0], max(x[1] for x in run), len(run)))
            run = []
    copies = _blocking_copy_calls(con)
    gaps = raw_gaps(con)
    con.close()
    out = []
    for unit, r0, r1, n in runs:
        idle = sum(ge - gs for p, d, gs, ge in gaps if (p, d) == unit and r0 <= gs and ge <= r1
                   and ge - gs < 1_000_000 and not any(s <= gs <= e for s, e in copies))
        if idle:
            out.append((n, idle))
    return out


def test_krn001_graph_saving(tmp_path) -> None:
    """KRN001 on the launch-bound Gaussian solver: impact unchanged, plus what graphs would save,
    Σ min(idle, (N - 1) × median stream launch call) over its runs, from the raw export."""
    path = copy_export(corpus_file("gaussian-threadsync.sqlite"), tmp_path / "a.sqlite")
    impact = krn001_fires(path, None)
    overhead = raw_launches(path)["stream"]["call_median_ns"]
    runs = _krn001_runs(path)
    assert sum(i for _, i in runs) == impact
    expected = sum(min(idle, (n - 1) * overhead) for n, idle in runs)
    out = tmp_path / "r.duckdb"
    ingest(path, out)
    (f,) = [f for f in analyze([out], thresholds={"KRN001.short_kernel_us": 1000}, **WHOLE).to_json()["findings"]
            if f["rule_id"] == "KRN001"]
    assert f["impact_ns"] == impact
    assert f["per_launch_overhead_ns"] == overhead and f["graph_saving_ns"] == expected
    assert 0 < expected <= impact
    assert "CUDA graph" in f["advice"] and fmt.duration(overhead) in f["advice"]
