"""The timeline overview against the exact window on real corpus exports: the same lanes, every
activity counted once with the same busy time, first start and last end; boxes at most one fine bin away
from where the exact window puts them; fine windows never use it."""

from __future__ import annotations

import pytest

from analysis.api import ingest
from analysis.model.trace import Trace
from analysis.views import run_overview, run_timeline
from analysis.views.run_timeline import Part
from analysis.views.timeline import extent
from tests.analysis.timeline_wire import box_records
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
    return {lane["id"]: box_records(lane["boxes"]) for g in win["groups"] for lane in g["lanes"]}


# (fraction of the run, columns, level): the whole run on the coarsest level, a 1/20 zoom on finer ones
@pytest.mark.parametrize(("fraction", "buckets", "level"), [(1, 300, 0), (1, 1400, 0), (20, 1400, 2), (20, 300, 1),
                                                                       (80, 1400, 3)])
def test_overview_windows_keep_every_activity_and_its_place(parts, fraction, buckets, level) -> None:
    fast = _with_overviews(parts)
    whole = run_timeline.window(parts, buckets=buckets)
    lo, hi = whole["extent"]
    busiest = max((b for boxes in _lanes(whole).values() for b in boxes), key=lambda b: b["count"])
    w0 = max(lo, busiest["start_ns"] - (hi - lo) // (2 * fraction)) if fraction > 1 else lo
    w1 = w0 + (hi - lo) // fraction
    assert run_overview.level_for(extent(parts[0].trace), w0, w1, buckets) == level
    exact, over = run_timeline.window(parts, w0, w1, buckets), run_timeline.window(fast, w0, w1, buckets)
    assert exact["extent"] == over["extent"] and exact["activities"] > 100
    ex, ov = _lanes(exact), _lanes(over)
    assert ex.keys() == ov.keys()
    bin_ns = max(e[1] - e[0] for e in map(extent, (p.trace for p in parts))) / run_overview.LEVELS[level]
    for lane_id, boxes in ex.items():
        got = ov[lane_id]
        for cat in {b["category"] for b in boxes} | {b["category"] for b in got}:
            a, b = [x for x in boxes if x["category"] == cat], [x for x in got if x["category"] == cat]
            if fraction == 1:   # the whole run: every activity counted once, same busy time, first start, last end
                assert sum(x["count"] for x in a) == sum(x["count"] for x in b), (lane_id, cat)
                assert sum(x["busy_ns"] for x in a) == sum(x["busy_ns"] for x in b), (lane_id, cat)
                assert min(x["start_ns"] for x in a) == min(x["start_ns"] for x in b) and max(x["end_ns"] for x in a) == max(x["end_ns"] for x in b)
            else:               # a window: only the activities in the fine bins at its two edges may differ
                assert abs(sum(x["count"] for x in a) - sum(x["count"] for x in b)) <= 0.05 * sum(x["count"] for x in a) + 2
            # every overview box starts within one bin (plus a column) of an exact box's start
            starts = sorted(x["start_ns"] for x in a)
            for box in b:
                assert not starts or min(abs(box["start_ns"] - s) for s in starts) <= bin_ns + (w1 - w0) / buckets, box
        if lane_id.split(":")[2] == "nvtx" and fraction == 1:
            assert {x["depth"] for x in boxes} == {x["depth"] for x in got}  # depths


def test_fine_windows_read_the_report_itself(parts) -> None:
    fast = _with_overviews(parts)
    whole = run_timeline.window(parts, buckets=300)
    mid = (whole["extent"][0] + whole["extent"][1]) // 2
    span = (whole["extent"][1] - whole["extent"][0]) // 1000   # well under 4 fine bins per column
    assert run_timeline.window(parts, mid, mid + span, 300) == run_timeline.window(fast, mid, mid + span, 300)
    e = extent(parts[0].trace)
    assert run_overview.level_for(e, e[0], e[0] + (e[1] - e[0]) // 1000, 300) is None


def test_a_new_layout_replaces_the_older_file(parts, tmp_path) -> None:
    import shutil

    trace = parts[0].trace
    folder = tmp_path / "r"
    folder.mkdir()
    path = folder / "trace.duckdb"
    old = folder / f"trace.overview-v{run_overview.VERSION - 1}.parquet"
    old.write_bytes(b"older layout")
    other = folder / "other.overview-v1.parquet"   # another report's file is left alone
    shutil.copyfile(old, other)
    out = run_overview.build(trace, extent(trace), run_overview.overview_path(path))
    assert out.is_file() and not old.exists() and other.exists()
