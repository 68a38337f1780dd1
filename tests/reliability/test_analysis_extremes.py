"""Analysis at the edges of its input: real exports moved onto absolute clocks near
2^62 ns, 64 ranks on one wall clock, windows spanning 2^62 ns, and an export missing a refining column. Each
ends with an answer (never a rule in ``error``), the same answer as the unmoved trace where times moved."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.api import analyze, ingest
from analysis.model.trace import Trace
from analysis.views import chrome_trace, timeline
from tests.analysis.planting import copy_export, ingested, kernel, normalized
from tests.analysis.shifting import ABSOLUTE_CLOCK, NEAR_2_62, everything, shifted_copy, unshift
from tests.analysis.test_degraded_ingest import rebuild_without
from tests.analysis.timeline_wire import box_records
from tests.conftest import corpus_file

RUNS = {
    "nccl-ring-pair": ["nccl-ring-2node-r0-ault43.sqlite", "nccl-ring-2node-r1-ault44.sqlite"],
    "torchrun-two-ranks-one-file": ["torchrun-2gpu-nccl-sendrecv-before-cropped.sqlite"],
    "cloverleaf-device-syncs": ["cloverleaf-devsync.sqlite"],
}


@pytest.mark.parametrize("names", list(RUNS.values()), ids=list(RUNS))
def test_real_exports_moved_near_2_62_give_the_same_answers(tmp_path: Path, names: list[str]) -> None:
    paths = [ingested(corpus_file(n)) for n in names]
    shift, session_shift = NEAR_2_62 - 987_654_321, NEAR_2_62 - ABSOLUTE_CLOCK
    moved = [shifted_copy(p, tmp_path / f"{i}.duckdb", shift, session_shift) for i, p in enumerate(paths)]
    before, after = everything(paths, names), everything(moved, names)
    assert all(r["status"] != "error" for r in after["analysis"]["rules"])
    assert after["analysis"]["findings"], "the exports have findings to compare"
    assert unshift(after, shift, session_shift) == before


def test_64_ranks_in_one_report_on_the_wall_clock(tmp_path: Path) -> None:
    rows = []
    for r in range(64):
        for k in range(3):
            t = ABSOLUTE_CLOCK + 1_000_000 * (k + 1) + (500_000 if r == 17 else 0)
            rows.append(kernel(t, t + 30_000, pid=1000 + r, device=r % 8, name="ncclDevKernel_AllGather",
                               category="nccl"))
    path = normalized(tmp_path / "all.duckdb", {"session_start_utc_ns": ABSOLUTE_CLOCK}, kernels=rows)
    # The whole report: the steady window of one unit's loop would leave the late rank's last collective out.
    result = analyze([path], rules=["COMM"], window="all").to_json()
    statuses = {r["id"]: r["status"] for r in result["rules"]}
    assert statuses == {"COMM001": "ok", "COMM002": "ok", "COMM003": "ok", "COMM004": "ok", "COMM005": "ok"}
    # No NCCL message sizes in these rows: COMM003 lists the collectives by kernel, every process's share.
    (by_kernel,) = [f for f in result["findings"] if f["rule_id"] == "COMM003"]
    assert by_kernel["impact_ns"] == 0 and by_kernel["severity"] == "info" and by_kernel["sizes"] == "by kernel"
    (group,) = by_kernel["groups"]
    assert (group["op"], group["count"], group["time_ns"]) == ("AllGather", 64 * 3, 64 * 3 * 30_000)
    # 64 processes, 16 listed (a finding per rank each listing every rank would grow as ranks squared)
    assert group["ranks_total"] == 64 and len(group["ranks"]) == 16
    assert {(e["pid"], e["device"], e["count"], e["time_ns"]) for e in group["ranks"]} <= {
        (1000 + r, r % 8, 3, 90_000) for r in range(64)}
    (straggler,) = [f for f in result["findings"] if f["rule_id"] == "COMM002"]
    assert straggler["impact_ns"] == 3 * 500_000 and len(straggler["participants"]) == 64
    assert straggler["wait_imposed_ns"] == 3 * 63 * 500_000


def test_timeline_and_chrome_trace_over_a_window_spanning_2_62(tmp_path: Path) -> None:
    start = NEAR_2_62 - 50_000
    path = normalized(tmp_path / "wide.duckdb",
                      kernels=[kernel(start, start + 10_000), kernel(start + 20_000, NEAR_2_62)], nvtx=[{"pid": 1, "tid": 1, "start_ns": -10**10, "end_ns": -10**10 + 5, "text": "early",
                             "kind": "push_pop", "nesting": 0}])
    t = Trace(path, "wide")
    try:
        win = timeline.window(t, buckets=4000)
        assert win["extent"] == [-10**10, NEAR_2_62] and win["activities"] == 3
        boxes = {lane["kind"]: box_records(lane["boxes"]) for lane in win["lanes"]}
        # 2^62 ns in 4,000 slices: both kernels start in the last slice and merge into one box.
        assert boxes["gpu"] == [{"start_ns": start, "end_ns": NEAR_2_62, "count": 2, "busy_ns": 40_000,
                                 "category": "compute", "name": "k"}]
        assert [(b["start_ns"], b["end_ns"], b["count"], b["busy_ns"]) for b in boxes["nvtx"]] == \
            [(-10**10, -10**10 + 5, 1, 5)]
        assert len([e for e in chrome_trace.to_dict(t)["traceEvents"] if e["ph"] == "X"]) == 3
    finally:
        t.close()


def test_export_without_a_refining_column_on_an_absolute_clock(tmp_path: Path) -> None:
    """The time-normalized nccl-ring export (absolute UTC ns) without its kernels' globalPid: read, degraded."""
    src = copy_export(corpus_file("nccl-ring-2node-r0-ault43.sqlite"), tmp_path / "r0.sqlite")
    rebuild_without(src, "CUPTI_ACTIVITY_KIND_KERNEL", "globalPid")
    out = tmp_path / "r0.duckdb"
    ingest(src, out)
    result = analyze([out]).to_json()
    assert [d["columns"] for d in result["reports"][0]["degraded"]] == [["globalPid"]]
    assert all(r["status"] != "error" for r in result["rules"])
