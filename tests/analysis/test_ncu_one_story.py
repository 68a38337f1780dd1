"""One story per kernel: peaks stated (inferred or unknown), and the memory story and the rules agreeing on
access width, ideal and bound."""

from __future__ import annotations

import pytest

from analysis.api import analyze
from analysis.diagnosis.ncu.hardware import FLOPS_PER_SM_CYCLE, infer_cc
from analysis.readers.ncu.ingest import ingest_ncu
from tests.analysis.ncu_builders import raw_csv, write
from tests.analysis.test_ncu_shared_gains import CORPUS, corpus

__all__ = ["corpus"]  # the module fixture, shared

HZ = 1.5e9
UNITS = {"gpu__time_duration.sum": "usecond", "sm__cycles_elapsed.avg.per_second": "cycle/second",
         "sm__sass_thread_inst_executed_op_ffma_pred_on.sum": "inst", "dram__bytes.sum": "byte",
         "dram__throughput.avg.pct_of_peak_sustained_elapsed": "%",
         "sm__throughput.avg.pct_of_peak_sustained_elapsed": "%"}
ROW = {"ID": "0", "gpu__time_duration.sum": "100", "sm__cycles_elapsed.avg.per_second": f"{HZ:.0f}",
       "sm__sass_thread_inst_executed_op_ffma_pred_on.sum": "1,000,000", "dram__bytes.sum": "40,000,000",
       "dram__throughput.avg.pct_of_peak_sustained_elapsed": "20", "sm__throughput.avg.pct_of_peak_sustained_elapsed": "5"}


def story(tmp_path, name: str, **extra: str) -> tuple[dict, list[dict]]:
    units = {**UNITS, **{k: "" for k in extra}}
    # "CC": the real export's identity cells say 7.5; these launches have no device facts unless given.
    data = raw_csv([{**ROW, "Kernel Name": name, "CC": "", **extra}], units)
    ingest_ncu(write(tmp_path, data), tmp_path / "r.duckdb")
    result = analyze([tmp_path / "r.duckdb"], labels=["r.csv"]).to_json()
    return result["reports"][0]["kernels"][0]["memory"], result["findings"]


def test_arch_marker_and_sm_count_give_the_table_peak(tmp_path):
    memory, findings = story(tmp_path, "ampere_sgemm_128x64_nn", device__attribute_multiprocessor_count="108")
    hw, roof = memory["hardware"], memory["roofline"]
    assert (hw["cc"], hw["cc_source"], hw["cc_basis"]) == ("8.0", "inferred", "kernel name ampere_ and 108 SMs")
    # 2 FLOP per FFMA x 1e6 in 100 us = 20 GFLOP/s against 128 FLOP/SM/cycle x 108 SMs x 1.5 GHz
    assert roof["compute_peak_known"] is True and "compute_roof_unknown" not in roof
    assert roof["peaks"]["fp32"]["value"] == pytest.approx(FLOPS_PER_SM_CYCLE["8.0"]["fp32"] * 108 * HZ)
    ncu010 = next(f for f in findings if f["rule_id"] == "NCU010")
    assert "compute capability 8.0 table, the architecture inferred from kernel name ampere_ and 108 SMs" in \
        ncu010["message"]


def test_ambiguous_marker_without_sm_count_leaves_the_compute_roof_unknown(tmp_path):
    memory, findings = story(tmp_path, "ampere_sgemm_128x64_nn")
    roof = memory["roofline"]
    assert memory["hardware"]["cc"] is None and roof["compute_peak_known"] is False
    assert roof["roof"] == "dram"  # the memory roof alone: 0.05 FLOP/B x (DRAM 400 GB/s / 20%)
    assert "8.0 or 8.6" in roof["compute_roof_unknown"]
    ncu010 = next(f for f in findings if f["rule_id"] == "NCU010")
    assert "the compute roof is unknown" in ncu010["message"] and "memory roof alone" in ncu010["message"]
    assert ncu010["evidence"][0]["detail"]["compute_roof_unknown"] == roof["compute_roof_unknown"]


def test_no_marker_no_attributes_says_why(tmp_path):
    memory, _ = story(tmp_path, "my_kernel(float*)")
    assert memory["hardware"]["cc"] is None
    assert memory["roofline"]["compute_roof_unknown"].startswith("no device attributes")


def test_device_attributes_are_stated_as_such(tmp_path):
    memory, _ = story(tmp_path, "my_kernel(float*)", device__attribute_compute_capability_major="9",
                      device__attribute_compute_capability_minor="0", device__attribute_multiprocessor_count="132")
    assert (memory["hardware"]["cc"], memory["hardware"]["cc_source"]) == ("9.0", "device")
    assert memory["roofline"]["peaks"]["fp32"]["value"] == pytest.approx(256 * 132 * HZ)


@pytest.mark.parametrize(("names", "sms", "cc"), [
    (["sm90_xmma_gemm_bf16bf16_bf16f32"], None, "9.0"), (["cutlass_80_tensorop_s1688gemm_64x64"], None, "8.0"),
    (["volta_sgemm_128x64_nn"], None, "7.0"), (["splitKreduce_kernel"], 132, "9.0"),
    (["ampere_sgemm_32x32_sliced1x4_tn", "splitKreduce_kernel"], None, None),
    (["ampere_sgemm_32x32_sliced1x4_tn", "sm90_xmma_gemm"], None, None),  # markers disagree: nothing inferred
])
def test_infer_cc(names, sms, cc):
    assert infer_cc(names, sms)[0] == cc


# The memory story and the rules agree -----------------------------------------------------------------

@pytest.mark.parametrize("name", CORPUS)
def test_ncu005_says_what_the_memory_story_says(corpus, name):
    report = corpus[name]["reports"][0]
    for f in corpus[name]["findings"]:
        if f["rule_id"] != "NCU005":
            continue
        detail = f["evidence"][0]["detail"]
        if detail["bound_kind"] == "small_grid":  # the launch's shape leads: the limiter says so
            assert any(k["memory"]["limiter"]["kind"] == "launch" for k in report["kernels"] if k["name"] == f["kernel"])
            continue
        # The finding's class and reason are those of one of the kernel's launches' memory story (the lead's).
        assert any(k["memory"]["bound"]["kind"] == detail["bound_kind"]
                   and k["memory"]["bound"]["reason"] == detail["bound_reason"]
                   for k in report["kernels"] if k["name"] == f["kernel"])
        title = {"bandwidth": "Memory-bound kernel", "compute": "Compute-bound kernel",
                 "latency": "Latency-bound kernel", "unknown": "No unit near its peak"}[detail["bound_kind"]]
        assert f["title"].startswith(title)


def test_story_ideal_is_ncu001s_ideal_from_the_kernel_name(tmp_path):
    """No bytes-per-sector metric: the ideal of both comes from the element type in the name (float: 4 B)."""
    units = {"gpu__time_duration.sum": "usecond", "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": "sector",
             "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": "request",
             "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum": "sector",
             "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum": "request"}
    row = {"ID": "0", "Kernel Name": "transpose(float const*, float*, int)", "gpu__time_duration.sum": "10",
           "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": "400", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum":
           "100", "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum": "3,200",
           "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum": "100"}
    ingest_ncu(write(tmp_path, raw_csv([row], units)), tmp_path / "r.duckdb")
    result = analyze([tmp_path / "r.duckdb"], labels=["r.csv"]).to_json()
    spr = result["reports"][0]["kernels"][0]["memory"]["sectors_per_request"]
    assert (spr["ld"], spr["ld_ideal"], spr["st"], spr["st_ideal"]) == (4.0, 4.0, 32.0, 4.0)
    assert spr["st_ideal_source"] == "name" and "float" in spr["st_ideal_assumption"]
    ncu001 = next(f for f in result["findings"] if f["rule_id"] == "NCU001")
    detail = ncu001["evidence"][0]["detail"]
    assert (detail["ideal_sectors_per_request"], detail["width_source"]) == (spr["st_ideal"], spr["st_ideal_source"])
    assert detail["assumption"] == spr["st_ideal_assumption"]
