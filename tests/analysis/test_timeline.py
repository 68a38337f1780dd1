"""The downsampled timeline window and the Chrome trace export, on reports built from the normalized schema."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from analysis.model.trace import Trace
from analysis.readers.schema import NSYS_TABLES
from analysis.views import chrome_trace, timeline
from tests.analysis.timeline_wire import box_records

XSS = '<script>alert(1)</script>"><img src=x onerror=alert(1)>'


def build_report(path: Path, kernels: list[tuple], nvtx: list[tuple] = (), memcpy: list[tuple] = ()) -> Trace:
    """A normalized report with the given rows (device, stream, start, end, name, category) etc."""
    con = duckdb.connect(str(path))
    for name, cols in NSYS_TABLES.items():
        # not schema.ddl(): its output puts ")" after a trailing `-- comment` (reported to the lead)
        con.execute(f"CREATE TABLE {name} ({cols.strip()}\n)")
    con.execute("INSERT INTO meta VALUES ('tool', 'nsys')")
    for dev, stream, s, e, name, cat in kernels:
        con.execute(
            "INSERT INTO kernels (device, stream, pid, start_ns, end_ns, name, short_name, category, correlation_id)"
            " VALUES (?, ?, 100, ?, ?, ?, ?, ?, 1)", [dev, stream, s, e, name, name.split("<")[0], cat])
    for pid, tid, s, e, text, nesting in nvtx:
        con.execute("INSERT INTO nvtx (pid, tid, start_ns, end_ns, text, kind, nesting) VALUES (?,?,?,?,?,'push_pop',?)",
                    [pid, tid, s, e, text, nesting])
    for dev, stream, s, e, kind, nbytes in memcpy:
        con.execute("INSERT INTO memcpy (device, stream, start_ns, end_ns, copy_kind, bytes) VALUES (?,?,?,?,?,?)",
                    [dev, stream, s, e, kind, nbytes])
    con.execute("INSERT INTO threads VALUES (100, 101, 'main')")
    con.close()
    return Trace(path, path.name)


@pytest.fixture
def dense(tmp_path: Path) -> Trace:
    # 20,000 back-to-back 100 ns kernels on stream 7 of GPU 0, a few long ones on GPU 1.
    kernels = [(1, 3, 1_000_000, 2_000_000, "ncclKernel_AllReduce", "nccl")]
    nvtx = [(100, 101, 0, 3_000_000, "step", 0), (100, 101, 10, 1_500_000, "forward", 1)]
    memcpy = [(0, 8, 500, 900, "HtoD", 4096)]
    trace = build_report(tmp_path / "dense.duckdb", kernels, nvtx, memcpy)
    with duckdb.connect(str(trace.path)) as con:
        con.execute(
            "INSERT INTO kernels (device, stream, pid, start_ns, end_ns, name, short_name, category)"
            " SELECT 0, 7, 100, i * 150, i * 150 + 100, 'k' || (i % 3) || '<float>', 'k' || (i % 3), 'compute'"
            " FROM range(20000) t(i)")
    yield trace
    trace.close()


def test_window_is_bounded_and_counts_every_activity(dense: Trace) -> None:
    win = timeline.window(dense, buckets=200)
    lanes = {lane["id"]: lane for lane in win["lanes"]}
    boxes = {lane_id: box_records(lane["boxes"]) for lane_id, lane in lanes.items()}
    assert set(lanes) == {"gpu:0:7", "gpu:0:8", "gpu:1:3", "nvtx:100:101"}
    # at most one box per slice and category in a lane
    assert len(boxes["gpu:0:7"]) <= 200
    # merged boxes still account for every kernel and its exact busy time
    direct = dense.sql("SELECT count(*), sum(end_ns - start_ns) FROM kernels WHERE device = 0")[0]
    assert sum(b["count"] for b in boxes["gpu:0:7"]) == direct[0]
    assert sum(b["busy_ns"] for b in boxes["gpu:0:7"]) == direct[1]
    assert win["extent"] == [0, 3_000_000]
    assert boxes["gpu:1:3"] == [{"start_ns": 1_000_000, "end_ns": 2_000_000, "count": 1, "busy_ns": 1_000_000,
                                 "category": "nccl", "name": "ncclKernel_AllReduce"}]
    assert (boxes["gpu:0:8"][0]["category"], boxes["gpu:0:8"][0]["name"]) == ("memcpy", "Memcpy HtoD")
    assert lanes["nvtx:100:101"]["depth"] == 2
    assert {b["depth"] for b in boxes["nvtx:100:101"]} == {0, 1}
    assert "main" in lanes["nvtx:100:101"]["label"]


def test_zooming_in_returns_individual_activities(dense: Trace) -> None:
    win = timeline.window(dense, 0, 1499, buckets=1000)
    boxes = box_records(next(lane for lane in win["lanes"] if lane["id"] == "gpu:0:7")["boxes"])
    # 10 kernels start in [0, 1499]; at 1.5 ns per slice none is merged
    assert [b["count"] for b in boxes] == [1] * 10
    assert (boxes[0]["start_ns"], boxes[0]["end_ns"]) == (0, 100)
    assert boxes[1]["name"] == "k1<float>"
    # the long nccl kernel is outside this window
    assert not any(lane["id"] == "gpu:1:3" for lane in win["lanes"])


def test_window_clamps_to_the_report_and_bucket_limits(dense: Trace) -> None:
    win = timeline.window(dense, -50, 10**15, buckets=10**9)
    assert (win["start_ns"], win["end_ns"], win["buckets"]) == (0, 3_000_000, timeline.MAX_BUCKETS)


def test_empty_report(tmp_path: Path) -> None:
    trace = build_report(tmp_path / "empty.duckdb", [])
    try:
        assert timeline.window(trace)["lanes"] == []
        assert chrome_trace.to_dict(trace)["traceEvents"] == [] or all(
            e["ph"] == "M" for e in chrome_trace.to_dict(trace)["traceEvents"])
    finally:
        trace.close()


def test_kernel_instances(dense: Trace) -> None:
    found = timeline.kernel_instances(dense, "k1", limit=2)   # short name
    assert found["count"] == dense.scalar("SELECT count(*) FROM kernels WHERE short_name = 'k1'")
    assert found["first"][0]["start_ns"] == 150
    assert timeline.kernel_instances(dense, "nope")["count"] == 0


def test_chrome_trace_window_and_escaping(tmp_path: Path) -> None:
    trace = build_report(tmp_path / "xss.duckdb", [(0, 1, 1000, 3000, XSS, "compute"), (0, 1, 9000, 9500, "b", "compute")],
                         nvtx=[(100, 101, 500, 4000, XSS, 0)])
    try:
        text = "".join(chrome_trace.stream_json(trace))
        doc = json.loads(text)
        xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
        assert {e["name"] for e in xs} == {XSS, "b"}
        kernel = next(e for e in xs if e["cat"] == "compute" and e["name"] == XSS)
        assert (kernel["ts"], kernel["dur"], kernel["pid"], kernel["tid"]) == (1.0, 2.0, chrome_trace.GPU_PID_BASE, 1)
        names = {(e["name"], e["args"]["name"]) for e in doc["traceEvents"] if e["ph"] == "M"}
        assert ("process_name", "GPU 0") in names and ("thread_name", "main") in names
        windowed = chrome_trace.to_dict(trace, 5000, 10000)
        assert [e["name"] for e in windowed["traceEvents"] if e["ph"] == "X"] == ["b"]
        capped = chrome_trace.to_dict(trace, max_events=1)
        assert capped["otherData"]["truncated"] is True
        assert len([e for e in capped["traceEvents"] if e["ph"] == "X"]) == 1
    finally:
        trace.close()


@pytest.fixture(scope="module")
def corpus_trace(tmp_path_factory):
    from analysis.api import ingest
    from tests.conftest import corpus_file

    out = tmp_path_factory.mktemp("tl") / "torchrun.duckdb"
    ingest(corpus_file("torchrun-2gpu-nccl-sendrecv-before-cropped.sqlite"), out)
    trace = Trace(out, out.name)
    yield trace
    trace.close()


def test_corpus_report_window_accounts_for_every_row(corpus_trace: Trace) -> None:
    win = timeline.window(corpus_trace, buckets=300)
    per_device = {}
    boxes = {lane["id"]: box_records(lane["boxes"]) for lane in win["lanes"]}
    for lane in win["lanes"]:
        assert len(boxes[lane["id"]]) <= 300 * (4 if lane["kind"] == "gpu" else timeline.MAX_NVTX_DEPTH + 1)
        if lane["kind"] == "gpu":
            per_device[lane["device"]] = per_device.get(lane["device"], 0) + sum(b["count"] for b in boxes[lane["id"]])
    direct = dict(corpus_trace.sql("""SELECT device, count(*) FROM (
        SELECT device FROM kernels UNION ALL SELECT device FROM memcpy UNION ALL SELECT device FROM memset)
        GROUP BY device"""))
    assert per_device == direct and len(direct) == 2
    nvtx = sum(b["count"] for lane in win["lanes"] if lane["kind"] == "nvtx" for b in boxes[lane["id"]])
    assert nvtx == corpus_trace.scalar("SELECT count(*) FROM nvtx WHERE end_ns IS NOT NULL")
    assert {b["category"] for bs in boxes.values() for b in bs} >= {"compute", "nccl", "nvtx"}
    assert win["boxes"] == sum(len(bs) for bs in boxes.values())
    assert win["activities"] == sum(b["count"] for bs in boxes.values() for b in bs)


def test_corpus_chrome_trace_has_every_kernel(corpus_trace: Trace) -> None:
    doc = chrome_trace.to_dict(corpus_trace)
    kernels = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] in ("compute", "nccl")]
    assert len(kernels) == corpus_trace.scalar("SELECT count(*) FROM kernels")
    first = corpus_trace.sql("SELECT start_ns, end_ns FROM kernels ORDER BY start_ns LIMIT 1")[0]
    assert min(e["ts"] for e in kernels) == first[0] / 1000.0
