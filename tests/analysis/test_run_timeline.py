"""The run-wide timeline on reports built from the normalized schema: alignment on the session clock, stable
lanes, launch flows, collectives matched by name and occurrence, the merged Chrome trace, readable names."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

from analysis.model.kernel_names import short_kernel_name
from analysis.model.trace import Trace
from analysis.readers.schema import NSYS_TABLES
from analysis.views import run_select, run_timeline, run_trace
from analysis.views.run_timeline import Part
from tests.analysis.timeline_wire import box_records

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm *, unsigned long, ncclWork *)"


def build(path: Path, session_start: int | None, rank: int, kernels: list[tuple]) -> Part:
    """A report whose kernels are (start, end, name, category, correlation id), launched by pid 7 tid 8."""
    con = duckdb.connect(str(path))
    for name, cols in NSYS_TABLES.items():
        con.execute(f"CREATE TABLE {name} ({cols.strip()}\n)")
    con.execute("INSERT INTO meta VALUES ('tool', 'nsys'), ('rank', ?)", [str(rank)])
    if session_start is not None:
        con.execute("INSERT INTO meta VALUES ('session_start_utc_ns', ?)", [str(session_start)])
    for s, e, name, cat, corr in kernels:
        con.execute("INSERT INTO kernels (device, stream, pid, tid, start_ns, end_ns, name, category, correlation_id)"
                    " VALUES (0, 7, 7, 8, ?, ?, ?, ?, ?)", [s, e, name, cat, corr])
        con.execute("INSERT INTO cuda_api (pid, tid, start_ns, end_ns, name, correlation_id) VALUES (7, 8, ?, ?, "
                    "'cudaLaunchKernel', ?)", [s - 500, s - 400, corr])
    con.close()
    return Part(Trace(path, path.name), rank + 10, rank, f"node{rank}.example.org")


def _two_ranks(tmp_path: Path) -> list[Part]:
    # rank 1's session starts 1 ms later; on the run clock its all-reduces start at 1.004 ms and 1.32 ms
    r0 = build(tmp_path / "r0.duckdb", 10**18, 0, [(1_000, 2_000, "gemm<float>", "compute", 1),
                                                   (5_000, 9_000, NCCL, "nccl", 2),
                                                   (20_000, 30_000, NCCL, "nccl", 3)])
    r1 = build(tmp_path / "r1.duckdb", 10**18 + 1_000_000, 1, [(4_000, 9_000, NCCL, "nccl", 5),
                                                               (320_000, 330_000, NCCL, "nccl", 6)])
    return [r0, r1]


def test_window_aligns_reports_on_the_session_clock_with_stable_lanes(tmp_path) -> None:
    parts = _two_ranks(tmp_path)
    win = run_timeline.window(parts, buckets=100)
    assert win["aligned"] and [g["label"] for g in win["groups"]] == ["rank 0 · node0 · GPU 0", "rank 1 · node1 · GPU 0"]
    assert [g["offset_ns"] for g in win["groups"]] == [0, 1_000_000]
    gpu1 = next(lane for lane in win["groups"][1]["lanes"] if lane["kind"] == "gpu")
    assert gpu1["boxes"]["fields"] == ["start_ns", "end_ns", "count", "busy_ns", "category", "name"]
    assert min(b["start_ns"] for b in box_records(gpu1["boxes"])) == 1_004_000  # 4 µs after its own start, 1 ms later
    assert [lane["kind"] for lane in win["groups"][0]["lanes"]] == ["gpu", "api"]
    narrow = run_timeline.window(parts, 1_000, 2_000, buckets=100)
    assert [[lane["id"] for lane in g["lanes"]] for g in narrow["groups"]] == \
        [[lane["id"] for lane in g["lanes"]] for g in win["groups"]]
    assert narrow["activities"] == 1                           # the gemm (its launch ran before the window)
    missing = build(tmp_path / "x.duckdb", None, 2, [(0, 10, "k", "compute", 1)])
    assert run_timeline.window([*parts, missing], buckets=50)["aligned"] is False


def test_select_finds_the_launch_and_the_collective_on_every_rank(tmp_path) -> None:
    parts = _two_ranks(tmp_path)
    sel = run_select.select(parts, 10, 7, 0, 7, 25_000)
    assert sel["kernel"]["name"] == NCCL and sel["kernel"]["start_ns"] == 20_000
    assert sel["launch"] == {"start_ns": 19_500, "end_ns": 19_600, "name": "cudaLaunchKernel", "tid": 8,
                             "lane_id": "10:7:api:8"}
    coll = sel["collective"]
    assert coll["occurrence"] == 1                                # the second all-reduce of rank 0
    starts = {i["rank"]: i["start_ns"] for i in coll["instances"]}
    assert starts == {0: 20_000, 1: 1_000_000 + 320_000}          # rank 1's second one, on the run clock
    assert coll["skew_ns"] == 1_300_000 and coll["last"]["rank"] == 1
    assert run_select.select(parts, 10, 7, 0, 7, 15_000)["kernel"] is None


def test_merged_chrome_trace_one_process_per_rank_with_launch_flows(tmp_path) -> None:
    parts = _two_ranks(tmp_path)
    doc = json.loads("".join(run_trace.stream_run_json(parts)))
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    assert sorted(names.values()) == ["rank 0 (node0)", "rank 1 (node1)"]
    kernels = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] in ("nccl", "compute")]
    assert len(kernels) == 5
    assert min(e["ts"] for e in kernels if names[e["pid"]].startswith("rank 1")) == 1_004.0   # µs, run clock
    flows = [e for e in doc["traceEvents"] if e["ph"] in ("s", "f")]
    assert sorted(e["ph"] for e in flows) == ["f"] * 5 + ["s"] * 5
    assert {e["id"] for e in flows if e["ph"] == "s"} == {e["id"] for e in flows if e["ph"] == "f"}
    small = json.loads("".join(run_trace.stream_run_json(parts, max_events=2)))
    assert small["otherData"]["truncated"] and small["otherData"]["processes"] == 1   # only processes with events


def test_short_kernel_names() -> None:
    assert short_kernel_name("void at::native::vectorized_elementwise_kernel<4, at::native::Add<float>, "
                             "std::array<char*, 3ul> >(int, at::native::Add<float>, std::array<char*, 3ul>)") \
        == "at::native::vectorized_elementwise_kernel<…>"
    assert short_kernel_name(NCCL) == "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    assert short_kernel_name("copy_blocked[v1,abc](Array<long long, 1>)") == "copy_blocked[…]"
    assert short_kernel_name("x" * 200, 20) == "x" * 19 + "…"
