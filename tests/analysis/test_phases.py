"""Phases, iterations without NVTX and per-step anatomy, on loops planted in real corpus exports.

The planted loop: K kernels with distinct names, copied from a real export, laid back to back and
repeated N times after all of the export's own activity (which becomes the start-up); the original GPU
rows are removed. Every expected number comes from the planting parameters, not from Goodput.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.api import analyze, ingest
from analysis.errors import TraceError
from analysis.loops.periods import find_period
from analysis.loops.phases import find_loop
from analysis.loops.window import parse
from analysis.model.trace import Trace
from tests.analysis.planting import (
    GPU_TABLES,
    clone_row,
    copy_export,
    has_table,
    ingest_copy,
    ingested,
    sqlite_rw,
    time_tables,
)
from tests.conftest import corpus_file

BASE = "cloverleaf-devsync.sqlite"
K = 8
SPACING = 1_000            # ns between the kernels of one iteration
MS = 1_000_000
HOST_TABLES = ("CUPTI_ACTIVITY_KIND_RUNTIME", "OSRT_API", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")


def _plant_loop(path: Path, periods: list[int], startup_gap: int = 200 * MS, shuffle: int | None = None,
                sync: bool = False, wait: bool = False) -> dict:
    """Replace the export's GPU work by ``len(periods)`` iterations of K distinct kernels; iteration i
    starts ``periods[i-1]`` after iteration i-1. ``shuffle``: a seed to launch each iteration's kernels in
    a different order (no repeating sequence); ``sync``: a cudaDeviceSynchronize after each iteration.
    Returns the planting facts."""
    con = sqlite_rw(path)
    rows = con.execute('SELECT rowid, demangledName, "end" - start FROM CUPTI_ACTIVITY_KIND_KERNEL '
                       "ORDER BY start").fetchall()
    body, seen = [], set()
    for rowid, name, dur in rows:
        if name not in seen and dur > 0:
            seen.add(name)
            body.append((rowid, int(dur)))
        if len(body) == K:
            break
    end_all = max(con.execute(f'SELECT MAX("end") FROM "{t}"').fetchone()[0] or 0  # noqa: S608
                  for t in time_tables(con))
    # The first activity Goodput reads: API calls, OS runtime calls, NVTX, syncs (the GPU rows go).
    first_all = min(con.execute(f'SELECT MIN(start) FROM "{t}"').fetchone()[0] or end_all  # noqa: S608
                    for t in HOST_TABLES if has_table(con, t))
    t0 = end_all + startup_gap
    with con:
        templates = [(clone_row(con, "CUPTI_ACTIVITY_KIND_KERNEL", rowid), dur) for rowid, dur in body]
        for table in GPU_TABLES:
            if has_table(con, table):
                con.execute(f"DELETE FROM {table} WHERE rowid NOT IN ({', '.join(str(r) for r, _ in templates)})"  # noqa: S608
                            if table == "CUPTI_ACTIVITY_KIND_KERNEL" else f"DELETE FROM {table}")  # noqa: S608
        rng = random.Random(shuffle)
        sync_row = con.execute("""SELECT r.rowid FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
                                  WHERE s.value LIKE 'cudaDeviceSynchronize%' LIMIT 1""").fetchone()[0]
        # The thread that launched the copied kernels, and an OS call to clone onto it.
        launcher = con.execute("""SELECT r.globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN CUPTI_ACTIVITY_KIND_KERNEL k
                                  ON k.correlationId = r.correlationId WHERE k.rowid = ?""", [templates[0][0]]).fetchone()[0]
        osrt_row = con.execute("SELECT rowid FROM OSRT_API LIMIT 1").fetchone()[0]
        starts, t = [], t0
        for i in range(len(periods)):
            starts.append(t)
            at = t
            order = list(templates)
            if shuffle is not None:
                rng.shuffle(order)
            for rowid, dur in order:
                clone_row(con, "CUPTI_ACTIVITY_KIND_KERNEL", rowid, start=at, end=at + dur)
                at += dur + SPACING
            if sync:
                clone_row(con, "CUPTI_ACTIVITY_KIND_RUNTIME", sync_row, start=at, end=at + SPACING)
            if wait:
                clone_row(con, "OSRT_API", osrt_row, start=at, end=t + periods[i], globalTid=launcher)
            t += periods[i]
        con.execute(f"DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid IN ({', '.join(str(r) for r, _ in templates)})")  # noqa: S608
    con.close()
    span = sum(d for _, d in body) + SPACING * (K - 1)
    return {"t0": t0, "first": first_all, "starts": starts, "body_ns": span, "last_end": starts[-1] + span}


def _analyzed(tmp_path: Path, periods: list[int], plant: dict | None = None, **kw) -> tuple[dict, dict]:
    src = copy_export(corpus_file(BASE), tmp_path / "planted.sqlite")
    facts = _plant_loop(src, periods, **(plant or {}))
    # Identical plants (the same periods) share one ingest per session.
    out = ingest_copy(src, tmp_path / "planted.duckdb")
    return facts, analyze([out], labels=["planted"], **kw).to_json()


def test_replicated_loop_gives_count_period_and_phases_exactly(tmp_path):
    p = 5 * MS
    periods = [3 * p, 3 * p] + [p] * 28   # two slow warm-up iterations, then the steady pace
    facts, result = _analyzed(tmp_path, periods)
    rep = result["reports"][0]
    it = rep["iterations"]
    assert it["source"] == "kernel_pattern" and it["count"] == 30
    assert it["detail"]["period_ops"] == K
    assert it["iteration_time"]["median_ns"] == p
    phases = {ph["name"]: ph for ph in rep["phases"]}
    assert list(phases) == ["startup", "warmup", "steady"]
    assert phases["startup"]["start_ns"] == facts["first"] and phases["startup"]["end_ns"] == facts["t0"]
    assert phases["warmup"]["end_ns"] == facts["starts"][2] == phases["steady"]["start_ns"]
    assert phases["steady"]["end_ns"] == facts["last_end"]
    assert rep["window"]["phase"] == "steady" and rep["window"]["start_ns"] == facts["starts"][2]
    by_rule = {f["rule_id"]: f for f in result["findings"]}
    assert by_rule["PHASE001"]["impact_ns"] == facts["t0"] - facts["first"]
    assert by_rule["PHASE001"]["phase"] == "startup" and by_rule["PHASE001"]["severity"] != "critical"
    assert by_rule["PHASE002"]["impact_ns"] == 2 * (3 * p - p) and by_rule["PHASE002"]["phase"] == "warmup"
    # The rules judged the steady window only: the GPU span is the steady iterations' alone.
    assert rep["breakdown"]["span_ns"] == facts["last_end"] - facts["starts"][2]
    assert all(f["phase"] in ("steady", "startup", "warmup") for f in result["findings"])


def test_slow_iteration_is_named_with_its_cause(tmp_path):
    p, slow, extra = 5 * MS, 17, 50 * MS
    periods = [p] * 30
    periods[slow] += extra
    _, result = _analyzed(tmp_path, periods)
    ana = result["reports"][0]["iterations"]["anatomy"]
    top = ana["slowest_steps"][0]
    assert top["index"] == slow and top["extra_ns"] == extra
    assert top["owner"] == "GPU001" and "GPU001" in top["cause"]
    assert ana["kind"] == "throughput" or ana["gpu_duty_cycle_pct"] < 50


def test_host_paced_loop_idle_is_not_critical(tmp_path):
    period = 40 * MS   # 25 frames per second, a short batch of kernels per frame; the host waits for each
    facts, result = _analyzed(tmp_path, [period] * 25, plant={"wait": True})
    ana = result["reports"][0]["iterations"]["anatomy"]
    assert ana["kind"] == "host_paced" and ana["per_second"] == 25.0
    busy = facts["body_ns"] - (K - 1) * SPACING   # the kernels run; the spacing between them is idle
    assert ana["gpu_duty_cycle_pct"] == pytest.approx(100.0 * busy / period, abs=0.001)
    assert ana["latency"]["gpu_exec_ns"] == busy
    idle = [f for f in result["findings"] if f["rule_id"] in ("GPU001", "GPU002", "HOST001")]
    assert idle and all(f["severity"] == "info" and f.get("host_paced") for f in idle)
    # Without the host-paced judgement the same idle would be critical: it is most of the window.
    assert max(f["impact_pct"] for f in idle) >= 10.0
    # The same loop whose host does not wait (busy elsewhere: starved, not paced) keeps its critical idle.
    (tmp_path / "starved").mkdir()
    _, starved = _analyzed(tmp_path / "starved", [period] * 25)
    assert starved["reports"][0]["iterations"]["anatomy"]["kind"] == "throughput"
    assert any(f["rule_id"] == "GPU001" and f["severity"] == "critical" for f in starved["findings"])


def test_kernel_pattern_finds_the_nvtx_steps(tmp_path):
    src = corpus_file("cupy-power-iteration.sqlite")
    with_nvtx = Trace(ingested(src), src.name)
    nv = find_loop(with_nvtx)
    with_nvtx.close()
    assert nv.source == "nvtx"
    plain = copy_export(src, tmp_path / "no-nvtx.sqlite")
    con = sqlite_rw(plain)
    with con:
        for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'NVTX%'").fetchall():
            con.execute(f'DROP TABLE "{name}"')
    con.close()
    out = tmp_path / "no-nvtx.duckdb"
    ingest(plain, out)
    trace = Trace(out, "no-nvtx")
    kp = find_loop(trace)
    full_steps = len(nv) - 1  # the last step range is cut short by the end of the capture
    trace.close()
    assert kp.source == "kernel_pattern"
    assert len(kp) == full_steps
    # Same period: start-to-start times agree with the NVTX steps' to within 1%.
    assert float(np.median(kp.durations)) == pytest.approx(float(np.median(np.diff(nv.starts))), rel=0.01)
    # Same iterations: each opens at the same place in the matching NVTX step (the anchor is the step's
    # first operation that occurs once per step, a fixed number of operations into it).
    offset = int(kp.starts[0] - nv.starts[0])
    assert 0 <= offset < float(np.median(np.diff(nv.starts)))
    assert np.all(np.abs((kp.starts - nv.starts[:len(kp)]) - offset) < 0.05 * np.median(np.diff(nv.starts)))


def test_windows_parse_and_fail_cleanly():
    assert parse(None).kind == "steady"
    assert parse("iterations:2-5").a == 2 and parse("time:1.5s-2s").b == 2 * 10**9
    assert parse("nvtx:Step #").name == "Step #"
    for bad in ("bogus", "iterations:5-2", "time:3-1", "nvtx:"):
        with pytest.raises(TraceError) as exc:
            parse(bad)
        assert exc.value.code == "bad_window"


def test_window_all_keeps_the_whole_report():
    out = ingested(corpus_file("cupy-power-iteration.sqlite"))
    whole = analyze([out], labels=["r"], window="all").to_json()
    steady = analyze([out], labels=["r"]).to_json()
    assert whole["reports"][0]["window"]["phase"] == "all"
    assert steady["reports"][0]["breakdown"]["span_ns"] < whole["reports"][0]["breakdown"]["span_ns"]
    it = analyze([out], labels=["r"], window="iterations:3-5").to_json()["reports"][0]
    starts = [i["start_ns"] for i in it["iterations"]["items"]]
    assert it["window"]["start_ns"] == starts[3] and it["window"]["end_ns"] == starts[6]


@settings(max_examples=60, deadline=None)
@given(body=st.lists(st.integers(0, 5), min_size=1, max_size=30), n=st.integers(10, 40), data=st.data())
def test_period_survives_random_insertions(body, n, data):
    body = [100, *body]  # one operation that opens every iteration
    seq = body * n
    k = data.draw(st.integers(0, n // 10))
    for _ in range(k):
        at = data.draw(st.integers(0, len(seq)))
        seq.insert(at, data.draw(st.sampled_from([0, 1, 2, 3, 4, 5, 200])))
    found = find_period(np.array(seq, dtype=np.uint64))
    assert found is not None and found[0] == len(body)


def test_idle_inside_nccl_setup_is_setup_not_data_loading():
    src = corpus_file("nccl-ring-2node-r0-ault43.sqlite")
    result = analyze([ingested(src)], rules=["GPU001"], window="all").to_json()
    (gpu,) = result["findings"]
    assert gpu["main_cause"] == "setup" and "data loading" not in gpu["advice"].lower()
    # Independently: each gap shown as set-up lies at least half inside NCCL set-up ranges or CUDA set-up calls,
    # and those gaps hold most of the idle shown (a gap after a sync the host left for another CUDA call says
    # so: its cause is not set-up).
    setup = [e for e in gpu["evidence"] if e["detail"]["cause"] == "setup"]
    assert 2 * sum(e["value_ns"] for e in setup) >= sum(e["value_ns"] for e in gpu["evidence"])
    trace = Trace(ingested(src), src.name)
    try:
        for e in setup:
            covered = trace.scalar("""
                SELECT COALESCE(MAX(LEAST(end_ns, $e) - GREATEST(start_ns, $s)), 0) FROM (
                    SELECT start_ns, end_ns FROM nvtx WHERE text LIKE 'ncclComm%' OR text LIKE 'ncclGetUniqueId%'
                    UNION ALL SELECT start_ns, end_ns FROM cuda_api
                    WHERE regexp_matches(name, '^cu(da)?(Malloc|HostAlloc|MallocHost|MemAlloc|Module|Init|SetDevice)'))
                WHERE start_ns < $e AND end_ns > $s""", {"s": e["start_ns"], "e": e["end_ns"]})
            assert 2 * covered >= e["end_ns"] - e["start_ns"]
    finally:
        trace.close()


def test_ranks_keep_their_own_steady_window_and_the_run_gives_the_common_one(tmp_path):
    # Each report is analyzed on its own (one task per report right after its ingest), so its
    # rules look at its own steady phase; the run gives the stretch where all ranks are steady.
    p = 5 * MS
    outs, facts = [], []
    for i, gap in enumerate((200 * MS, 260 * MS)):   # the second rank's loop starts 60 ms later
        src = copy_export(corpus_file(BASE), tmp_path / f"r{i}.sqlite")
        facts.append(_plant_loop(src, [p] * 30, startup_gap=gap))
        outs.append(tmp_path / f"r{i}.duckdb")
        ingest(src, outs[-1])
    result = analyze(outs, labels=["r0", "r1"]).to_json()
    t = Trace(outs[0], "r0")
    assert t.session_start_utc_ns is not None  # both copies share the export's session start
    t.close()
    lo = max(f["starts"][0] for f in facts)
    hi = min(f["last_end"] for f in facts)
    for rep, f, common in zip(result["reports"], facts, result["aligned_window"], strict=True):
        steady = next(ph for ph in rep["phases"] if ph["name"] == "steady")
        assert (rep["window"]["start_ns"], rep["window"]["end_ns"]) == (steady["start_ns"], steady["end_ns"])
        assert steady["start_ns"] == f["starts"][0]
        assert (common["start_ns"], common["end_ns"]) == (lo, hi)  # same session start: same times
        assert steady["start_ns"] <= lo and steady["end_ns"] >= hi
    # Same session start, the second rank 60 ms behind: it finishes every step last, 60 ms after.
    steps = result["steps"]
    assert steps["count"] == 30 and steps["last"] == {"r0": 0, "r1": 30}
    assert steps["spread_median_ns"] == 60 * MS and steps["items"][0] == {"index": 0, "last": "r1", "spread_ns": 60 * MS}


def test_host_sync_cadence_gives_the_iterations_without_a_kernel_pattern(tmp_path):
    period = 40 * MS
    facts, result = _analyzed(tmp_path, [period] * 20, plant={"shuffle": 7, "sync": True})
    rep = result["reports"][0]
    it = rep["iterations"]
    assert it["source"] == "host_sync" and it["count"] == 20
    assert it["iteration_time"]["median_ns"] == period
    steady = next(ph for ph in rep["phases"] if ph["name"] == "steady")
    assert steady["start_ns"] == facts["starts"][0] and steady["end_ns"] == facts["last_end"]
    assert it["anatomy"]["per_second"] == 25.0
    # The same loop without the syncs has no cadence to find: a one-shot program, whose work (first to
    # last GPU operation) is the analysis window.
    (tmp_path / "plain").mkdir()
    plain_facts, plain = _analyzed(tmp_path / "plain", [period] * 20, plant={"shuffle": 7})
    rep = plain["reports"][0]
    assert rep["iterations"]["source"] is None
    assert [ph["name"] for ph in rep["phases"]] == ["startup", "work"]
    work = rep["phases"][1]
    assert (work["start_ns"], work["end_ns"]) == (plain_facts["starts"][0], plain_facts["last_end"])
    assert (rep["window"]["phase"], rep["window"]["start_ns"]) == ("work", plain_facts["starts"][0])
