"""Iteration detection: the step range is picked by GPU share, outermost and non-library, checked on real exports."""

from __future__ import annotations

import sqlite3
import statistics

import pytest

from analysis.api import ingest
from analysis.loops.iterations import compact, iterations
from analysis.model.trace import Trace
from tests.analysis.planting import copy_export, ingested
from tests.conftest import corpus_file

# One step's projected GPU time, straight from the normalized tables: the first to the last GPU operation
# whose launching API call lies inside the range on the range's thread.
DIRECT_SQL = """
    SELECT n.start_ns, n.end_ns, MAX(g.end_ns) - MIN(g.start_ns), SUM(g.end_ns - g.start_ns), COUNT(*)
    FROM nvtx n
    JOIN cuda_api a ON a.pid = n.pid AND a.tid = n.tid AND a.start_ns BETWEEN n.start_ns AND n.end_ns
    JOIN (SELECT pid, correlation_id, start_ns, end_ns FROM kernels UNION ALL
          SELECT pid, correlation_id, start_ns, end_ns FROM memcpy UNION ALL
          SELECT pid, correlation_id, start_ns, end_ns FROM memset) g
      ON g.pid = a.pid AND g.correlation_id = a.correlation_id
    WHERE n.text LIKE $pattern AND n.kind = 'push_pop'
    GROUP BY n.start_ns, n.end_ns ORDER BY n.start_ns
"""


@pytest.fixture
def trace_of():
    opened = []

    def open_(path):
        t = Trace(ingested(corpus_file(path)) if isinstance(path, str) else path, str(path))
        opened.append(t)
        return t

    yield open_
    for t in opened:
        t.close()


def _deciles(values: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(values, n=10, method="inclusive")
    return q[0], q[-1]


def _check_stats(it: dict, gpu: list[int], wall: list[int]) -> None:
    p10, p90 = _deciles(gpu)
    assert it["median_ns"] == statistics.median(gpu) and it["min_ns"] == min(gpu) and it["max_ns"] == max(gpu)
    assert it["mean_ns"] == pytest.approx(statistics.fmean(gpu))
    assert (it["p10_ns"], it["p90_ns"]) == (pytest.approx(p10), pytest.approx(p90))
    assert it["spread_pct"] == pytest.approx(100 * (p90 - p10) / statistics.median(gpu), abs=1e-3)
    assert it["wall_median_ns"] == statistics.median(wall) and it["wall_max_ns"] == max(wall)
    by_gpu = sorted(range(len(gpu)), key=lambda i: (-gpu[i], -wall[i], i))[:5]
    assert [s["index"] for s in it["slowest"]] == by_gpu
    assert [s["gpu_ns"] for s in it["slowest"]] == [gpu[i] for i in by_gpu]


def test_cupy_steps_not_the_cub_library_range(trace_of):
    t = trace_of("cupy-power-iteration.sqlite")
    it = iterations(t)
    # 'Step 0 to 10', 'Step 10 to 20', ...: one name once digits are masked; the CUB ranges (domain CCCL,
    # 565 of them) and the single 'Loop' around the steps are not the iteration.
    assert (it["range"], it["range_example"], it["count"]) == ("Step # to #", "Step 0 to 10", 44)
    direct = t.sql(DIRECT_SQL, {"pattern": "Step % to %"})
    assert len(direct) == 44
    assert [(x["start_ns"], x["end_ns"], x["gpu_ns"], x["gpu_op_ns"], x["gpu_ops"]) for x in it["items"]] == [
        tuple(int(v) for v in d) for d in direct]
    gpu = [int(d[2]) for d in direct]
    _check_stats(it, gpu, [int(d[1] - d[0]) for d in direct])
    kernel_ns = t.scalar("SELECT SUM(end_ns - start_ns) FROM kernels")
    assert it["gpu_share_pct"] > 90 and sum(int(d[3]) for d in direct) <= kernel_ns + t.scalar(
        "SELECT COALESCE(SUM(end_ns - start_ns), 0) FROM memcpy") + t.scalar(
        "SELECT COALESCE(SUM(end_ns - start_ns), 0) FROM memset")
    assert "items" not in compact(it) and len(compact(it)["slowest"]) == 5


def test_torchrun_has_only_framework_op_ranges(trace_of):
    # Every NVTX range is a PyTorch emit_nvtx op range or an NCCL call: no step, and the reason says so.
    it = iterations(trace_of("torchrun-2gpu-nccl-sendrecv-before-cropped.sqlite"))
    assert it["has_nvtx"] is True and it["range"] is None and it["count"] == 0
    assert "never the step" in it["reason"] and "aten::" in it["reason"]


def test_nvfuser_internal_ranges_are_no_step(trace_of):
    # nvFuser's own ranges: the outer FusionExecutorCache::runFusionWithInputs runs twice, and nothing
    # repeating under it holds a quarter of the GPU work.
    it = iterations(trace_of("pytorch-nvfuser-h200.sqlite"))
    assert it["range"] is None and "25%" in it["reason"]


def test_nvtx_only_export_uses_host_time(trace_of):
    t = trace_of("poolformer-nvtx-only.sqlite")
    it = iterations(t)
    # No GPU activity: the outermost repeating user range with the most host time; TensorRT layers excluded.
    assert (it["range"], it["domain"], it["count"]) == ("3D_backbone", None, 188)
    assert it["gpu_share_pct"] is None and "no GPU activity" in it["note"]
    wall = [r[0] for r in t.sql("SELECT end_ns - start_ns FROM nvtx WHERE text = '3D_backbone' ORDER BY start_ns")]
    assert [x["wall_ns"] for x in it["items"]] == wall
    assert it["wall_median_ns"] == statistics.median(wall) and it["wall_min_ns"] == min(wall)
    p10, p90 = _deciles(wall)
    assert it["wall_spread_pct"] == pytest.approx(100 * (p90 - p10) / statistics.median(wall), abs=1e-3)


def test_no_nvtx_says_so(trace_of):
    it = iterations(trace_of("gaussian-threadsync.sqlite"))
    assert it["has_nvtx"] is False and it["range"] is None and "no NVTX" in it["reason"]


NVTX_DDL = """CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL,
    rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER,
    textId INTEGER, domainId INTEGER)"""
STEPS, PER_STEP = 30, 273   # gaussian-threadsync launches 8,190 kernels from one thread


def _plant_steps(dst) -> None:
    """train_step (registered string) around each group of launches, with nested forward and CUB ranges
    and, before the first step, many tiny top-level 'load_batch' ranges that launch nothing."""
    con = sqlite3.connect(str(dst))
    with con:
        launches = con.execute("""SELECT r.start, r.end, r.globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME r
            JOIN StringIds s ON s.id = r.nameId WHERE s.value LIKE 'cudaLaunchKernel%' ORDER BY r.start""").fetchall()
        assert len(launches) == STEPS * PER_STEP
        last_end = con.execute("SELECT MAX(end) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0]
        tid = launches[0][2]
        text_id = con.execute("SELECT MAX(id) + 1 FROM StringIds").fetchone()[0]
        con.execute("INSERT INTO StringIds VALUES (?, 'train_step')", [text_id])
        con.execute(NVTX_DDL)
        rows = []
        for j in range(STEPS * 2):
            rows.append((launches[0][0] - 10_000 + 100 * j, launches[0][0] - 10_000 + 100 * j + 50, None, "load_batch"))
        for i in range(STEPS):
            group = launches[i * PER_STEP:(i + 1) * PER_STEP]
            end = launches[(i + 1) * PER_STEP][0] - 1 if i + 1 < STEPS else last_end
            rows.append((group[0][0], end, text_id, None))
            rows.append((group[0][0], group[PER_STEP // 2][1], None, f"forward {i}"))
            rows.append((group[1][0], group[2][1], None, "cub::DeviceReduce::Sum"))
        con.executemany("INSERT INTO NVTX_EVENTS (start, end, eventType, textId, text, globalTid, endGlobalTid, domainId)"
                        " VALUES (?, ?, 59, ?, ?, ?, ?, 0)", [(s, e, x, t, tid, tid) for s, e, x, t in rows])
    con.close()


def test_planted_train_step_exact_gpu_time(tmp_path, trace_of):
    src = copy_export(corpus_file("gaussian-threadsync.sqlite"), tmp_path / "steps.sqlite")
    _plant_steps(src)
    # Expected per step straight from the SQLite export (raw nsys tables, independent of the ingest).
    con = sqlite3.connect(str(src))
    expected = con.execute("""
        SELECT n.end - n.start, MAX(g.end) - MIN(g.start), SUM(g.end - g.start), COUNT(*)
        FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId AND s.value = 'train_step'
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.globalTid = n.globalTid AND r.start BETWEEN n.start AND n.end
        JOIN (SELECT correlationId, start, end FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL
              SELECT correlationId, start, end FROM CUPTI_ACTIVITY_KIND_MEMCPY) g ON g.correlationId = r.correlationId
        GROUP BY n.start ORDER BY n.start""").fetchall()
    con.close()
    ingest(src, tmp_path / "steps.duckdb")
    it = iterations(trace_of(tmp_path / "steps.duckdb"))
    assert (it["range"], it["count"]) == ("train_step", STEPS)
    assert [(x["wall_ns"], x["gpu_ns"], x["gpu_op_ns"], x["gpu_ops"]) for x in it["items"]] == expected
    assert all(e[3] >= PER_STEP for e in expected)
    _check_stats(it, [e[1] for e in expected], [e[0] for e in expected])
    assert it["gpu_share_pct"] > 90


def _synthetic(tmp_path, spec):
    """A one-thread report from spec = (ranges [(text, start, end)], launches [(t, w)]): a launch at t runs
    one kernel of 100 * w ns."""
    from tests.analysis.planting import api, kernel, normalized

    ranges, launches = spec
    ks = [kernel(t + 5, t + 5 + 100 * w, corr=i + 1) for i, (t, w) in enumerate(launches)]
    calls = [api(t, t + 2, "cudaLaunchKernel", corr=i + 1) for i, (t, _) in enumerate(launches)]
    rows = [{"pid": 1, "tid": 1, "start_ns": s, "end_ns": e, "text": x, "kind": "push_pop", "nesting": 0}
            for x, s, e in ranges]
    return Trace(normalized(tmp_path / "s.duckdb", kernels=ks, cuda_api=calls, nvtx=rows), "s")


def test_gpu_share_beats_a_step_like_name(tmp_path):
    # 'fetch_batch' says batch and repeats more often, but 'model' holds 90% of the GPU work.
    ranges, launches = [], []
    for i in range(4):
        b = i * 10_000
        ranges += [("fetch_batch", b, b + 100), ("fetch_batch", b + 200, b + 300), ("model", b + 1000, b + 9000)]
        launches += [(b + 50, 1), (b + 2000, 9)]
    t = _synthetic(tmp_path, (ranges, launches))
    try:
        it = iterations(t)
    finally:
        t.close()
    assert (it["range"], it["count"], it["gpu_share_pct"]) == ("model", 4, 90.0)
    assert [x["gpu_ns"] for x in it["items"]] == [900] * 4 and it["spread_pct"] == 0.0


def test_outermost_and_library_ranges(tmp_path):
    # 'epoch' (2x) holds the 'iteration' ranges, so only epoch is outermost, and 2 is too few; the
    # ncclAllReduce ranges hold GPU work but are a library's. No step: the reason says so.
    ranges, launches = [], []
    for e in range(2):
        b = e * 100_000
        ranges.append(("epoch", b, b + 90_000))
        for i in range(5):
            s = b + i * 10_000
            ranges += [(f"iteration {e * 5 + i}", s, s + 9000), ("ncclAllReduce", s + 100, s + 200)]
            launches += [(s + 150, 3), (s + 500, 1)]
    t = _synthetic(tmp_path, (ranges, launches))
    try:
        it = iterations(t)
    finally:
        t.close()
    assert it["range"] is None and "outermost" in it["reason"] and "'ncclAllReduce'" in it["reason"]
