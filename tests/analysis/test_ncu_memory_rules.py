"""NCU008-NCU010 on CSVs built from the real ncu layouts (long 2023+ and --page raw): fire, stay silent, skip."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analysis.diagnosis.ncu.hardware import FLOPS_PER_SM_CYCLE, LATENCY_CYCLES
from analysis.diagnosis.rules.ncu.ncu008_latency_bound import LatencyBoundMemory
from analysis.diagnosis.rules.ncu.ncu009_cache_reuse import PoorCacheReuse
from analysis.diagnosis.rules.ncu.ncu010_roofline import FarFromRoofline
from analysis.diagnosis.rules.registry import default_registry
from tests.analysis.declared_cases import rule_case
from tests.analysis.ncu_builders import long_csv, raw_csv, write
from tests.analysis.test_ncu_rules import DUR_10US, SOL, raw, run_rule
from tests.conftest import corpus_file

MWA, OCC, LS = "Memory Workload Analysis", "Occupancy", "Launch Statistics"


def test_registered_after_the_other_ncu_rules():
    ids = default_registry().ids()
    assert ids[-3:] == ["NCU008", "NCU009", "NCU010"]
    for rule in (LatencyBoundMemory, PoorCacheReuse, FarFromRoofline):
        assert "*How it is detected*" in rule.doc() and rule.collect.startswith("--section")


def latency_case(dram_pct: str, stall: str = "10", kernel: dict | None = None, extra=()):
    """A 2023+ long export (its identity cells say CC 7.5): 1 GHz SMs, 40 SMs, 32 warps each, DRAM 64 GB/s."""
    return long_csv([DUR_10US, (SOL, "SM Frequency", "Ghz", "1"), (SOL, "DRAM Throughput", "%", dram_pct),
                     (SOL, "Compute (SM) Throughput", "%", "10"), (SOL, "Memory Throughput", "%", dram_pct),
                     (MWA, "Memory Throughput", "Gbyte/second", "64"), (LS, "# SMs", "SM", "40"),
                     (OCC, "Achieved Active Warps Per SM", "warp", "32"),
                     *raw(("smsp__issue_active.avg.per_cycle_active", "", "0.2"),
                          ("smsp__average_warp_latency_per_inst_issued.ratio", "cycle", "20"),
                          ("smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio", "", stall),
                          *extra)],
                    kernels=[kernel or {}])


@rule_case("NCU008", "fires")
def test_ncu008_fires_with_littles_law_numbers(tmp_path):
    findings, result = run_rule(tmp_path, LatencyBoundMemory, latency_case("20"))
    assert result.status == "ok" and len(findings) == 1
    f = findings[0]
    # min(1 - 20/60, stall share 10/20, issue-slot bound min(1 - 0.2, 1 - 0.20)) = 0.5
    assert f["speedup_pct"] == pytest.approx(50.0) and f["impact_ns"] == 5000
    d = f["evidence"][0]["detail"]
    latency_s = LATENCY_CYCLES["7.5"]["dram"] / 1e9          # Turing DRAM latency at 1 GHz
    peak = 64e9 / 0.20                                         # ncu's DRAM peak implied by 64 GB/s = 20%
    assert d["bytes_in_flight_needed"] == pytest.approx(peak * latency_s)
    assert d["bytes_in_flight"] == pytest.approx(64e9 * latency_s)
    assert d["resident_warps"] == 40 * 32
    assert d["requests_in_flight_per_warp"] == pytest.approx(64e9 * latency_s / 1280 / 128)
    assert "Little's law" in f["message"] and "cp.async" in f["advice"]


@pytest.mark.parametrize(("loads", "verdict"), [("50,000", "about the typical latency"),
                                               ("10,000", "well above the typical latency"),
                                               ("200,000", "below the typical latency")])
def test_observed_wait_per_load_against_the_typical_latency(tmp_path, loads, verdict):
    data = latency_case("20", extra=[("smsp__inst_issued.sum", "inst", "1,000,000"),
                                     ("smsp__inst_executed_op_global_ld.sum", "inst", loads)])
    findings, _ = run_rule(tmp_path, LatencyBoundMemory, data)
    d = findings[0]["evidence"][0]["detail"]
    # 10 long-scoreboard warps per issue-active cycle x 1,000,000 issued / global loads; Turing DRAM: 300 cycles
    wait = 10 * 1_000_000 / float(loads.replace(",", ""))
    assert d["load_wait_cycles"] == pytest.approx(wait)
    assert d["load_wait_vs_typical"] == pytest.approx(wait / LATENCY_CYCLES["7.5"]["dram"])
    assert d["load_wait_verdict"].startswith(verdict) and verdict in findings[0]["message"]


@rule_case("NCU008", "silent")
def test_ncu008_silent_when_bandwidth_bound_or_stalls_elsewhere(tmp_path):
    findings, result = run_rule(tmp_path, LatencyBoundMemory, latency_case("70"))
    assert result.status == "ok" and findings == []
    findings, result = run_rule(tmp_path, LatencyBoundMemory, latency_case("20", stall="2"))  # 10% < 30%
    assert result.status == "ok" and findings == []


def test_ncu008_skipped_with_flags_on_corpus_without_stalls(tmp_path):
    _, result = run_rule(tmp_path, LatencyBoundMemory, corpus_file("pytorch-dropout-dram.csv").read_bytes())
    assert result.status == "skipped" and "--section WarpStateStats" in result.reason
    assert "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio" in result.reason


UNITS = {"gpu__time_duration.sum": "usecond", "device__attribute_l2_cache_size": "byte",
         "lts__t_sector_hit_rate.pct": "%", "dram__bytes.sum": "byte",
         "dram__throughput.avg.pct_of_peak_sustained_elapsed": "%"}


def reuse_case(hit: str, dram_bytes: str, l2: str = "4,194,304"):
    return raw_csv([{"ID": "0", "Kernel Name": "stencil(float const*, float*)", "gpu__time_duration.sum": "10",
                     "device__attribute_l2_cache_size": l2, "lts__t_sector_hit_rate.pct": hit,
                     "dram__bytes.sum": dram_bytes, "dram__throughput.avg.pct_of_peak_sustained_elapsed": "40"}], UNITS)


@rule_case("NCU009", "fires")
def test_ncu009_fires_on_raw_page_when_data_fits_l2(tmp_path):
    findings, result = run_rule(tmp_path, PoorCacheReuse, reuse_case("20", "1,048,576"))
    assert result.status == "ok" and len(findings) == 1
    # reaching 50%: DRAM traffic x (1 - 0.5) / (1 - 0.2) -> 37.5% saved, weighted by DRAM at 40% of peak
    assert findings[0]["speedup_pct"] == pytest.approx(15.0)
    assert findings[0]["evidence"][0]["detail"]["l2_bytes"] == 4_194_304


@pytest.mark.parametrize(("hit", "dram"), [("60", "1,048,576"), ("20", "8,388,608")])
@rule_case("NCU009", "silent")
def test_ncu009_silent_on_good_hit_rate_or_data_larger_than_l2(tmp_path, hit, dram):
    findings, result = run_rule(tmp_path, PoorCacheReuse, reuse_case(hit, dram))
    assert result.status == "ok" and findings == []


def test_ncu009_uses_the_product_table_and_skips_without_l2_size(tmp_path):
    units = {k: v for k, v in UNITS.items() if k != "device__attribute_l2_cache_size"}
    row = {"ID": "0", "Kernel Name": "k()", "gpu__time_duration.sum": "10", "lts__t_sector_hit_rate.pct": "20",
           "dram__bytes.sum": "1,048,576", "dram__throughput.avg.pct_of_peak_sustained_elapsed": "40"}
    _, result = run_rule(tmp_path, PoorCacheReuse, raw_csv([row], units))
    assert result.status == "skipped" and "device__attribute_l2_cache_size" in result.reason
    units["device__attribute_display_name"] = ""
    findings, _ = run_rule(tmp_path, PoorCacheReuse,
                           raw_csv([{**row, "device__attribute_display_name": "NVIDIA A100-SXM4-40GB"}], units))
    assert findings[0]["evidence"][0]["detail"]["l2_bytes"] == 40 * 2**20  # A100 data sheet
    assert findings[0]["evidence"][0]["detail"]["l2_bytes_source"] == "table"


def test_ncu010_on_corpus_sgemm_with_exact_distance(tmp_path):
    findings, result = run_rule(tmp_path, FarFromRoofline, corpus_file("pytorch-sgemm-small.csv").read_bytes())
    assert result.status == "ok"
    f = next(f for f in findings if "ampere_sgemm" in f["title"])
    # Under the L2 roof: achieved / (intensity_L2 x L2 peak implied by 0.63%) = 0.63%, so 99.37% raw; bounded by
    # the speed of light: L1/TEX is busy 1.38% of the duration, which no fix of the same work removes.
    assert f["evidence"][0]["detail"]["raw_speedup_pct"] == pytest.approx(100 - 0.63, abs=1e-3)
    assert f["speedup_pct"] == pytest.approx(100 - 1.38, abs=1e-3)
    assert f["evidence"][0]["detail"]["roof"] == "l2"


def compute_case(sm_pct: str):
    """--page raw on an A100 (CC 8.0, 108 SMs at 1.41 GHz): 1e9 FFMA in 1 ms, 1 MB of DRAM traffic."""
    units = {"gpu__time_duration.sum": "msecond", "device__attribute_display_name": "",
             "device__attribute_compute_capability_major": "", "device__attribute_compute_capability_minor": "",
             "device__attribute_multiprocessor_count": "", "sm__cycles_elapsed.avg.per_second": "cycle/second",
             "sm__sass_thread_inst_executed_op_ffma_pred_on.sum": "inst", "dram__bytes.sum": "byte",
             "lts__t_bytes.sum": "byte", "sm__throughput.avg.pct_of_peak_sustained_elapsed": "%"}
    row = {"ID": "0", "Kernel Name": "chain(float*)", "gpu__time_duration.sum": "1",
           "device__attribute_display_name": "NVIDIA A100-SXM4-40GB", "device__attribute_compute_capability_major": "8",
           "device__attribute_compute_capability_minor": "0", "device__attribute_multiprocessor_count": "108",
           "sm__cycles_elapsed.avg.per_second": "1,410,000,000", "sm__sass_thread_inst_executed_op_ffma_pred_on.sum":
           "1,000,000,000", "dram__bytes.sum": "1,000,000", "lts__t_bytes.sum": "2,000,000",
           "sm__throughput.avg.pct_of_peak_sustained_elapsed": sm_pct}
    return raw_csv([row], units)


@rule_case("NCU010", "fires")
def test_ncu010_under_the_fp32_compute_roof_from_the_architecture_table(tmp_path):
    findings, result = run_rule(tmp_path, FarFromRoofline, compute_case("10"))
    assert result.status == "ok" and len(findings) == 1
    peak = FLOPS_PER_SM_CYCLE["8.0"]["fp32"] * 108 * 1.41e9     # 19.5 TFLOP/s
    achieved = 2e9 / 1e-3
    d = findings[0]["evidence"][0]["detail"]
    assert d["roof"] == "compute" and d["precision"] == "fp32"
    assert d["attainable_flops"] == pytest.approx(peak) and d["achieved_flops"] == pytest.approx(achieved)
    assert findings[0]["speedup_pct"] == pytest.approx(100 * (1 - achieved / peak), abs=1e-3)  # rounded to 3 places


@rule_case("NCU010", "silent")
def test_ncu010_silent_when_a_unit_is_busy(tmp_path):
    findings, result = run_rule(tmp_path, FarFromRoofline, compute_case("75"))
    assert result.status == "ok" and findings == []


def test_ncu010_skipped_without_instruction_counts(tmp_path):
    _, result = run_rule(tmp_path, FarFromRoofline, corpus_file("numba-copy-blocked-full.csv").read_bytes())
    assert result.status == "skipped" and "--section SpeedOfLight_RooflineChart" in result.reason
    assert "sm__sass_thread_inst_executed_op_ffma_pred_on.sum" in result.reason


def test_sectors_per_request_against_the_ideal_on_raw_page(tmp_path):
    from analysis.api import analyze
    from analysis.readers.ncu.ingest import ingest_ncu

    units = {"gpu__time_duration.sum": "usecond", "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": "sector",
             "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": "request",
             "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio": "byte/sector",
             "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_st.ratio": "sector/request",
             "smsp__sass_average_data_bytes_per_sector_mem_global_op_st.ratio": "byte/sector"}
    row = {"ID": "0", "Kernel Name": "strided(float const*, float*)", "gpu__time_duration.sum": "10",
           "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": "3,200", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum":
           "100", "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio": "4",
           "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_st.ratio": "4",
           "smsp__sass_average_data_bytes_per_sector_mem_global_op_st.ratio": "32"}
    (tmp_path / "r.csv").write_bytes(raw_csv([row], units))
    ingest_ncu(tmp_path / "r.csv", tmp_path / "r.duckdb")
    spr = analyze([tmp_path / "r.duckdb"]).to_json()["reports"][0]["kernels"][0]["memory"]["sectors_per_request"]
    # one 4-byte word per thread, one thread per sector: 32 sectors where 4 carry the data (8x)
    assert (spr["ld"], spr["ld_ideal"]) == (32.0, 4.0)
    assert (spr["st"], spr["st_ideal"]) == (4.0, 4.0)


HOSTILE = st.one_of(st.integers(-(2**70), 2**70).map(str), st.floats(allow_nan=True, allow_infinity=True).map(repr),
                    st.sampled_from(["n/a", "", "0", "-1", "1e308", "1e-320", "100"]))
STORY_METRICS = ["gpu__time_duration.sum", "dram__bytes.sum", "dram__throughput.avg.pct_of_peak_sustained_elapsed",
                 "lts__t_bytes.sum", "lts__t_sector_hit_rate.pct", "lts__throughput.avg.pct_of_peak_sustained_elapsed",
                 "device__attribute_l2_cache_size", "device__attribute_compute_capability_major",
                 "device__attribute_compute_capability_minor", "device__attribute_multiprocessor_count",
                 "sm__cycles_elapsed.avg.per_second", "sm__warps_active.avg.per_cycle_active",
                 "smsp__average_warp_latency_per_inst_issued.ratio",
                 "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
                 "sm__sass_thread_inst_executed_op_ffma_pred_on.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
                 "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(values=st.lists(HOSTILE, min_size=len(STORY_METRICS), max_size=len(STORY_METRICS)))
def test_hostile_numbers_never_crash_the_story_or_the_rules(tmp_path, values):
    import json

    from analysis.api import analyze
    from analysis.readers.ncu.ingest import ingest_ncu

    row = {"ID": "0", "Kernel Name": "k(float*)", **dict(zip(STORY_METRICS, values, strict=True))}
    src, out = tmp_path / "h.csv", tmp_path / f"h{abs(hash(tuple(values)))}.duckdb"
    src.write_bytes(raw_csv([row], dict.fromkeys(STORY_METRICS, "")))
    ingest_ncu(src, out)
    result = analyze([out], rules=["NCU008", "NCU009", "NCU010"]).to_json()
    assert all(r["status"] != "error" for r in result["rules"]), result["rules"]
    json.dumps(result, allow_nan=False)  # no NaN/Infinity in the JSON contract
    for f in result["findings"]:
        assert 0 <= f["speedup_pct"] <= 100 and f["impact_ns"] >= 0


def test_linked_nsys_time_in_kernels_and_new_rule_impact(tmp_path):
    """With an nsys report of the same run, each kernel's story carries its nsys time and NCU008 weighs it."""
    import sqlite3

    from analysis.api import analyze, ingest

    nsys = corpus_file("vecadd-2026.sqlite")
    con = sqlite3.connect(f"file:{nsys}?mode=ro", uri=True)
    name, total, launches, grid, block = con.execute(
        "SELECT s.value, sum(k.end - k.start), count(*), min(k.gridX), min(k.blockX) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds s ON s.id = k.demangledName GROUP BY s.value").fetchone()
    con.close()
    src = latency_case("20", kernel={"Kernel Name": name, "Block Size": f"({block}, 1, 1)",
                                     "Grid Size": f"({grid}, 1, 1)"})
    ncu_db, nsys_db = tmp_path / "ncu.duckdb", tmp_path / "nsys.duckdb"
    ingest(write(tmp_path, src), ncu_db)
    ingest(nsys, nsys_db)
    result = analyze([ncu_db, nsys_db], labels=["ncu.csv", "nsys.sqlite"], rules=["NCU008"], window="all").to_json()
    kernel = result["reports"][0]["kernels"][0]
    assert (kernel["nsys_total_ns"], kernel["nsys_launches"]) == (total, launches)
    f = result["findings"][0]
    assert f["rule_id"] == "NCU008" and f["linked_to_nsys"] is True
    assert f["impact_ns"] == round(total * 0.5)  # the 50% speedup of test_ncu008 applied to the nsys time


def test_dram_peak_from_device_attributes_of_a_raw_page(tmp_path):
    """2 x memory clock x bus width / 8: an RTX 3090 probed by ncu (9,751,000 kHz, 384 bits) has 936 GB/s."""
    from analysis.api import analyze
    from analysis.readers.ncu.ingest import ingest_ncu

    units = {"gpu__time_duration.sum": "usecond", "dram__bytes.sum": "byte",
             "device__attribute_max_mem_frequency_khz": "", "device__attribute_global_memory_bus_width": ""}
    row = {"ID": "0", "Kernel Name": "k()", "gpu__time_duration.sum": "100", "dram__bytes.sum": "46,812,000",
           "device__attribute_max_mem_frequency_khz": "9,751,000", "device__attribute_global_memory_bus_width": "384"}
    (tmp_path / "r.csv").write_bytes(raw_csv([row], units))
    ingest_ncu(tmp_path / "r.csv", tmp_path / "r.duckdb")
    dram = analyze([tmp_path / "r.duckdb"]).to_json()["reports"][0]["kernels"][0]["memory"]["levels"][0]
    assert dram["peak_source"] == "device" and dram["peak_bps"] == pytest.approx(2 * 9_751_000e3 * 384 / 8)
    assert dram["pct_of_peak"] == pytest.approx(100 * 46_812_000 / 100e-6 / (2 * 9_751_000e3 * 384 / 8))
