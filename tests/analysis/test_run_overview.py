"""The timeline overview (issue #12) against the exact window on real corpus exports: the same lanes, every
activity counted once with the same busy time, first start and last end; boxes at most one fine bin away
from where the exact window puts them; fine windows never use it."""

from __future__ import annotations

import pytest

from analysis import run_overview, run_timeline
from analysis.api import ingest
from analysis.run_timeline import Part
from analysis.timeline import extent
from analysis.trace import Trace
from tests.conftest import corpus_file

SOURCES = ["nccl-ring-2node-r0-ault43.sqlite", "nccl-ring-2node-r1-ault44.sqlite"]


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    root = tmp_path_factory.mktemp("overview")
    out = []
    for i, name in enumerate(SOURCES):
        path = root / f"r{i}.duckdb"
        ingest(corpus_file(name), path)
        out.append(Part(Trace(path, name), i + 1, i, f"host{i}"))
    yield out
    for p in out:
        p.trace.close()


def _with_overviews(parts: list[Part]) -> list[Part]:
    built = []
    for p in parts:
        ov = run_overview.build(p.trace, extent(p.trace), run_overview.overview_path(p.trace.path))
        built.append(Part(p.trace, p.report_id, p.rank, p.host, ov))
    return built


def _lanes(win) -> dict[str, list]:
    return {lane["id"]: lane["boxes"] for g in win["groups"] for lane in g["lanes"]}


@pytest.mark.parametrize("buckets", [300, 1400])
def test_overview_windows_keep_every_activity_and_its_place(parts, buckets) -> None:
    fast = _with_overviews(parts)
    exact, over = run_timeline.window(parts, buckets=buckets), run_timeline.window(fast, buckets=buckets)
    assert exact["activities"] == over["activities"] > 1000 and exact["extent"] == over["extent"]
    ex, ov = _lanes(exact), _lanes(over)
    assert ex.keys() == ov.keys()
    span = exact["end_ns"] - exact["start_ns"]
    fine = max(e[1] - e[0] for e in map(extent, (p.trace for p in parts))) / run_overview.OV_BINS
    for lane_id, boxes in ex.items():
        got = ov[lane_id]
        for cat in {b[4] for b in boxes} | {b[4] for b in got}:
            a, b = [x for x in boxes if x[4] == cat], [x for x in got if x[4] == cat]
            assert sum(x[2] for x in a) == sum(x[2] for x in b), (lane_id, cat)          # counts
            assert sum(x[3] for x in a) == sum(x[3] for x in b), (lane_id, cat)          # busy ns
            assert min(x[0] for x in a) == min(x[0] for x in b) and max(x[1] for x in a) == max(x[1] for x in b)
            # every overview box starts within one fine bin of an exact box's start
            starts = sorted(x[0] for x in a)
            for box in b:
                assert min(abs(box[0] - s) for s in starts) <= fine + span / buckets, (lane_id, box)
        if lane_id.split(":")[2] == "nvtx":
            assert {x[6] for x in boxes} == {x[6] for x in got}                            # depths


def test_fine_windows_read_the_report_itself(parts) -> None:
    fast = _with_overviews(parts)
    whole = run_timeline.window(parts, buckets=300)
    mid = (whole["extent"][0] + whole["extent"][1]) // 2
    span = (whole["extent"][1] - whole["extent"][0]) // 50     # 6 fine bins per report over 300 columns: too few
    a = run_timeline.window(parts, mid, mid + span, 300)
    b = run_timeline.window(fast, mid, mid + span, 300)
    assert a == b
    e = extent(parts[0].trace)
    assert run_overview.usable(e, e[0], e[1], 1400) and not run_overview.usable(e, e[0], e[0] + (e[1] - e[0]) // 50, 300)
