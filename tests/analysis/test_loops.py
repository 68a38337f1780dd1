"""Several loops per report, no false loops, and host-paced loops without OS runtime tracing.

Planted: the corpus loop of ``test_phases`` (K kernels copied from a real export) replicated at two
periods one after the other, built at test time; every expected number comes from the planting. The
period finder's pure parts (signatures, segments, level cuts) get property tests.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.errors import TraceError
from analysis.loops.phases import find_loop
from analysis.loops.signatures import level_cuts, repeats_one, segments
from analysis.model.trace import Trace
from tests.analysis.planting import clone_row, copy_export, ingest_copy, sqlite_rw
from tests.analysis.test_phases import BASE, MS, K, _analyzed, _plant_loop
from tests.conftest import corpus_file


def test_one_loop_at_two_periods_is_two_loops_each_its_own(tmp_path):
    a, b = 5 * MS, 8 * MS
    facts, result = _analyzed(tmp_path, [a] * 15 + [b] * 20)
    rep = result["reports"][0]
    it = rep["iterations"]
    loops = it["loops"]
    assert [lp["count"] for lp in loops] == [15, 20] and it["program"] == "loops"
    assert [lp["median_ns"] for lp in loops] == [a, b]
    s = facts["starts"]
    assert (loops[0]["start_ns"], loops[0]["end_ns"]) == (s[0], s[14] + facts["body_ns"])
    assert (loops[1]["start_ns"], loops[1]["end_ns"]) == (s[15], facts["last_end"])
    # The main loop is the one with the most GPU time (the second: 20 iterations of the same kernels); the
    # top-level fields are its own.
    assert [lp["main"] for lp in loops] == [False, True]
    assert it["count"] == 20 and it["median_ns"] == b and it["iteration_time"]["median_ns"] == b
    # The steady phase and the default window cover both loops.
    steady = next(ph for ph in rep["phases"] if ph["name"] == "steady")
    assert (steady["start_ns"], steady["end_ns"]) == (s[0], facts["last_end"])
    assert (rep["window"]["start_ns"], rep["window"]["end_ns"]) == (s[0], facts["last_end"])
    # Findings say which loops their evidence lies in.
    judged = [f for f in result["findings"] if f.get("phase") == "steady"]
    assert judged and all(set(f["loops"]) <= {0, 1} for f in judged)
    assert any(f["loops"] for f in judged)


def test_same_pace_throughout_stays_one_loop(tmp_path):
    _, result = _analyzed(tmp_path, [5 * MS] * 30)
    assert len(result["reports"][0]["iterations"]["loops"]) == 1
    assert result["reports"][0]["iterations"]["program"] == "loop"


def test_host_paced_loop_without_os_runtime_tracing(tmp_path):
    # A camera-like loop: 25 frames per second, a short batch of kernels per frame, nothing recorded on the
    # host between frames (no OS runtime calls, no CPU samples).
    period = 40 * MS
    src = copy_export(corpus_file(BASE), tmp_path / "paced.sqlite")
    facts = _plant_loop(src, [period] * 25)
    con = sqlite_rw(src)
    with con:
        con.execute("DELETE FROM OSRT_API")
        con.execute("DELETE FROM COMPOSITE_EVENTS")
    con.close()
    from analysis.api import analyze

    out = ingest_copy(src, tmp_path / "paced.duckdb")
    result = analyze([out], labels=["paced"]).to_json()
    ana = result["reports"][0]["iterations"]["anatomy"]
    assert ana["kind"] == "host_paced" and ana["per_second"] == 25.0
    busy = facts["body_ns"] - (K - 1) * 1_000
    assert ana["latency"]["gpu_exec_ns"] == busy
    assert ana["headroom_per_second"] == round(1e9 / busy, 3) and ana["headroom_x"] == round(period / busy, 3)
    assert ana["integrated_gpu"] is False  # the export's GPU is a discrete one
    idle = [f for f in result["findings"] if f["rule_id"] in ("GPU001", "GPU002", "HOST001")]
    assert idle and all(f["severity"] == "info" for f in idle)


def test_an_input_paced_loop_costs_the_time_the_host_waits_for_its_input(tmp_path):
    # Issue #39 class 6: 25 frames per second; between frames the launching thread waits 30 ms in an OS call (the
    # input not there yet) and does other host work the rest of the gap. The verdict costs the wait, not all idle.
    period, wait = 40 * MS, 30 * MS
    src = copy_export(corpus_file(BASE), tmp_path / "paced.sqlite")
    facts = _plant_loop(src, [period] * 25)
    con = sqlite_rw(src)
    with con:
        launcher, osrt = con.execute("""SELECT r.globalTid, (SELECT rowid FROM OSRT_API LIMIT 1)
            FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId
            LIMIT 1""").fetchone()
        con.execute("DELETE FROM OSRT_API WHERE rowid != ?", [osrt])
        for t in facts["starts"][1:]:
            clone_row(con, "OSRT_API", osrt, start=t - wait, end=t, globalTid=launcher)
        con.execute("DELETE FROM OSRT_API WHERE rowid = ?", [osrt])
        con.execute("DELETE FROM COMPOSITE_EVENTS")
    con.close()
    from analysis.api import analyze

    result = analyze([ingest_copy(src, tmp_path / "paced.duckdb")], labels=["paced"]).to_json()
    rep = result["reports"][0]
    ana = rep["iterations"]["anatomy"]
    assert ana["kind"] == "host_paced"
    # The waits inside the window: every gap between two frames the window holds, 30 ms each.
    lo, hi = rep["window"]["start_ns"], rep["window"]["end_ns"]
    expected = sum(min(t, hi) - max(t - wait, lo) for t in facts["starts"][1:] if min(t, hi) > max(t - wait, lo))
    assert ana["input_wait_ns"] == expected > 0
    verdict = rep["verdict"]
    assert verdict["kind"] == "host_paced" and verdict["impact_ns"] == expected
    idle = rep["breakdown"]["idle_ns"]
    assert idle > expected and "waits for its input" in verdict["text"]


def test_one_shot_distinct_launches_are_not_a_loop():
    # vecadd: 4 chunks of (HtoD, HtoD, kernel, DtoH), each on its own stream: one pipeline, not 3 or 4
    # iterations (the labels: no loop); its work window is its first to last GPU operation.
    from tests.analysis.planting import ingested

    src = corpus_file("vecadd-2026.sqlite")
    t = Trace(ingested(src), src.name)
    try:
        assert len(find_loop(t)) == 0
        streams = t.sql("SELECT stream, COUNT(*) FROM kernels GROUP BY stream")
        assert len(streams) == 4 and all(n == 1 for _, n in streams)
    finally:
        t.close()


# ----------------------------------------------------------------------------- property tests

@settings(max_examples=80, deadline=None)
@given(n1=st.integers(3, 40), n2=st.integers(3, 40), data=st.data())
def test_segments_cut_two_loops_where_the_signature_changes(n1, n2, data):
    sigs = np.array([1] * n1 + [2] * n2, dtype=np.uint64)
    # Odd iterations (a logging kernel, an extra copy) at isolated places, each with its own signature.
    n = n1 + n2
    odd = data.draw(st.sets(st.integers(0, n - 1), max_size=max(0, n // 10)))
    odd = {i for i in odd if i - 1 not in odd and i + 1 not in odd}
    for j, i in enumerate(sorted(odd)):
        sigs[i] = 100 + j
    # Both loops must keep a run of three of their own for the cut to be seen.
    runs = [(0, n1), (n1, n)]
    if any(not any(all(k not in odd for k in range(i, i + 3)) for i in range(a, b - 2)) for a, b in runs):
        return
    got = segments(sigs)
    assert len(got) == 2 and got[0][0] == 0 and got[-1][1] == n
    assert abs(got[0][1] - n1) <= 3   # the cut lands at the first run of the second loop


@settings(max_examples=60, deadline=None)
@given(n=st.integers(6, 60), data=st.data())
def test_alternating_signatures_are_one_loop(n, data):
    sigs = np.array([1, 2] * n, dtype=np.uint64)
    assert segments(sigs) == [(0, 2 * n)]


@settings(max_examples=60, deadline=None)
@given(k=st.integers(2, 12), data=st.data())
def test_distinct_steps_are_no_loop(k, data):
    # A one-shot program: every step is different work; a few repeats of one of them are not enough.
    sigs = np.arange(k, dtype=np.uint64)
    assert not repeats_one(sigs, 4.0)
    assert segments(sigs) == []
    # Five single operations in a row are a loop; three are not.
    assert repeats_one(np.zeros(5, dtype=np.uint64), 1.0) and not repeats_one(np.zeros(3, dtype=np.uint64), 1.0)


@settings(max_examples=80, deadline=None)
@given(n1=st.integers(3, 60), n2=st.integers(3, 60), ratio=st.floats(1.3, 5.0), seed=st.integers(0, 2**16))
def test_level_cuts_find_the_second_pace(n1, n2, ratio, seed):
    rng = np.random.default_rng(seed)
    d = np.r_[np.full(n1, 1e6), np.full(n2, 1e6 * ratio)] * rng.uniform(0.97, 1.03, n1 + n2)
    assert level_cuts(d) == [n1]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(10, 3000), seed=st.integers(0, 2**16), power=st.sampled_from([1, 2]))
def test_shrinking_work_is_one_loop_with_a_trend(n, seed, power):
    # Gaussian elimination: step t works on an (n - t)^power block, plus a fixed launch cost; jitter 5 %.
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    d = (2e4 + 1e6 * ((n - t) / n) ** power) * rng.uniform(0.95, 1.05, n)
    assert level_cuts(d) == []


def test_the_loop_finder_sees_two_planted_loops_on_the_trace(tmp_path):
    src = copy_export(corpus_file(BASE), tmp_path / "two.sqlite")
    facts = _plant_loop(src, [5 * MS] * 12 + [9 * MS] * 12)
    out = ingest_copy(src, tmp_path / "two.duckdb")
    t = Trace(out, "two")
    try:
        loop = find_loop(t)
        assert [len(x) for x in loop.all] == [12, 12]
        assert [int(x.starts[0]) for x in loop.all] == [facts["starts"][0], facts["starts"][12]]
    finally:
        t.close()


def test_one_shot_ranks_show_startup_as_startup_and_every_phase_exists():
    # Two ranks of one NCCL AllReduce: most of each rank is ncclCommInitRank. No loop, so each rank has
    # start-up (until the communicator is set up), work (the collective) and teardown; the findings judge
    # the work, and every finding's phase is a phase its report (or, run-level, every report) has.
    from analysis.api import analyze
    from tests.analysis.planting import ingested

    names = ("nccl-ring-2node-r0-ault43.sqlite", "nccl-ring-2node-r1-ault44.sqlite")
    outs = [ingested(corpus_file(n)) for n in names]
    result = analyze(outs, labels=["r0", "r1"]).to_json()
    phases = {rep["file"]: {ph["name"]: ph for ph in rep["phases"]} for rep in result["reports"]}
    for rep, out in zip(result["reports"], outs, strict=True):
        ph = phases[rep["file"]]
        assert list(ph) == ["startup", "work", "teardown"]
        assert rep["window"]["phase"] == "work" and rep["iterations"]["program"] == "one_shot"
        t = Trace(out, "r")
        try:
            # Start-up holds the whole communicator set-up; the work starts with the AllReduce kernel.
            init_end = t.scalar("SELECT MAX(end_ns) FROM nvtx WHERE text = 'ncclCommInitRank'")
            first_ar = t.scalar("SELECT MIN(start_ns) FROM kernels WHERE name LIKE 'ncclKernel_AllReduce%'")
        finally:
            t.close()
        assert ph["startup"]["end_ns"] >= init_end and ph["work"]["start_ns"] == first_ar
    for f in result["findings"]:
        owners = [f["report"]] if f.get("report") else list(phases)
        assert all(f["phase"] in phases[o] for o in owners), f
        if f["phase"] == "work" and f["severity"] == "critical":
            for e in f.get("evidence") or []:
                if e.get("start_ns") is not None and f.get("report"):
                    assert e["start_ns"] >= phases[f["report"]]["work"]["start_ns"]


def test_a_step_slowed_by_a_copy_is_named_as_copies(tmp_path):
    # Ten iterations of four kernels, 1 ms apart; iteration 5 also reads 5 ms of results back (DtoH) before
    # the next one starts. Its extra time is copies, not longer kernels.
    from analysis.api import analyze
    from tests.analysis.planting import kernel, normalized

    kernels, copies, t = [], [], 1_000_000
    for i in range(10):
        start = t
        for j in range(4):
            kernels.append(kernel(t, t + 100_000, name=f"k{j}"))
            t += 110_000
        if i == 5:
            copies.append({"pid": 1, "tid": 1, "device": 0, "stream": 7, "start_ns": t, "end_ns": t + 5 * MS,
                           "copy_kind": "DtoH", "bytes": 1 << 30, "src_kind": "device", "dst_kind": "pageable"})
            t += 5 * MS
        t = max(t, start + MS)
    out = normalized(tmp_path / "copy.duckdb", kernels=kernels, memcpy=copies)
    rep = analyze([out], labels=["c"], window="all").to_json()["reports"][0]
    slow = rep["iterations"]["anatomy"]["slowest_steps"][0]
    assert slow["index"] == 5 and slow["cause"].startswith("longer copies")
    assert "copies alone +5.00 ms" in slow["cause"]


def test_each_loop_is_its_own_window(tmp_path):
    a, b = 5 * MS, 8 * MS
    facts, result = _analyzed(tmp_path, [a] * 15 + [b] * 20, window="loop:0")
    rep = result["reports"][0]
    s = facts["starts"]
    assert (rep["window"]["start_ns"], rep["window"]["end_ns"]) == (s[0], s[14] + facts["body_ns"])
    # The rules judged that loop alone: the GPU span is its first kernel to its last.
    assert rep["breakdown"]["span_ns"] == s[14] + facts["body_ns"] - s[0]
    # Its step anatomy is that loop's (not the main loop's, which lies outside the window): 15 steps of 5 ms,
    # and the findings' impact per step divides by those 15.
    ana = rep["iterations"]["anatomy"]
    assert ana["loop"] == 0 and not rep["iterations"]["loops"][0]["main"]
    assert ana["steady_count"] == 15 and ana["iteration_median_ns"] == a
    assert ana["iteration_time"]["median_ns"] == rep["iterations"]["loops"][0]["median_ns"] == a
    assert [r["start_ns"] for r in ana["records"]] == s[:15]
    judged = [f for f in result["findings"] if f["phase"] == "steady" and f["impact_ns"]]
    assert judged and all(f["steps_in_window"] == 15 and f["impact_per_step_ns"] == round(f["impact_ns"] / 15)
                          for f in judged)
    # The other loop under loop:1 (the main one): its 20 steps of 8 ms.
    (tmp_path / "second").mkdir()
    _, other = _analyzed(tmp_path / "second", [a] * 15 + [b] * 20, window="loop:1")
    ana = other["reports"][0]["iterations"]["anatomy"]
    assert (ana["loop"], ana["steady_count"], ana["iteration_median_ns"]) == (1, 20, b)
    (tmp_path / "third").mkdir()
    with pytest.raises(TraceError, match="2 found"):
        _analyzed(tmp_path / "third", [a] * 15 + [b] * 20, window="loop:2")


def test_copies_after_the_loop_are_an_epilogue_analysed_with_it(tmp_path):
    # Ten iterations of four kernels 1 ms apart, then the results read back (5 ms DtoH), then a free.
    from analysis.api import analyze
    from tests.analysis.planting import api, kernel, normalized

    kernels, t = [], 1_000_000
    for _ in range(10):
        start = t
        for j in range(4):
            kernels.append(kernel(t, t + 100_000, name=f"k{j}"))
            t += 110_000
        t = start + MS
    loop_end = t - MS + 4 * 110_000 - 10_000
    copy = {"pid": 1, "tid": 1, "device": 0, "stream": 7, "start_ns": t + MS, "end_ns": t + 6 * MS,
            "copy_kind": "DtoH", "bytes": 1 << 30, "src_kind": "device", "dst_kind": "pageable"}
    out = normalized(tmp_path / "epi.duckdb", kernels=kernels, memcpy=[copy],
                     cuda_api=[api(t + 7 * MS, t + 9 * MS, "cudaFree")])
    rep = analyze([out], labels=["e"]).to_json()["reports"][0]
    phases = {p["name"]: p for p in rep["phases"]}
    assert list(phases) == ["steady", "epilogue", "teardown"]
    assert phases["steady"]["end_ns"] == loop_end == phases["epilogue"]["start_ns"]
    assert phases["epilogue"]["end_ns"] == copy["end_ns"] and phases["teardown"]["end_ns"] == t + 9 * MS
    # The default window holds the loop and its epilogue: the copy is judged (memory-only time).
    assert (rep["window"]["start_ns"], rep["window"]["end_ns"]) == (1_000_000, copy["end_ns"])
    assert rep["breakdown"]["memory_only_ns"] == 5 * MS


def test_host_paced_on_an_integrated_gpu_says_zero_copy(tmp_path):
    # A camera pipeline on a Jetson-class GPU: 25 frames per second, each frame a pinned host-to-device copy
    # (0.2 ms) and four kernels, nothing recorded on the host between frames.
    from analysis.api import analyze
    from tests.analysis.planting import kernel, normalized

    kernels, copies = [], []
    for i in range(30):
        t = 1_000_000 + i * 40 * MS
        copies.append({"pid": 1, "tid": 1, "device": 0, "stream": 7, "start_ns": t, "end_ns": t + 200_000,
                       "copy_kind": "HtoD", "bytes": 6 << 20, "src_kind": "pinned", "dst_kind": "device"})
        t += 210_000
        for j in range(4):
            kernels.append(kernel(t, t + 500_000, name=f"k{j}"))
            t += 510_000
    out = normalized(tmp_path / "orin.duckdb", kernels=kernels, memcpy=copies,
                     devices=[{"device": 0, "pid": 1, "name": "Orin (nvgpu)"}])
    ana = analyze([out], labels=["o"]).to_json()["reports"][0]["iterations"]["anatomy"]
    assert ana["kind"] == "host_paced" and ana["per_second"] == 25.0
    assert ana["integrated_gpu"] is True and ana["zero_copy_ns"] == 200_000
    assert "cudaHostAllocMapped" in ana["advice"]
    busy = ana["latency"]["gpu_exec_ns"]
    assert busy == 200_000 + 4 * 500_000 and ana["headroom_per_second"] == round(1e9 / busy, 3)
