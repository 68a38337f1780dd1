"""`goodput diff` per step and per launch on the two-GPU torchrun export: a crop of the same capture (fewer
steps) changes nothing; one kernel scaled by 1.4 is exactly that kernel, +40 % per launch and significant;
scaled by 1.02 it is not reported; a planted sync is one matched finding with its delta. The per-launch
numbers equal the raw export's (plain sqlite3)."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest

from tests.analysis.planting import copy_export
from tests.analysis.rule_cases import DELTA, sync001_fires
from tests.cli.variants import crop_after, goodput, launch_durations_raw, scale_kernel
from tests.conftest import corpus_file

TORCH = corpus_file("torchrun-2gpu-nccl-sendrecv-before-cropped.sqlite")  # 2 GPUs, a kernel-pattern loop
# The loop finder's steps on the crop: the label counts 17, one more (a partial step at the crop's edge;
# tests/analysis/test_loops_labels.py allows one).
BASE_STEPS = 16
SENDRECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<(unsigned long)4096>)"
CROP_STEPS = 15


def diff_json(*args: str) -> dict:
    proc = goodput("diff", *args, "--format", "json", "--quiet")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def base_analysis():
    proc = goodput("analyze", str(TORCH), "--format", "json", "--quiet")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def cropped(tmp_path_factory, base_analysis):
    """The capture stopped at the start of its 16th step: 15 whole steps are left."""
    (report,) = base_analysis["reports"]
    at = report["iterations"]["anatomy"]["records"][CROP_STEPS]["start_ns"]
    dst = tmp_path_factory.mktemp("crop") / "crop.sqlite"
    assert crop_after(TORCH, dst, at) > 0
    return dst


def _scaled(tmp_path_factory, factor: float):
    dst = tmp_path_factory.mktemp("scaled") / f"scaled-{factor}.sqlite"
    assert scale_kernel(TORCH, dst, SENDRECV, factor) > 0
    return dst


def _row(diff: dict, name: str) -> dict:
    (row,) = [r for r in diff["kernel_table"] if r["name"] == name]
    return row


def test_crop_to_fewer_steps_changes_no_kernel_and_not_the_step_time(cropped, base_analysis):
    diff = diff_json(str(TORCH), str(cropped))
    assert diff["basis"] == "per_step"
    steps = diff["steps"]
    assert (steps["count"]["base"], steps["count"]["head"]) == (BASE_STEPS, CROP_STEPS)
    assert any(f"different numbers of steps ({BASE_STEPS} and {CROP_STEPS})" in n for n in diff["notes"])
    assert diff["kernels"] == []
    assert not any(r["per_launch_ns"]["changed"] for r in diff["kernel_table"])
    for key in ("step_time_ns", "compute_ns", "comm_exposed_ns", "memory_only_ns", "idle_ns"):
        assert steps[key]["changed"] is False, (key, steps[key])
        assert steps[key]["test"] == "mann_whitney"
    # The loop of the crop is found on the other GPU: its steps are measured on the base's GPU.
    assert steps["source"]["head"].endswith("device 1")
    # Totals differ (two steps fewer) and are shown, yet they are not the basis of "changed".
    assert diff["kpis"]["kernel_time_ns"]["delta"] < 0
    # Launches and per-launch medians are the raw export's in each run's window.
    (wb,), (wh,) = diff["windows"]["base"], diff["windows"]["head"]
    row = _row(diff, SENDRECV)
    raw_b, raw_h = launch_durations_raw(TORCH, SENDRECV, *wb), launch_durations_raw(cropped, SENDRECV, *wh)
    assert (row["base_count"], row["head_count"]) == (len(raw_b), len(raw_h))
    assert row["per_launch_ns"]["base"]["median"] == float(np.median(raw_b))
    assert row["per_launch_ns"]["head"]["median"] == float(np.median(raw_h))
    # Launches per step are those inside the steps (the window also holds partial steps: issue #41), so the
    # crop of the same capture has as many per step as the base.
    recs = base_analysis["reports"][0]["iterations"]["anatomy"]["records"]
    con = sqlite3.connect(TORCH)
    inside = sum(con.execute("""SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName
                                WHERE s.value = ? AND k.start >= ? AND k.start < ?""",
                             [SENDRECV, r["start_ns"], r["start_ns"] + r["ns"]]).fetchone()[0] for r in recs)
    con.close()
    assert len(recs) == BASE_STEPS and inside < len(raw_b)
    assert row["launches_per_step"] == {"base": round(inside / BASE_STEPS, 3), "head": round(inside / BASE_STEPS, 3)}


def test_kernel_scaled_by_1_4_is_the_only_one_reported_and_significant(tmp_path_factory):
    dst = _scaled(tmp_path_factory, 1.4)
    diff = diff_json(str(TORCH), str(dst))
    (row,) = diff["kernels"]
    assert row["name"] == SENDRECV and row["status"] == "changed"
    (w,), _ = diff["windows"]["base"], diff["windows"]["head"]
    raw_b, raw_h = launch_durations_raw(TORCH, SENDRECV, *w), launch_durations_raw(dst, SENDRECV, *w)
    stats = row["per_launch_ns"]
    assert stats["base"]["median"] == float(np.median(raw_b)) and stats["head"]["median"] == float(np.median(raw_h))
    assert stats["delta_pct"] == pytest.approx(40.0, abs=0.01)
    assert stats["test"] == "mann_whitney" and stats["significant"] is True and stats["p_value"] < 0.01
    assert (row["base_count"], row["head_count"]) == (len(raw_b), len(raw_h))
    assert row["base_total_ns"] == sum(raw_b) and row["head_total_ns"] == sum(raw_h)
    # The same numbers in the text a person reads.
    text = goodput("diff", str(TORCH), str(dst), "--quiet").stdout
    assert "ncclDevKernel_SendRecv" in text and "+40.0 %" in text


def test_kernel_scaled_by_1_02_is_not_reported(tmp_path_factory):
    dst = _scaled(tmp_path_factory, 1.02)
    diff = diff_json(str(TORCH), str(dst))
    assert diff["kernels"] == []
    stats = _row(diff, SENDRECV)["per_launch_ns"]
    assert stats["delta_pct"] == pytest.approx(2.0, abs=0.01)
    assert stats["changed"] is False and stats["significant"] is False


def test_planted_sync_is_one_matched_finding_with_its_delta(tmp_path, base_analysis):
    dst = copy_export(TORCH, tmp_path / "sync.sqlite")
    sync001_fires(dst, None)
    diff = diff_json(str(TORCH), str(dst), "--window", "all")
    (m,) = [m for m in diff["matched_findings"] if m["rule_id"] == "SYNC001"]
    head = json.loads(goodput("analyze", str(dst), "--format", "json", "--quiet", "--window", "all").stdout)
    base = json.loads(goodput("analyze", str(TORCH), "--format", "json", "--quiet", "--window", "all").stdout)
    (fb,) = [f for f in base["findings"] if f["rule_id"] == "SYNC001"]
    (fh,) = [f for f in head["findings"] if f["rule_id"] == "SYNC001"]
    assert m["impact_ns"] == {"base": fb["impact_ns"], "head": fh["impact_ns"], "delta": fh["impact_ns"] - fb["impact_ns"],
                              "delta_pct": round(100.0 * (fh["impact_ns"] - fb["impact_ns"]) / fb["impact_ns"], 3)}
    # The planted sync returned 500 ns after the device drained: SYNC001 owns only the idle inside it, not the
    # 50 ms gap that follows (the host had left the sync).
    assert m["impact_ns"]["delta"] == 500 < DELTA
    assert m["severity"] == {"base": fb["severity"], "head": fh["severity"], "changed": fb["severity"] != fh["severity"]}
    # The titles differ (the counts in them changed): matching is by rule and scope, not by title.
    assert m["title"] != m["base_title"]
    new = {f["rule_id"] for f in diff["new_findings"]}
    resolved = {f["rule_id"] for f in diff["resolved_findings"]}
    assert not new & resolved
    assert "SYNC001" not in new | resolved


def _gate(*args: str) -> tuple[int, list[dict]]:
    proc = goodput("diff", *args, "--format", "json", "--quiet")
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)["gate"]


def test_fail_on_kernel_and_step_time_fail_only_on_significant_changes(tmp_path_factory, cropped):
    big, small = _scaled(tmp_path_factory, 1.4), _scaled(tmp_path_factory, 1.02)
    status, (check,) = _gate(str(TORCH), str(big), "--fail-on", "kernel:ncclDevKernel_SendRecv:+10%")
    assert status == 1 and check["status"] == "failed" and check["observed"] == pytest.approx(40.0, abs=0.01)
    # The full name and the label name the same kernel; a kernel nobody launched is not evaluated.
    status, checks = _gate(str(TORCH), str(big), "--fail-on", "kernel:ncclDevKernel_SendRecv:+50%,kernel:nope:+1%")
    assert status == 0 and [c["status"] for c in checks] == ["passed", "not_evaluated"]
    # +2 % per launch is more than the check's 1 %, but within the noise floor: it passes and says why.
    status, (check,) = _gate(str(TORCH), str(small), "--fail-on", "kernel:ncclDevKernel_SendRecv:+1%")
    assert status == 0 and check["status"] == "passed" and check["note"]
    assert check["observed"] == pytest.approx(2.0, abs=0.01)
    # The crop's median step is 0.5 % shorter: more than a 0.1 % check, and not significant.
    status, (check,) = _gate(str(TORCH), str(cropped), "--fail-on", "step_time:-0.1%")
    assert status == 0 and check["status"] == "passed" and check["note"].startswith("not significant")
    assert check["observed"] < -0.1


def test_fewer_steps_and_a_slower_kernel_report_that_kernel_alone_at_its_planted_factor(tmp_path_factory, cropped):
    """The issue's case: a later capture with fewer steps whose SendRecv got 41 % slower per launch."""
    dst = tmp_path_factory.mktemp("crop-slow") / "crop-slow.sqlite"
    assert scale_kernel(cropped, dst, SENDRECV, 1.41) > 0
    diff = diff_json(str(TORCH), str(dst))
    assert (diff["steps"]["count"]["base"], diff["steps"]["count"]["head"]) == (BASE_STEPS, CROP_STEPS)
    assert diff["steps"]["step_time_ns"]["changed"] is False
    (row,) = diff["kernels"]
    assert row["name"] == SENDRECV and row["per_launch_ns"]["significant"] is True
    # SendRecv waits for its peer in some launches and not in others: the crop keeps another mix of the two,
    # so the ratio of the medians is far off, while the pairwise estimate finds the planted factor.
    (wb,), (wh,) = diff["windows"]["base"], diff["windows"]["head"]
    raw_b, raw_h = launch_durations_raw(TORCH, SENDRECV, *wb), launch_durations_raw(dst, SENDRECV, *wh)
    assert abs(np.median(raw_h) / np.median(raw_b) - 1.41) > 0.2
    assert row["per_launch_ns"]["delta_pct"] == pytest.approx(41.0, abs=1.0)
    flash = next(r for r in diff["kernel_table"] if r["label"].startswith("flash::flash_fwd_kernel"))
    assert flash["status"] == "unchanged" and flash["head_count"] < flash["base_count"]
