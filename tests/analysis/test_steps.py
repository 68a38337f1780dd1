"""Exact per-iteration records: every iteration's GPU busy time and compute / exposed comm /
memory-only / idle, written into the normalized file at ingest, checked against an independent
computation on the raw export; the JSON's records are the file's; files of schema version 2 (no table)
get the same records computed; multi-rank records name the rank that finished each step last."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest

from analysis.api import analyze, check_normalized_report, ingest
from analysis.errors import TraceError
from analysis.loops.phases import find_loop, stored_loop
from analysis.model.trace import Trace
from tests.analysis.planting import GPU_TABLES, add_kernel_like, copy_export, has_table, sqlite_rw
from tests.analysis.test_phases import MS, _plant_loop
from tests.conftest import corpus_file

FIELDS = ("start_ns", "end_ns", "ns", "gpu_busy_ns", "compute_ns", "comm_exposed_ns", "comm_overlapped_ns",
          "memory_only_ns", "idle_ns")


def _raw_ops(src: Path, pid: int, device: int) -> list[tuple[int, int, str]]:
    """(start, end, kind) of the unit's GPU operations read from the raw export; kind 'nccl' for kernels
    whose short or demangled name starts with nccl, 'compute' for the other kernels, 'memory' else."""
    con = sqlite_rw(src)
    out = []
    try:
        for table in GPU_TABLES:
            if not has_table(con, table):
                continue
            if table == "CUPTI_ACTIVITY_KIND_KERNEL":
                rows = con.execute(f"""SELECT k.start, k."end", COALESCE(s.value, '') || '|' || COALESCE(d.value, '')
                    FROM {table} k LEFT JOIN StringIds s ON s.id = k.shortName LEFT JOIN StringIds d ON d.id = k.demangledName
                    WHERE (k.globalPid >> 24) & 16777215 = ? AND k.deviceId = ?""", [pid, device]).fetchall()  # noqa: S608
                out += [(s, e, "nccl" if any(p.startswith("nccl") for p in n.split("|")) else "compute")
                        for s, e, n in rows]
            else:
                out += [(s, e, "memory") for s, e in con.execute(
                    f'SELECT start, "end" FROM {table} WHERE (globalPid >> 24) & 16777215 = ? AND deviceId = ?',  # noqa: S608
                    [pid, device]).fetchall()]
    finally:
        con.close()
    return [o for o in out if o[1] >= o[0]]


def _union(ivs: list[tuple[int, int]]) -> int:
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(ivs):
        if cur_e is None or s > cur_e:
            total += 0 if cur_e is None else cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (0 if cur_e is None else cur_e - cur_s)


def _oracle(ops: list[tuple[int, int, str]], lo: int, hi: int) -> dict[str, int]:
    """The partition of [lo, hi) by plain Python: clip, then union lengths of each kind."""
    clipped = [(max(s, lo), min(e, hi), k) for s, e, k in ops if s < hi and e > lo]
    a = _union([(s, e) for s, e, _ in clipped])
    c = _union([(s, e) for s, e, k in clipped if k == "compute"])
    n = _union([(s, e) for s, e, k in clipped if k == "nccl"])
    cn = _union([(s, e) for s, e, k in clipped if k != "memory"])
    return {"ns": hi - lo, "gpu_busy_ns": a, "compute_ns": c, "comm_exposed_ns": cn - c,
            "comm_overlapped_ns": n - (cn - c), "memory_only_ns": a - cn, "idle_ns": hi - lo - a}


def _table(path: Path) -> list[dict]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        cur = con.execute("SELECT * FROM iterations ORDER BY idx")
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    finally:
        con.close()


def _check_exact(src: Path, out: Path) -> list[dict]:
    rows = _table(out)
    assert rows, "the export has a loop"
    pid, device = rows[0]["pid"], rows[0]["device"]
    ops = _raw_ops(src, pid, device)
    for i, r in enumerate(rows):
        assert r["idx"] == i and (r["pid"], r["device"]) == (pid, device)
        if i + 1 < len(rows):
            assert r["end_ns"] == rows[i + 1]["start_ns"]  # iterations tile the loop
        assert {k: r[k] for k in _oracle(ops, 0, 1)} == _oracle(ops, r["start_ns"], r["end_ns"]), i
        assert r["compute_ns"] + r["comm_exposed_ns"] + r["memory_only_ns"] + r["idle_ns"] == r["ns"]
    return rows


@pytest.mark.parametrize("name", ["torchrun-2gpu-nccl-sendrecv-before-cropped.sqlite", "cupy-power-iteration.sqlite"])
def test_records_in_the_file_are_exact_on_corpus_exports(name, tmp_path):
    src = corpus_file(name)
    out = tmp_path / "r.duckdb"
    ingest(src, out)
    rows = _check_exact(src, out)
    # The loop's iterations: the same starts and times the analysis reports.
    it = analyze([out], labels=["r"], window="all").to_json()["reports"][0]["iterations"]
    assert [i["start_ns"] for i in it["items"]] == [r["start_ns"] for r in rows][:len(it["items"])]
    assert [i["ns"] for i in it["items"]] == [r["ns"] for r in rows][:len(it["items"])]


def test_planted_collectives_across_iteration_edges_split_exactly(tmp_path):
    """NCCL kernels planted over iteration boundaries, partly under compute and partly alone: each
    iteration gets exactly its clipped share of exposed and overlapped communication."""
    src = copy_export(corpus_file("cupy-power-iteration.sqlite"), tmp_path / "p.sqlite")
    ingest(src, tmp_path / "before.duckdb")
    before = _table(tmp_path / "before.duckdb")
    con = sqlite_rw(src)
    with con:
        (rowid,) = con.execute("""SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL
                                  WHERE (globalPid >> 24) & 16777215 = ? AND deviceId = ? ORDER BY start LIMIT 1""",
                               [before[0]["pid"], before[0]["device"]]).fetchone()
        for j in (5, 11, 20):   # from the middle of iteration j to the middle of j + 1
            r0, r1 = before[j], before[j + 1]
            add_kernel_like(con, rowid, (r0["start_ns"] + r0["end_ns"]) // 2, (r1["start_ns"] + r1["end_ns"]) // 2,
                            name="ncclDevKernel_AllReduce_Sum_f32_RING_LL", correlation=10**12 + j)
    con.close()
    out = tmp_path / "after.duckdb"
    ingest(src, out)
    rows = _check_exact(src, out)
    assert [r["start_ns"] for r in rows] == [r["start_ns"] for r in before]  # the NVTX steps stay
    for j in (5, 6, 11, 12, 20, 21):
        assert rows[j]["comm_exposed_ns"] > 0 and rows[j]["comm_overlapped_ns"] > 0
    assert sum(r["comm_exposed_ns"] for r in rows) > 0 == sum(r["comm_exposed_ns"] for r in before)


def test_json_records_are_the_files_and_version_2_files_compute_the_same(tmp_path):
    src = corpus_file("torchrun-2gpu-nccl-sendrecv-before-cropped.sqlite")
    out = tmp_path / "r.duckdb"
    ingest(src, out)
    rows = {r["idx"]: r for r in _table(out)}
    result = analyze([out], labels=["r"]).to_json()
    ana = result["reports"][0]["iterations"]["anatomy"]
    assert ana["records"] and ana["records_total"] == len(ana["records"]) <= len(rows)
    for rec in ana["records"]:
        r = rows[rec["index"]]
        assert {k: rec[k] for k in FIELDS} == {k: r[k] for k in FIELDS} and rec["phase"] == r["phase"]
    window = result["reports"][0]["window"]
    assert {rec["index"] for rec in ana["records"]} == {
        i for i, r in rows.items() if r["start_ns"] >= window["start_ns"] and r["end_ns"] <= window["end_ns"]}
    # The same file as schema version 2 wrote it (no iterations table): the records are computed, equal.
    old = tmp_path / "v2.duckdb"
    shutil.copy(out, old)
    con = duckdb.connect(str(old))
    for table in ("iterations", "nccl_calls", "gpu_metrics", "nic_metrics", "nics"):  # every version-3 table
        con.execute(f"DROP TABLE IF EXISTS {table}")
    con.execute("DELETE FROM meta WHERE key = 'loop'")
    con.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    con.close()
    assert check_normalized_report(old) == "nsys"
    t = Trace(old, "v2")
    assert "iterations" not in t.tables and stored_loop(t) is None
    t.close()
    again = analyze([old], labels=["r"]).to_json()
    assert again["reports"][0]["iterations"]["anatomy"] == ana
    assert again == result  # the loop, phases, records and findings: the same whether stored or computed
    con = duckdb.connect(str(old))
    con.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    con.close()
    with pytest.raises(TraceError) as exc:
        check_normalized_report(old)
    assert exc.value.code == "unsupported_schema"


def _ranks(tmp_path: Path, plans: list[tuple[list[int], int]]) -> tuple[list[dict], dict]:
    outs, facts = [], []
    for i, (periods, gap) in enumerate(plans):
        src = copy_export(corpus_file("cloverleaf-devsync.sqlite"), tmp_path / f"r{i}.sqlite")
        facts.append(_plant_loop(src, periods, startup_gap=gap))
        outs.append(tmp_path / f"r{i}.duckdb")
        ingest(src, outs[-1])
    return facts, analyze(outs, labels=[f"r{i}" for i in range(len(plans))], window="all").to_json()


def test_records_name_the_rank_that_finished_each_step_last(tmp_path):
    p = 5 * MS
    # Same session start; rank 1's loop 1 ms behind: it finishes every step last, 1 ms after rank 0.
    _, result = _ranks(tmp_path, [([p] * 20, 200 * MS), ([p] * 20, 201 * MS)])
    assert result["steps"]["last"] == {"r0": 0, "r1": 20} and "first_iteration" not in result["steps"]
    for rep in result["reports"]:
        recs = rep["iterations"]["anatomy"]["records"]
        assert len(recs) == 20 and all(r["last"] == "r1" and r["spread_ns"] == MS for r in recs)


def test_ranks_with_different_iteration_counts_pair_on_the_absolute_clock(tmp_path):
    """Rank 1's capture holds one more iteration (it began a step earlier): its iteration j + 1 is rank 0's
    j on the absolute clock, 1 ms later. Pairing by index would pair steps 5 ms apart, with rank 0 last."""
    p = 5 * MS
    _, result = _ranks(tmp_path, [([p] * 20, 200 * MS), ([p] * 21, 200 * MS - p + MS)])
    steps = result["steps"]
    assert steps["count"] == 20 and steps["first_iteration"] == {"r0": 0, "r1": 1}
    assert steps["last"] == {"r0": 0, "r1": 20} and steps["spread_median_ns"] == MS
    r1 = result["reports"][1]["iterations"]["anatomy"]["records"]
    assert "last" not in r1[0] and all(r["last"] == "r1" and r["spread_ns"] == MS for r in r1[1:])


@pytest.mark.parametrize("name", ["cupy-power-iteration.sqlite", "torchrun-2gpu-nccl-sendrecv-before-cropped.sqlite",
                                  "cupy-a100.sqlite", "poolformer-nvtx-only.sqlite"])
def test_the_loop_stored_at_ingest_is_the_one_found_now(name, tmp_path):
    """NVTX steps, a kernel pattern, no loop, NVTX steps without GPU work: the file's loop is find_loop's."""
    out = tmp_path / "r.duckdb"
    ingest(corpus_file(name), out)
    t = Trace(out, "r")
    try:
        stored, found = stored_loop(t), find_loop(t)
    finally:
        t.close()
    assert stored is not None
    assert stored.starts.tolist() == found.starts.tolist() and stored.ends.tolist() == found.ends.tolist()
    for key in ("source", "signature", "unit", "detail", "reason"):
        assert getattr(stored, key) == getattr(found, key), key
    assert stored.nvtx == {k: v for k, v in found.nvtx.items() if k != "items"}


def test_a_stored_loop_without_iterations_is_not_looked_for_again(tmp_path, monkeypatch):
    """A report without a loop (cupy-a100): the analysis takes the ingest's answer, as for one with a loop (an empty
    ``Loop`` is falsy, which once sent the analysis to ``find_loop`` again), with the same result as a loop found now."""
    from analysis.loops import phases

    out = tmp_path / "r.duckdb"
    ingest(corpus_file("cupy-a100.sqlite"), out)
    with monkeypatch.context() as m:  # as a file without a stored loop: found at analysis
        m.setattr(phases, "stored_loop", lambda trace: None)
        found_now = analyze([out], labels=["r"]).to_json()
    t = Trace(out, "r")
    try:
        stored = stored_loop(t)
        assert stored is not None and len(stored) == 0 and stored.source is None
        calls: list[str] = []
        found = phases.find_loop
        monkeypatch.setattr(phases, "find_loop", lambda trace: calls.append(trace.label) or found(trace))
        info = phases.phase_info(t)
        assert calls == [] and info.loop.reason == stored.reason
    finally:
        t.close()
    assert analyze([out], labels=["r"]).to_json() == found_now
    assert calls == []


def test_impact_per_step_on_an_iterations_window(tmp_path):
    """iterations:A-B is a stretch of the loop: each finding's impact per step is over its B - A + 1 steps;
    the records shown are those iterations, as in the file."""
    out = tmp_path / "r.duckdb"
    ingest(corpus_file("cupy-power-iteration.sqlite"), out)
    result = analyze([out], labels=["r"], window="iterations:10-19").to_json()
    ana = result["reports"][0]["iterations"]["anatomy"]
    assert [r["index"] for r in ana["records"]] == list(range(10, 20)) and ana["steady_count"] == 10
    rows = {r["idx"]: r for r in _table(out)}
    assert all(rec[k] == rows[rec["index"]][k] for rec in ana["records"] for k in FIELDS)
    timed = [f for f in result["findings"] if f["impact_ns"]]
    assert timed and all(f["steps_in_window"] == 10 and f["impact_per_step_ns"] == round(f["impact_ns"] / 10)
                         for f in timed)
