"""The time breakdown: an exact partition of each device's span, checked on tiny reports and every corpus file."""

from __future__ import annotations

import pytest

from analysis.diagnosis.breakdown import PARTS, breakdown
from analysis.model.trace import Trace
from tests.analysis.planting import ingested, kernel, normalized
from tests.conftest import NSYS_FILES

IDS = [p.name.split("__")[-1] for p in NSYS_FILES]


def _bd(path):
    t = Trace(path, path.name)
    try:
        return breakdown(t)
    finally:
        t.close()


def test_partition_of_overlapping_streams_and_categories(tmp_path):
    ks = [kernel(0, 100), kernel(50, 150, stream=8),               # compute on two streams: 0-150
          kernel(120, 200, category="nccl", name="nccl_a"),          # 120-150 overlapped, 150-200 exposed
          kernel(400, 500, category="nccl", name="nccl_b", stream=9),
          kernel(450, 480, stream=9, category="nccl", name="nccl_c")]  # nested: never counted twice
    copies = [{"pid": 1, "device": 0, "stream": 3, "start_ns": 190, "end_ns": 300, "copy_kind": "HtoD"}]
    sets = [{"pid": 1, "device": 0, "stream": 3, "start_ns": 600, "end_ns": 610}]
    other = [kernel(0, 1000, pid=2, device=0)]  # another process's device 0 is its own unit
    bd = _bd(normalized(tmp_path / "r.duckdb", kernels=ks + other, memcpy=copies, memset=sets))
    unit = next(u for u in bd.devices if u.pid == 1)
    assert unit.compute_ns == 150
    assert unit.comm_overlapped_ns == 30
    assert unit.comm_exposed_ns == 50 + 100
    assert unit.memory_only_ns == (300 - 200) + 10
    assert unit.idle_ns == (400 - 300) + (600 - 500)
    assert unit.span_ns == 610
    assert bd.span_ns == 610 + 1000 and bd.compute_ns == 150 + 1000
    assert bd.goodput_pct == pytest.approx(100 * 1150 / 1610, abs=1e-3)


def test_no_gpu_work_gives_zeros(tmp_path):
    bd = _bd(normalized(tmp_path / "r.duckdb"))
    assert bd.span_ns == 0 and bd.devices == () and bd.goodput_pct == 0.0


@pytest.mark.parametrize("src", NSYS_FILES, ids=IDS)
def test_parts_sum_to_span_on_corpus(src):
    path = ingested(src)
    bd = _bd(path)
    for part in [bd, *bd.devices]:
        assert sum(getattr(part, k) for k in PARTS) == part.span_ns
        assert all(getattr(part, k) >= 0 for k in (*PARTS, "comm_overlapped_ns"))
        assert part.comm_overlapped_ns <= part.compute_ns
    t = Trace(path, src.name)
    try:
        spans = dict(((r[0], r[1]), r[2]) for r in t.sql("""
            SELECT pid, device, MAX(end_ns) - MIN(start_ns) FROM (
                SELECT pid, device, start_ns, end_ns FROM kernels UNION ALL
                SELECT pid, device, start_ns, end_ns FROM memcpy UNION ALL
                SELECT pid, device, start_ns, end_ns FROM memset) GROUP BY ALL"""))
        kernel_union = t.scalar("SELECT COUNT(*) FROM kernels")
    finally:
        t.close()
    assert {(u.pid, u.device): u.span_ns for u in bd.devices} == spans
    if kernel_union:
        assert bd.compute_ns + bd.comm_exposed_ns > 0
