"""The verdict builder on planted reports and findings (every branch, and that the top finding does not simply win),
and end to end: first in the CLI text and the JSON, one verdict for a multi-rank run."""

from __future__ import annotations

import dataclasses
import json

import pytest

from analysis.api import analyze
from analysis.diagnosis.findings import Finding
from analysis.diagnosis.rules.registry import default_registry
from analysis.diagnosis.verdict import KINDS, finding_kind, report_verdict, run_verdict
from analysis.results import Verdict
from goodput_cli.render import text
from tests.analysis.planting import finding_of, ingested
from tests.conftest import corpus_file

MS = 1_000_000
FACTS = {"t0_ns": 0, "t1_ns": 1000 * MS, "g0_ns": 100 * MS, "g1_ns": 1000 * MS}
# Each nsys rule that leads a verdict of its own: its kind and next step (the rules' traits).
RULE_KINDS = {r.id: (r.verdict_kind, r.next_step) for r in default_registry() if r.tool == "nsys" and r.verdict_kind}


def info(*, busy_ms: float = 50, span_ms: float = 100, copies_ms: float = 0, phase: str = "steady",
         counts: dict | None = None, anatomy: dict | None = None) -> dict:
    span, busy, copies = int(span_ms * MS), int(busy_ms * MS), int(copies_ms * MS)
    return {"file": "r.sqlite", "counts": counts or {"kernels": 10, "memcpy": 0, "cuda_api": 10, "nvtx": 0},
            "breakdown": {"span_ns": span, "idle_ns": span - busy, "memory_only_ns": copies,
                          "compute_ns": busy - copies, "comm_exposed_ns": 0},
            "window": {"phase": phase}, "iterations": {"anatomy": anatomy or {}},
            "top_kernels": [{"name": "k<int>", "share_pct": 40.0}]}


def finding(rule_id: str, impact_ms: float, phase: str = "steady", **keys) -> Finding:
    """A finding of ``rule_id`` costing ``impact_ms`` on ``phase``; ``keys``: its fields or its extra's."""
    return finding_of(rule_id, int(impact_ms * MS), phase=phase, **keys)


def test_no_gpu_activity_says_what_is_missing() -> None:
    v = report_verdict(info(counts={"kernels": 0, "memcpy": 0, "cuda_api": 500, "nvtx": 0}), [], {})
    assert v.kind == "no_gpu_data" and v.impact_ns is None and v.rule_id is None
    assert "500 cuda api rows" in v.text and "--trace=cuda" in v.next_step
    v = report_verdict(info(counts={"kernels": 0, "memcpy": 0, "cuda_api": 0, "nvtx": 0}), [], {})
    assert "no CUDA, NVTX or GPU rows" in v.text


def test_start_up_that_dwarfs_the_work_is_the_verdict_whatever_the_findings() -> None:
    # 900 ms before the first GPU operation in a 1 s trace, the loop spans 50 ms: a huge SYNC001 does not win.
    facts = {**FACTS, "g0_ns": 900 * MS, "startup_calls": [("cudaMalloc", 850 * MS)]}
    v = report_verdict(info(span_ms=50, busy_ms=5), [finding("SYNC001", 40)], facts)
    assert (v.kind, v.impact_ns, v.rule_id) == ("startup", 900 * MS, None)
    assert "cudaMalloc 850 ms" in v.text
    # The same start-up beside a window only 5 times shorter is not the story: the loop is.
    v = report_verdict(info(span_ms=180, busy_ms=20), [finding("SYNC001", 150)], facts)
    assert (v.kind, v.rule_id) == ("sync_bound", "SYNC001")


def test_teardown_after_the_last_gpu_operation() -> None:
    facts = {**FACTS, "g0_ns": 0, "g1_ns": 20 * MS, "teardown_calls": [("cuModuleUnload", 900 * MS)]}
    v = report_verdict(info(span_ms=20, busy_ms=19), [finding("KRN005", 19, kernel="k", share_pct=90.0)], facts)
    assert (v.kind, v.impact_ns) == ("teardown", 980 * MS) and "cuModuleUnload" in v.text


def test_host_paced_loop() -> None:
    ana = {"kind": "host_paced", "per_second": 25.0, "gpu_duty_cycle_pct": 4.0}
    v = report_verdict(info(span_ms=1000, busy_ms=40, anatomy=ana), [finding("GPU001", 900)], FACTS)
    assert v.kind == "host_paced" and "25 iterations/s" in v.text and "busy 4.0 %" in v.text


def test_busy_gpu_with_one_kernel_says_profile_it_not_the_largest_idle_finding() -> None:
    cmd = "ncu --kernel-name Fan2 --launch-skip 9 --launch-count 1 --set full -o Fan2 ./app [args]"
    found = [finding("KRN003", 300), finding("SYNC001", 8), finding("KRN005", 90, kernel="Fan2", share_pct=97.0,
                                                                    ncu_command=cmd)]
    v = report_verdict(info(span_ms=100, busy_ms=92), found, FACTS)
    assert (v.kind, v.rule_id, v.impact_ns) == ("gpu_bound_kernel", "KRN005", 90 * MS)
    assert v.next_step == f"profile it with ncu: {cmd}" and "97.0 % of GPU time: Fan2" in v.text


def test_busy_gpu_with_a_single_block_grid_is_a_launch_shape_verdict_before_the_dominant_kernel() -> None:
    shape = finding("KRN004", 95, compute_kernel_ns=99 * MS, evidence=[
        {"name": "nussinov_gpu", "detail": {"blocks": 1, "threads_per_block": 512, "sm_count": 28, "used_pct": 3.571}}])
    v = report_verdict(info(span_ms=100, busy_ms=99), [finding("KRN005", 99, kernel="nussinov_gpu"), shape], FACTS)
    assert (v.kind, v.rule_id) == ("launch_shape", "KRN004")
    assert "1 block(s) of 512 thread(s) on 28 SMs" in v.text and "3.6 % of the GPU" in v.text
    # A small shape cost (under half the kernel time) leaves the kernel verdict.
    small = dataclasses.replace(shape, impact_ns=10 * MS)
    assert report_verdict(info(span_ms=100, busy_ms=99), [finding("KRN005", 99, kernel="k"), small], FACTS).kind \
        == "gpu_bound_kernel"


def test_busy_gpu_full_of_copies_is_copy_bound() -> None:
    v = report_verdict(info(span_ms=100, busy_ms=99, copies_ms=90), [finding("MEM001", 90), finding("KRN005", 9)], FACTS)
    assert (v.kind, v.rule_id, v.impact_ns) == ("copies", "MEM001", 90 * MS)


def test_busy_gpu_without_a_dominant_kernel_names_the_top_kernels() -> None:
    v = report_verdict(info(span_ms=100, busy_ms=95), [finding("SYNC001", 5)], FACTS)
    assert v.kind == "gpu_bound_kernel" and v.rule_id is None and "k<int> 40.0 %" in v.text


@pytest.mark.parametrize("rule_id", sorted(RULE_KINDS))
def test_an_idle_gpu_takes_kind_and_next_step_from_the_table(rule_id) -> None:
    # MEM006 / HOST003 / HOST004 (allocation churn, MPI, JIT) are in the table before their rules exist.
    smaller = finding("GPU002" if rule_id != "GPU002" else "SYNC001", 10)
    # A capture with CPU samples and OS calls: the table's next step as it stands (test_host_bound_... for others).
    captured = {**FACTS, "captured": {"--sample=cpu": True, "--trace=osrt": True}}
    v = report_verdict(info(span_ms=100, busy_ms=20), [smaller, finding(rule_id, 60)], captured)
    kind, step = RULE_KINDS[rule_id]
    assert (v.kind, v.rule_id, v.next_step, v.impact_ns) == (kind, rule_id, step, 60 * MS)
    assert kind in KINDS


def test_a_title_that_already_names_the_kind_is_not_repeated() -> None:
    """KRN001's title starts "Launch-bound:", the verdict's label for it: the sentence says it once."""
    top = finding("KRN001", 60, title="Launch-bound: 1933 short kernels in 1 run(s), GPU idle 57.1 ms")
    v = report_verdict(info(span_ms=100, busy_ms=20), [top], FACTS)
    assert v.kind == "launch_bound"
    assert v.text.startswith("Launch-bound: 1933 short kernels in 1 run(s), GPU idle 57.1 ms (costs 60.0 ms;")


def test_host_bound_names_the_sampled_functions_or_the_capture_flags() -> None:
    sampled = [{"function": "__printf_fp_l", "share_pct": 30.4}, {"function": "_IO_vfprintf", "share_pct": 13.7}]
    v = report_verdict(info(span_ms=100, busy_ms=20), [finding("GPU001", 70, main_cause="no_activity",
                                                               host_functions=sampled)], FACTS)
    assert v.kind == "host_bound" and v.text.endswith("sampled in __printf_fp_l 30 %, _IO_vfprintf 14 %.")
    assert v.next_step.startswith("move the sampled host work (__printf_fp_l, _IO_vfprintf) off the launching thread")
    v = report_verdict(info(span_ms=100, busy_ms=20), [finding("GPU001", 70, main_cause="no_activity")], FACTS)
    assert v.next_step.endswith("collect --sample=cpu --trace=osrt to see it")
    # Flags the capture already used are not asked for again (issue #39, class 5).
    osrt = {**FACTS, "captured": {"--sample=cpu": False, "--trace=osrt": True}}
    v = report_verdict(info(span_ms=100, busy_ms=20), [finding("GPU001", 70, main_cause="no_activity")], osrt)
    assert v.next_step.endswith("collect --sample=cpu to see it")
    both = {**FACTS, "captured": {"--sample=cpu": True, "--trace=osrt": True}}
    v = report_verdict(info(span_ms=100, busy_ms=20), [finding("GPU001", 70, main_cause="no_activity")], both)
    assert "--sample" not in v.next_step and "--trace" not in v.next_step and "NVTX" in v.next_step


def test_a_recorded_cause_leads_over_idle_with_nothing_recorded() -> None:
    # 70 ms of idle with nothing of the host's recorded, 25 ms inside compilation: the compilation (a quarter of
    # the 80 ms idle) leads, and the sentence gives the unrecorded idle with the flags that would show it.
    blind = finding("GPU001", 70, main_cause="no_activity", causes={"no_activity": {"count": 3, "total_ns": 66 * MS},
                                                                    "cuda_api": {"count": 1, "total_ns": 4 * MS}},
                    by_category={"none": 65 * MS, "launch": 5 * MS})
    v = report_verdict(info(span_ms=100, busy_ms=20), [blind, finding("HOST004", 25)], FACTS)
    assert (v.kind, v.rule_id, v.impact_ns) == ("jit", "HOST004", 25 * MS)
    assert "a further 65.0 ms of idle has nothing of the host's recorded" in v.text
    # Under a fifth of the idle (NAMED_SHARE) the named cause is too small to lead: the blind idle does.
    v = report_verdict(info(span_ms=100, busy_ms=20), [blind, finding("HOST004", 15)], FACTS)
    assert (v.kind, v.rule_id) == ("host_bound", "GPU001") and "further" not in v.text
    # Idle inside the program's own NVTX ranges is recorded (they say what the host was in): GPU001 leads.
    ranged = finding("GPU001", 70, main_cause="no_activity", by_category={"user_range": 60 * MS, "none": 10 * MS})
    v = report_verdict(info(span_ms=100, busy_ms=20), [ranged, finding("HOST004", 25)], FACTS)
    assert (v.kind, v.rule_id) == ("host_bound", "GPU001") and "nothing recorded" not in v.next_step
    # Idle the CPU samples explain is recorded: GPU001 naming sampled functions keeps the lead.
    sampled = finding("GPU001", 70, main_cause="no_activity", host_functions=[{"function": "main", "share_pct": 90}])
    v = report_verdict(info(span_ms=100, busy_ms=20), [sampled, finding("HOST004", 25)], FACTS)
    assert (v.kind, v.rule_id) == ("host_bound", "GPU001")


def test_the_table_lists_the_rules_other_engineers_add() -> None:
    assert {k for k, _ in (RULE_KINDS[r] for r in ("MEM006", "HOST003", "HOST004"))} == {"allocation", "communication",
                                                                                        "jit"}


def test_idle_owned_by_set_up_is_start_up_and_other_phases_and_evidence_only_findings_do_not_count() -> None:
    found = [finding("GPU001", 70, main_cause="setup"), finding("PHASE001", 5000, phase="startup"),
             finding("HOST002", 900, owns_idle=False)]
    v = report_verdict(info(span_ms=100, busy_ms=2), found, FACTS)
    assert (v.kind, v.rule_id) == ("startup", "GPU001")
    assert finding_kind(finding("GPU001", 1, main_cause="no_activity")) == "host_bound"


def test_run_verdict_is_the_kind_most_reports_share_told_by_the_costliest() -> None:
    vs = [Verdict("sync_bound", "a", 5, "s", "SYNC001"), Verdict("host_bound", "b", 50, "h", "GPU001"),
          Verdict("sync_bound", "c", 7, "s", "SYNC001")]
    v = run_verdict(vs, ["rank 0", "rank 1", "rank 2"])
    assert v is not None and (v.kind, v.impact_ns) == ("sync_bound", 7) and v.text == "2 of 3 reports (rank 2 shown): c"
    assert run_verdict([], []) is None and run_verdict(vs[:1], ["r0"]) == vs[0]


def test_verdict_leads_the_json_and_the_cli_text() -> None:
    result = analyze([ingested(corpus_file("gaussian-threadsync.sqlite"))]).to_json()
    assert next(iter(result)) == "verdict"
    v = result["verdict"]
    assert v["kind"] == "gpu_bound_kernel" and v["rule_id"] == "KRN005" and set(v) >= {"kind", "text", "impact_ns",
                                                                                          "next_step"}
    assert result["reports"][0]["verdict"] == v
    assert v["impact_ns"] == next(f for f in result["findings"] if f["rule_id"] == "KRN005")["impact_ns"]
    first = text(json.loads(json.dumps(result))).splitlines()[0]
    assert first.startswith("Verdict: One kernel is ") and "ncu --kernel-name Fan2" in first


def test_a_multi_rank_run_has_one_verdict() -> None:
    paths = [ingested(corpus_file(n)) for n in ("nccl-ring-2node-r0-ault43.sqlite", "nccl-ring-2node-r1-ault44.sqlite")]
    result = analyze(paths).to_json()
    per = [r["verdict"] for r in result["reports"]]
    assert [v["kind"] for v in per] == ["startup", "startup"]
    lead = max(per, key=lambda v: v["impact_ns"])
    assert result["verdict"]["kind"] == "startup" and result["verdict"]["impact_ns"] == lead["impact_ns"]
    assert result["verdict"]["text"].startswith("2 of 2 reports (rank 0 shown): ")


def test_a_loop_of_small_kernels_costs_its_whole_round_trip_and_its_fix_fits_the_calls_in_it() -> None:
    """Issue #39 classes 5 and 6: a loop of small kernels whose idle is all short gaps. The cost is that short-gap
    idle (launches, syncs, copies, allocations and the host code between: one round trip), not KRN001's share of it;
    the next step removes the large parts first, and a CUDA graph is offered only when nothing it cannot capture
    (an allocation, a synchronous copy, a host sync) is large."""
    krn = finding("KRN001", 57, short_gap_idle_ns=95 * MS, short_gaps=3865, short_kernels=1933)
    found = [krn, finding("MEM002", 16), finding("MEM006", 13), finding("SYNC001", 8)]
    v = report_verdict(info(span_ms=101, busy_ms=6), found, FACTS)
    assert (v.kind, v.rule_id, v.impact_ns) == ("launch_bound", "KRN001", 95 * MS)
    assert "in allocation calls 13.0 ms" in v.text and "between launches 57.0 ms" in v.text
    assert v.next_step.startswith("move the per-iteration copies out of the loop")
    assert "allocate once outside the loop" in v.next_step and "graph" not in v.next_step
    assert "synchronizations" not in v.next_step  # 8 ms: under a tenth of the round trip
    v = report_verdict(info(span_ms=101, busy_ms=6), [krn], FACTS)
    assert v.impact_ns == 95 * MS and "CUDA graph" in v.next_step
    # Without the short-gap idle (an older KRN001), the finding's own cost and the table's next step stay.
    v = report_verdict(info(span_ms=101, busy_ms=6), [finding("KRN001", 57)], FACTS)
    assert v.impact_ns == 57 * MS and v.next_step == RULE_KINDS["KRN001"][1]


def test_a_kernel_on_two_gpus_costs_the_time_of_one() -> None:
    """Issue #39 classes 6 and 8: two GPUs run side by side, so a kernel's time summed over them is no one's time.
    The verdict's cost is the busiest GPU's, and the sentence says both."""
    ev = [{"device": 0, "value_ns": 136 * MS}, {"device": 1, "value_ns": 130 * MS}]
    dom = finding("KRN005", 266, kernel="flash_fwd_kernel", share_pct=51.0, ncu_command="ncu ...", evidence=ev)
    v = report_verdict(info(span_ms=600, busy_ms=540), [dom], FACTS)
    assert (v.kind, v.impact_ns) == ("gpu_bound_kernel", 136 * MS)
    assert "136 ms on the busiest of 2 GPUs, 266 ms on all of them" in v.text


def test_unified_memory_faults_are_fixed_in_their_direction() -> None:
    """Issue #39 class 5: idle between migrations to the host is the host faulting pages back: prefetch them to the
    CPU (or keep the work on the GPU), not "prefetch to the GPU"; faults inside kernels keep the GPU prefetch."""
    host = finding("MEM004", 60, idle_by_direction={"UVM_DtoH": {"ns": 59 * MS, "gaps": 1536}},
                   kernel_overlap_ns=5 * MS)
    v = report_verdict(info(span_ms=100, busy_ms=20), [host], FACTS)
    assert v.kind == "uvm" and "to the host" in v.next_step and "to the GPU" not in v.next_step
    gpu = finding("MEM004", 60, idle_by_direction={"UVM_DtoH": {"ns": 1 * MS, "gaps": 3}}, kernel_overlap_ns=50 * MS)
    v = report_verdict(info(span_ms=100, busy_ms=20), [gpu], FACTS)
    assert v.next_step == RULE_KINDS["MEM004"][1]
