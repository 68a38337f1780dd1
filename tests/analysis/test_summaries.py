"""NVTX projection and iterations, checked against direct queries on real exports."""

from __future__ import annotations

import statistics

import pytest

from analysis.api import analyze
from analysis.loops.iterations import iterations
from analysis.model.nvtx_projection import nvtx_projection
from analysis.model.trace import Trace
from analysis.result_parts import NvtxRange
from tests.analysis.planting import api, ingested, kernel, normalized
from tests.conftest import corpus_file


@pytest.fixture
def trace_of():
    opened = []

    def open_(short):
        t = Trace(ingested(corpus_file(short)), short)
        opened.append(t)
        return t

    yield open_
    for t in opened:
        t.close()


def test_nvtx_projection_on_a_synthetic_thread(tmp_path):
    ks = [kernel(100, 200, corr=1, tid=5), kernel(300, 450, corr=2, tid=5), kernel(900, 950, corr=3, tid=6)]
    calls = [api(10, 20, "cudaLaunchKernel", corr=1, tid=5), api(30, 40, "cudaLaunchKernel", corr=2, tid=5),
             api(50, 60, "cudaLaunchKernel", corr=3, tid=6)]  # inside the range's time, other thread
    ranges = [{"pid": 1, "tid": 5, "start_ns": 0, "end_ns": 45, "text": "step", "kind": "push_pop", "nesting": 0}]
    t = Trace(normalized(tmp_path / "r.duckdb", kernels=ks, cuda_api=calls, nvtx=ranges), "r")
    try:
        proj = nvtx_projection(t)
    finally:
        t.close()
    assert proj.top_ranges == (NvtxRange(domain=None, text="step", count=1, cpu_total_ns=45, gpu_ops=2,
                                         gpu_projected_ns=350, gpu_op_ns=250),)


def test_nvtx_projection_on_real_export(trace_of):
    t = trace_of("cupy-power-iteration.sqlite")
    proj = nvtx_projection(t, limit=None)
    assert proj.has_nvtx
    loop = next(r for r in proj.top_ranges if r.text == "Loop")
    direct = t.sql("""
        SELECT MAX(g.end_ns) - MIN(g.start_ns), COUNT(*) FROM nvtx n
        JOIN cuda_api a ON a.pid = n.pid AND a.tid = n.tid AND a.start_ns BETWEEN n.start_ns AND n.end_ns
        JOIN (SELECT pid, correlation_id, start_ns, end_ns FROM kernels UNION ALL
              SELECT pid, correlation_id, start_ns, end_ns FROM memcpy UNION ALL
              SELECT pid, correlation_id, start_ns, end_ns FROM memset) g
          ON g.pid = a.pid AND g.correlation_id = a.correlation_id
        WHERE n.text = 'Loop'""")[0]
    assert (loop.gpu_projected_ns, loop.gpu_ops) == (direct[0], direct[1])


def test_iterations_without_nvtx_say_so(trace_of):
    it = iterations(trace_of("vecadd-2026.sqlite"))
    assert it["has_nvtx"] is False and it["range"] is None and "NVTX" in it["reason"]


def test_iterations_prefer_a_step_range(tmp_path):
    ks, calls, ranges = [], [], []
    for i in range(4):
        base = i * 1000
        ks.append(kernel(base + 100, base + 100 + 50 * (i + 1), corr=i + 1))
        calls.append(api(base + 10, base + 20, "cudaLaunchKernel", corr=i + 1))
        ranges.append({"pid": 1, "tid": 1, "start_ns": base, "end_ns": base + 900, "text": "train_step",
                       "kind": "push_pop", "nesting": 0})
        ranges.append({"pid": 1, "tid": 1, "start_ns": base + 5, "end_ns": base + 950, "text": "longer_other",
                       "kind": "push_pop", "nesting": 1})
    t = Trace(normalized(tmp_path / "r.duckdb", kernels=ks, cuda_api=calls, nvtx=ranges), "r")
    try:
        it = iterations(t)
    finally:
        t.close()
    assert it["range"] == "train_step" and it["count"] == 4
    gpu = [50, 100, 150, 200]
    assert [x["gpu_ns"] for x in it["items"]] == gpu
    assert it["mean_ns"] == statistics.fmean(gpu) and it["median_ns"] == statistics.median(gpu)
    assert it["cv_pct"] == pytest.approx(100 * statistics.pstdev(gpu) / statistics.fmean(gpu), abs=1e-3)


def test_cli_json_reports_carry_summaries():
    result = analyze([ingested(corpus_file("torchrun-2gpu-nccl-sendrecv-before-cropped.sqlite"))], top=3).to_json()
    rep = result["reports"][0]
    for key in ("compute_ns", "comm_overlapped_ns", "comm_exposed_ns", "memory_only_ns", "idle_ns", "span_ns",
                "goodput_pct"):
        assert key in rep["breakdown"]
    assert len(rep["breakdown"]["devices"]) == 2
    # Its NVTX ranges are all PyTorch op ranges and NCCL calls: NVTX exists, but no step.
    assert rep["nvtx"]["has_nvtx"] and rep["iterations"]["range"] is None
    # ... so the loop comes from the repeating GPU work, and the NVTX verdict is kept beside it.
    assert rep["iterations"]["source"] == "kernel_pattern" and rep["iterations"]["detail"]["nvtx_reason"]
    assert len(rep["iterations"]["items"]) <= 50  # per-iteration records, bounded in the JSON
    assert len(result["findings"]) == 3


# The projection by definition, as a plain interval join (quadratic, fine for a few hundred rows).
NAIVE_PROJECTION = """
    WITH ops AS (
        SELECT g.pid, g.start_ns, g.end_ns, a.tid, a.start_ns AS api_ns
        FROM (SELECT pid, correlation_id, start_ns, end_ns FROM kernels
              UNION ALL SELECT pid, correlation_id, start_ns, end_ns FROM memcpy) g
        JOIN cuda_api a ON a.pid = g.pid AND a.correlation_id = g.correlation_id)
    SELECT n.pid, n.tid, n.start_ns, n.end_ns, n.text, MIN(ops.start_ns), MAX(ops.end_ns), COUNT(ops.pid),
           COALESCE(SUM(ops.end_ns - ops.start_ns), 0)
    FROM nvtx n LEFT JOIN ops ON ops.pid = n.pid AND ops.tid = n.tid AND ops.api_ns BETWEEN n.start_ns AND n.end_ns
    WHERE n.kind <> 'mark' GROUP BY ALL ORDER BY ALL
"""


def test_projection_equals_the_interval_join_definition(tmp_path):
    import random

    from analysis.model.nvtx_projection import projected_table

    rng = random.Random(7)
    ks, calls, ranges = [], [], []
    corr = 0
    for pid, tid in ((1, 1), (1, 2), (2, 1)):
        t = 0
        for _ in range(150):
            t += rng.choice((0, 5, 40))            # equal launch times happen (0)
            corr += 1
            calls.append(api(t, t + 3, "cudaLaunchKernel", pid=pid, tid=tid, corr=corr))
            for _ in range(rng.choice((1, 1, 3))):  # a graph launch: several operations per call
                s = t + rng.randint(1, 500)         # out of launch order on the GPU, overlapping
                ks.append(kernel(s, s + rng.randint(0, 90), pid=pid, tid=tid, corr=corr))
        for _ in range(120):
            s = rng.randint(-20, t + 20)
            e = s + rng.choice((0, 3, 50, 400, 3000))
            if rng.random() < 0.3 and calls:        # boundaries exactly on a launch
                c = rng.choice([c for c in calls if c["pid"] == pid and c["tid"] == tid])
                s, e = (c["start_ns"], c["start_ns"] + 100) if rng.random() < 0.5 else (c["start_ns"] - 100, c["start_ns"])
            ranges.append({"pid": pid, "tid": tid, "start_ns": s, "end_ns": e, "text": f"r{len(ranges) % 7}",
                           "kind": "push_pop", "nesting": 0})
    ranges.append({"pid": 1, "tid": 9, "start_ns": 0, "end_ns": 10**6, "text": "other thread", "kind": "start_end"})
    t = Trace(normalized(tmp_path / "r.duckdb", kernels=ks, cuda_api=calls, nvtx=ranges), "r")
    try:
        table = projected_table(t)
        got = t.sql(f"SELECT pid, tid, start_ns, end_ns, text, gpu_start, gpu_end, gpu_ops, gpu_op_ns FROM {table} "  # noqa: S608
                    "ORDER BY ALL")
        want = t.sql(NAIVE_PROJECTION)
    finally:
        t.close()
    assert len(got) == len(ranges) and got == want
    assert sum(1 for g in got if g[7] > 1) > 50 and sum(1 for g in got if g[7] == 0) > 10


def _raw_kernel_shares(short: str) -> list[tuple[str, int, int]]:
    """(demangled name, count, total ns) per kernel name of the raw export, costliest first."""
    import sqlite3

    con = sqlite3.connect(f"file:{corpus_file(short)}?mode=ro", uri=True)
    try:
        return con.execute("""SELECT s.value, COUNT(*), SUM(k."end" - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k
                              JOIN StringIds s ON s.id = k.demangledName GROUP BY 1 ORDER BY 3 DESC""").fetchall()
    finally:
        con.close()


def test_dominant_kernel_in_the_report_summary():
    """A30 MIG: its single kernel is all the kernel time; OpenACC V100: main_41_gpu x1000 is too. TensorRT 3090:
    no kernel reaches half (checked on the raw export), so no dominant kernel."""
    from analysis.diagnosis.summary import DOMINANT_PCT, report_info

    for short in ("a30-mig.sqlite", "openacc-v100.sqlite", "tensorrt-3090.sqlite"):
        raw = _raw_kernel_shares(short)
        total = sum(r[2] for r in raw)
        t = Trace(ingested(corpus_file(short)), short)
        try:
            info = report_info(t)
        finally:
            t.close()
        top = info["top_kernels"][0]
        assert (top["name"], top["count"], top["total_ns"]) == raw[0]
        assert top["share_pct"] == pytest.approx(100.0 * raw[0][2] / total, abs=1e-3)
        dom = info["dominant_kernel"]
        if 100.0 * raw[0][2] / total >= DOMINANT_PCT:
            assert dom == {"name": raw[0][0], "count": raw[0][1], "total_ns": raw[0][2],
                           "share_pct": pytest.approx(100.0 * raw[0][2] / total, abs=1e-3)}
        else:
            assert dom is None and short == "tensorrt-3090.sqlite"
