"""The run's one DuckDB connection for cross-rank work: every report attached, the analysis
limits applied, the ranks' clocks aligned once; COMM002 on it gives what an independent oracle computes."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from analysis.api import analyze
from analysis.diagnosis.rules.base import Registry
from analysis.diagnosis.rules.nsys.comm import Stragglers
from analysis.model.trace import DUCKDB_THREADS, Run, Trace
from tests.analysis.planting import ingested, kernel, normalized
from tests.analysis.rule_runner import run_rules
from tests.conftest import corpus_file

NCCL_R0 = "nccl-ring-2node-r0-ault43.sqlite"
NCCL_R1 = "nccl-ring-2node-r1-ault44.sqlite"
TORCHRUN = "torchrun-2gpu-nccl-sendrecv-before-cropped.sqlite"


def _setting(con, name: str) -> str:
    return con.execute(f"SELECT current_setting('{name}')").fetchone()[0]


def test_run_connection_attaches_every_report_with_the_limits():
    paths = [ingested(corpus_file(NCCL_R0)), ingested(corpus_file(NCCL_R1))]
    with Run.open(paths, memory_bytes=300 * 2**20) as run:
        con = run.con
        assert _setting(con, "memory_limit") == "300.0 MiB"
        assert int(_setting(con, "threads")) == DUCKDB_THREADS
        attached = {r[0]: r[1] for r in con.execute(
            "SELECT database_name, readonly FROM duckdb_databases() WHERE database_name LIKE 'r%'").fetchall()}
        assert attached == {"r0": True, "r1": True}
        assert [run.alias(t) for t in run.traces] == ["r0", "r1"]
        for t in run.traces:  # the attached file is the report itself
            n = con.execute(f"SELECT count(*) FROM {run.alias(t)}.kernels").fetchone()[0]  # noqa: S608
            assert n == t.scalar("SELECT count(*) FROM kernels")


def test_comm002_runs_on_the_run_connection_and_leaves_nothing_behind():
    paths = [ingested(corpus_file(NCCL_R0)), ingested(corpus_file(NCCL_R1))]
    with Run.open(paths, memory_bytes=200 * 2**20) as run:
        findings, results = run_rules(run, Registry([Stragglers]))
        assert results[0].status == "ok" and len(findings) == 1
        assert run._con is not None, "COMM002 used the run's connection, not one of its own"
        assert _setting(run._con, "memory_limit") == "200.0 MiB"
        temp = run._con.execute("SELECT count(*) FROM duckdb_tables() WHERE temporary").fetchone()[0]
        assert temp == 0


def test_offsets_are_session_start_differences():
    a = Trace(Path("a"), "a")
    b = Trace(Path("b"), "b")
    a.__dict__["meta"] = {"session_start_utc_ns": str(1728501278164576908)}
    b.__dict__["meta"] = {"session_start_utc_ns": str(1728501278164576908 - 5)}
    run = Run([a, b])
    assert run.offsets([a, b]) == [5, 0]
    assert run.offsets([a]) == [0]
    b.__dict__["meta"] = {}
    assert run.offsets([a, b]) is None


# ----------------------------------------------------------------------------- an independent oracle

def oracle(parts: list[tuple[int, list[tuple[int, int, str, int]]]], min_skew_ns: int) -> dict:
    """Stragglers computed with plain Python from (session start, [(pid, device, name, start_ns)]) per report."""
    base = min(s for s, _ in parts) if len(parts) > 1 else 0
    events: dict[tuple[int, int], dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for i, (start, rows) in enumerate(parts):
        for pid, _dev, name, t in rows:
            events[(i, pid)][name].append(t + (start - base if len(parts) > 1 else 0))
    who = list(events)
    inst: dict[tuple[str, int], dict[tuple[int, int], int]] = defaultdict(dict)
    for w in who:
        for name, ts in events[w].items():
            for k, t in enumerate(sorted(ts)):
                inst[(name, k)][w] = t
    complete = {key: v for key, v in inst.items() if len(v) == len(who)}
    per = {w: {"times_last": 0, "skew_when_last": 0, "waited": 0, "imposed": 0} for w in who}
    for v in complete.values():
        last_w = max(v, key=v.get)
        last, skew = v[last_w], max(v.values()) - min(v.values())
        if skew >= min_skew_ns:
            per[last_w]["times_last"] += 1
            per[last_w]["skew_when_last"] += skew
            per[last_w]["imposed"] += sum(last - t for t in v.values())
            for w, t in v.items():
                per[w]["waited"] += last - t
    return {"per": per, "matched": len(complete)}


def _nccl_rows(path: Path) -> tuple[int, list[tuple[int, int, str, int]]]:
    t = Trace(path, path.name)
    try:
        return t.session_start_utc_ns, t.sql(
            "SELECT pid, device, name, start_ns FROM kernels WHERE category = 'nccl' ORDER BY start_ns")
    finally:
        t.close()


def _check(result: dict, expected: dict) -> None:
    (f,) = [f for f in result["findings"] if f["rule_id"] == "COMM002"]
    per = expected["per"]
    late = max(per, key=lambda w: (per[w]["times_last"], per[w]["skew_when_last"]))
    assert f["impact_ns"] == per[late]["skew_when_last"]
    assert f["wait_imposed_ns"] == per[late]["imposed"]
    assert f["matched_collectives"] == expected["matched"]
    assert sorted((p["times_last"], p["skew_when_last_ns"], p["waited_ns"]) for p in f["participants"].values()) == \
        sorted((p["times_last"], p["skew_when_last"], p["waited"]) for p in per.values())


@pytest.mark.parametrize("names", [(NCCL_R0, NCCL_R1), (NCCL_R1, NCCL_R0), (TORCHRUN,)])
def test_comm002_on_corpus_multi_rank_exports_matches_the_oracle(names):
    paths = [ingested(corpus_file(n)) for n in names]
    expected = oracle([_nccl_rows(p) for p in paths], 100_000)
    _check(analyze(paths, rules=["COMM002"], window="all").to_json(), expected)  # the whole reports, as the oracle


def test_six_ranks_on_absolute_clocks_do_not_overflow(tmp_path):
    """Six ranks with session starts ~1.7e18 (absolute clocks) must not overflow INT64 in COMM002."""
    start = 1728501278164576908
    parts, paths = [], []
    for rank in range(6):
        rows = [(100 + rank, 0, name, 1_000_000 * (k + 1) + (300_000 if rank == 4 else 1_000 * rank))
                for k in range(4) for name in ("ncclDevKernel_AllReduce", "ncclDevKernel_SendRecv")]
        session = start + 7 * rank  # node clocks a few ns apart
        paths.append(normalized(tmp_path / f"r{rank}.duckdb", {"session_start_utc_ns": session, "rank": rank},
                                kernels=[kernel(t, t + 50_000, pid=p, device=d, name=n, category="nccl")
                                         for p, d, n, t in rows]))
        parts.append((session, rows))
    result = analyze(paths, rules=["COMM002"], window="all").to_json()  # the whole reports, as the oracle
    assert {r["id"]: r["status"] for r in result["rules"]} == {"COMM002": "ok"}
    _check(result, oracle(parts, 100_000))
    (f,) = result["findings"]
    assert f["rank"] == 4 and f["evidence"][0]["start_ns"] < 10**9  # evidence stays on the report's own clock


# ----------------------------------------------------------------------------- COMM002 in the analysis window

def _windowed_rows(path: Path, lo: int, hi: int) -> tuple[int, list[tuple[int, int, str, int]]]:
    """The NCCL kernels of the collective instances (numbered over the whole report, per pid and name) that
    lie in [lo, hi), by plain Python on the rows; each instance keeps its number through a name suffix, so
    that the oracle matches the same kernels whatever the window."""
    start, rows = _nccl_rows(path)
    t = Trace(path, path.name)
    try:
        ends = dict(((r[0], r[3]), r[4]) for r in t.sql(
            "SELECT pid, device, name, start_ns, end_ns FROM kernels WHERE category = 'nccl'"))
    finally:
        t.close()
    seen: dict[tuple[int, str], int] = defaultdict(int)
    out = []
    for pid, dev, name, s in rows:
        k = seen[(pid, name)]
        seen[(pid, name)] += 1
        inside = s < hi and (s >= lo or ends[(pid, s)] > lo)
        out.append((pid, dev, f"{name}#{k}", s, inside))
    return start, out


def test_comm002_counts_only_the_collectives_in_the_window(tmp_path):
    """A straggler planted outside the window (pid 145 delayed 2 ms at the first half's collectives) is
    seen over the whole report and not in a window on the second half, where the result is the oracle's
    over the instances every participant has inside the window."""
    from tests.analysis.planting import copy_export, sqlite_rw

    src = copy_export(corpus_file(TORCHRUN), tmp_path / "t.sqlite")
    con = sqlite_rw(src)
    nccl = con.execute("""SELECT k.rowid, k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName
                          WHERE s.value LIKE 'ncclDevKernel%' AND (k.globalPid >> 24) & 16777215 = 145
                          ORDER BY k.start""").fetchall()
    cut = nccl[len(nccl) // 2][1]   # the window starts at pid 145's 17th collective
    with con:
        for rowid, _ in nccl[:len(nccl) // 2]:
            con.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = start + 2000000, "end" = "end" + 2000000 '
                        "WHERE rowid = ?", [rowid])
    con.close()
    path = ingested(src)
    hi = 10**12
    whole = analyze([path], rules=["COMM002"], window="all").to_json()
    (f_all,) = whole["findings"]
    assert "pid 145" in f_all["title"] and f_all["matched_collectives"] == 33
    windowed = analyze([path], rules=["COMM002"], window=f"time:{cut}ns-{hi}ns").to_json()
    start, rows = _windowed_rows(path, cut, hi)
    keep = {(r[2]) for r in rows if r[4]}
    both = {n for n in keep if sum(1 for r in rows if r[2] == n and r[4]) == 2}
    assert 0 < len(both) < 33
    expected = oracle([(start, [r[:4] for r in rows if r[2] in both])], 100_000)
    if not any(p["times_last"] for p in expected["per"].values()):
        assert windowed["findings"] == []  # no skew left in the window: no straggler to name
    else:
        _check(windowed, expected)
        assert windowed["findings"][0]["impact_ns"] < f_all["impact_ns"]
    # The planted skews all lie before the window: only the unplanted instances are shown.
    assert all(e["detail"]["instance"] >= len(nccl) // 2 for f in windowed["findings"] for e in f["evidence"])
    assert any(e["detail"]["instance"] < len(nccl) // 2 for e in f_all["evidence"])  # the whole report: planted ones too
