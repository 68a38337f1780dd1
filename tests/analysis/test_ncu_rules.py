"""NCU001-NCU007 on CSVs built from real ncu layouts: where each fires (with the exact speedup) and stays silent."""

from __future__ import annotations

import pytest

from analysis.diagnosis.rules.base import Registry
from analysis.diagnosis.rules.ncu import NCU_RULES
from analysis.diagnosis.rules.ncu.ncu001_uncoalesced import UncoalescedGlobalAccess
from analysis.diagnosis.rules.ncu.ncu002_warp_stalls import WarpStalls
from analysis.diagnosis.rules.ncu.ncu003_occupancy import Occupancy
from analysis.diagnosis.rules.ncu.ncu004_bank_conflicts import SharedBankConflicts
from analysis.diagnosis.rules.ncu.ncu005_throughput import ThroughputBottleneck
from analysis.diagnosis.rules.ncu.ncu006_launch_config import LaunchConfiguration
from analysis.diagnosis.rules.ncu.ncu007_pipes import PipeUtilization
from analysis.model.trace import Run
from analysis.readers.ncu.ingest import ingest_ncu
from tests.analysis.declared_cases import observe, rule_case
from tests.analysis.ncu_builders import OLD_LAYOUT, long_csv, write
from tests.analysis.rule_runner import run_rules
from tests.conftest import corpus_file

CMD = "Command line profiler metrics"
SOL = "GPU Speed Of Light Throughput"
DUR_10US = (SOL, "Duration", "usecond", "10")


def run_rule(tmp_path, rule, data: bytes):
    out = tmp_path / "ncu.duckdb"
    ingest_ncu(write(tmp_path, data), out)
    with Run.open([out], ["ncu.csv"]) as run:
        findings, results = run_rules(run, Registry([rule]))
    observe(results[0].rule_id, results[0].status, len(findings))
    return [f.to_dict() for f in findings], results[0]


def raw(*pairs):
    """Rows of raw metrics in the 'Command line profiler metrics' section (`ncu --metrics`)."""
    return [(CMD, name, unit, value) for name, unit, value in pairs]


def test_registry_lists_all_ncu_rules_in_order():
    assert [r.id for r in NCU_RULES] == [f"NCU00{i}" for i in range(1, 8)]
    assert all(r.tool == "ncu" and r.doc() and "*How it is detected*" in r.doc() for r in NCU_RULES)
    Registry(NCU_RULES)  # unique ids and names


# NCU001 ---------------------------------------------------------------------------------------------------

@rule_case("NCU001", "fires")
def test_ncu001_l2_excess_sectors_fire_with_ncu_speedup(tmp_path):
    data = long_csv([DUR_10US, *raw(("memory_l2_theoretical_sectors_global", "sector", "1,000"),
                                    ("memory_l2_theoretical_sectors_global_ideal", "sector", "250"),
                                    ("lts__cycles_active.sum", "cycle", "600"),
                                    ("lts__cycles_elapsed.sum", "cycle", "1,000"))])
    findings, result = run_rule(tmp_path, UncoalescedGlobalAccess, data)
    assert result.status == "ok" and len(findings) == 1
    f = findings[0]
    # ncu: (L2 active / elapsed) x excess / total = 0.6 x 750 / 1000
    assert f["speedup_pct"] == pytest.approx(45.0)
    assert f["impact_ns"] == 4500 and f["impact_pct"] == pytest.approx(45.0)
    assert f["evidence"][0]["name"].startswith("copy_blocked[") and f["advice"]


@rule_case("NCU001", "silent")
def test_ncu001_silent_when_sectors_are_ideal(tmp_path):
    data = long_csv([DUR_10US, *raw(("memory_l2_theoretical_sectors_global", "sector", "250"),
                                    ("memory_l2_theoretical_sectors_global_ideal", "sector", "250"))])
    findings, result = run_rule(tmp_path, UncoalescedGlobalAccess, data)
    assert result.status == "ok" and findings == []


def test_ncu001_sectors_per_request_loads_and_stores_separately(tmp_path):
    # A kernel name without element types: nothing to infer the stores' access width from.
    data = long_csv(kernels=[{"Kernel Name": "copy_blocked"}], metrics=[DUR_10US, *raw(
        ("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "sector", "800"),
        ("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "request", "100"),
        ("smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio", "byte/sector", "8"),
        ("l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum", "sector", "3,200"),
        ("l1tex__t_requests_pipe_lsu_mem_global_op_st.sum", "request", "100"))])
    findings, _ = run_rule(tmp_path, UncoalescedGlobalAccess, data)
    by_title = {f["title"].split(":")[0]: f for f in findings}
    # loads: 8 sectors/request, 8 of 32 bytes used -> ideal 2 -> 75% excess
    assert by_title["Uncoalesced global loads"]["speedup_pct"] == pytest.approx(75.0)
    # stores: no width metric -> against the widest access (16 sectors): 32/request -> 50%, a lower bound
    assert by_title["Uncoalesced global stores"]["speedup_pct"] == pytest.approx(50.0)


def test_ncu001_skipped_with_collection_flags(tmp_path):
    findings, result = run_rule(tmp_path, UncoalescedGlobalAccess, long_csv([DUR_10US]))
    assert result.status == "skipped" and "--section SourceCounters" in result.reason
    assert "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum" in result.reason


def test_ncu001_uses_ncu_rule_result_when_metrics_are_absent(tmp_path):
    findings, result = run_rule(tmp_path, UncoalescedGlobalAccess, corpus_file("numba-copy-blocked-full.csv").read_bytes())
    assert result.status == "ok" and len(findings) == 1
    # the export's own UncoalescedGlobalAccess result: 74.14% of the profiled 21,058,944 ns
    assert findings[0]["speedup_pct"] == pytest.approx(74.14)
    assert findings[0]["impact_ns"] == round(21_058_944 * 0.7414)


# NCU002 ---------------------------------------------------------------------------------------------------

STALLS = raw(("smsp__issue_active.avg.per_cycle_active", "", "0.2"),
             ("smsp__average_warp_latency_per_inst_issued.ratio", "cycle", "20"),
             ("smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio", "", "10"),
             ("smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio", "", "4"),
             ("smsp__average_warps_issue_stalled_selected_per_issue_active.ratio", "", "19"))


@rule_case("NCU002", "fires")
def test_ncu002_dominant_stall_fires_capped_by_issue_slot_bound(tmp_path):
    data = long_csv([DUR_10US, *STALLS, *raw(("sm__throughput.avg.pct_of_peak_sustained_elapsed", "%", "30"),
                                             ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", "%",
                                              "70"))])
    findings, result = run_rule(tmp_path, WarpStalls, data)
    assert [f["title"].split(":")[0] for f in findings] == ["Warp stall 'long scoreboard'"]
    # share 10/20 = 50%, capped by min(1 - 0.2, 1 - 0.70) = 30% (ncu's global speedup)
    assert findings[0]["speedup_pct"] == pytest.approx(30.0) and findings[0]["speedup_type"] == "global"
    assert "L1TEX" in findings[0]["message"]


def test_ncu002_display_names_and_uncapped_share(tmp_path):
    data = long_csv([DUR_10US, ("Scheduler Statistics", "One or More Eligible", "%", "20"),
                     ("Warp State Statistics", "Warp Cycles Per Issued Instruction", "cycle", "20"),
                     *raw(("smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio", "", "7"))])
    findings, _ = run_rule(tmp_path, WarpStalls, data)
    # no SOL metrics: bound = 1 - 0.2 = 80%; share 7/20 = 35%
    assert len(findings) == 1 and findings[0]["speedup_pct"] == pytest.approx(35.0)


@rule_case("NCU002", "silent")
def test_ncu002_silent_when_issue_is_busy(tmp_path):
    busy = [(s, n, u, "0.85" if n.startswith("smsp__issue_active") else v) for s, n, u, v in STALLS]
    findings, result = run_rule(tmp_path, WarpStalls, long_csv([DUR_10US, *busy]))
    assert result.status == "ok" and findings == []


def test_ncu002_skipped_without_stall_metrics(tmp_path):
    _, result = run_rule(tmp_path, WarpStalls, long_csv([DUR_10US]))
    assert result.status == "skipped" and "--section WarpStateStats" in result.reason


# NCU003 ---------------------------------------------------------------------------------------------------

def occupancy(theo, ach, regs="4", smem="8", warps="8", blocks="16"):
    return [("Occupancy", "Block Limit SM", "block", blocks), ("Occupancy", "Block Limit Registers", "block", regs),
            ("Occupancy", "Block Limit Shared Mem", "block", smem), ("Occupancy", "Block Limit Warps", "block", warps),
            ("Occupancy", "Theoretical Occupancy", "%", theo), ("Occupancy", "Achieved Occupancy", "%", ach)]


@rule_case("NCU003", "fires")
def test_ncu003_low_theoretical_occupancy_names_the_limiter(tmp_path):
    findings, _ = run_rule(tmp_path, Occupancy, long_csv([DUR_10US, *occupancy("50", "45")]))
    assert len(findings) == 1 and "registers" in findings[0]["message"]
    assert findings[0]["speedup_pct"] == pytest.approx(50.0) and findings[0]["speedup_type"] == "local"


def test_ncu003_capped_by_issue_slots_and_achieved_gap(tmp_path):
    data = long_csv([DUR_10US, *occupancy("100", "60"), *raw(("smsp__issue_active.avg.per_cycle_active", "", "0.7"))])
    findings, _ = run_rule(tmp_path, Occupancy, data)
    assert [f["title"].split(":")[0] for f in findings] == ["Achieved occupancy gap"]
    # (100 - 60) / 100 = 40%, capped by 1 - 0.7 = 30%
    assert findings[0]["speedup_pct"] == pytest.approx(30.0)


@rule_case("NCU003", "silent")
def test_ncu003_silent_when_occupancy_is_high(tmp_path):
    findings, result = run_rule(tmp_path, Occupancy, long_csv([DUR_10US, *occupancy("100", "95")]))
    assert result.status == "ok" and findings == []


def test_ncu003_silent_on_the_corpus_conv2d_sub_wave_grid(tmp_path):
    """0.05 waves: more resident warps cannot help a grid that leaves most SMs idle (NCU005's small grid)."""
    findings, result = run_rule(tmp_path, Occupancy, corpus_file(OLD_LAYOUT).read_bytes())
    assert result.status == "ok" and findings == []


def test_ncu003_on_the_corpus_conv2d_row_planted_to_fill_waves(tmp_path):
    """The same row planted to fill 2 waves and to last 10x longer (66 us, not a tiny launch): occupancy is now
    where warps could limit it."""
    data = corpus_file(OLD_LAYOUT).read_bytes().replace(b'"Waves Per SM","","0.05"', b'"Waves Per SM","","2"')
    data = data.replace(b'"sm__cycles_elapsed.avg","cycle","6,387.24"', b'"sm__cycles_elapsed.avg","cycle","63,872.4"')
    assert data.count(b'"2"') > corpus_file(OLD_LAYOUT).read_bytes().count(b'"2"') and b"63,872.4" in data
    findings, _ = run_rule(tmp_path, Occupancy, data)
    got = {f["title"].split(":")[0]: f for f in findings}
    assert got["Low theoretical occupancy"]["speedup_pct"] == pytest.approx(62.5)
    assert "registers" in got["Low theoretical occupancy"]["message"]  # Block Limit Registers 12 < 32, 50, 32
    assert got["Achieved occupancy gap"]["speedup_pct"] == pytest.approx((37.5 - 3.08) / 37.5 * 100, abs=1e-3)
    # no gpu__time_duration: elapsed cycles / SM clock = 63,872.4 (planted) / 959,621,505.52 s
    duration = 63872.4 / 959621505.52 * 1e9
    assert got["Low theoretical occupancy"]["raw_impact_ns"] == round(duration * 0.625)
    # Both findings share the kernel's time: together they gain at most all of it.
    assert sum(f["impact_ns"] for f in findings) <= round(duration)


# NCU004 ---------------------------------------------------------------------------------------------------

@rule_case("NCU004", "fires")
def test_ncu004_load_conflicts_fire_with_n_way(tmp_path):
    data = long_csv([DUR_10US, *raw(("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", "", "300"),
                                    ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", "", "1,000"),
                                    ("smsp__sass_inst_executed_op_shared_ld.sum", "inst", "250"),
                                    ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum", "", "50"),
                                    ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum", "", "1,000"),
                                    ("smsp__sass_inst_executed_op_shared_st.sum", "inst", "1,000"),
                                    ("l1tex__throughput.avg.pct_of_peak_sustained_active", "%", "50"))])
    findings, _ = run_rule(tmp_path, SharedBankConflicts, data)
    assert len(findings) == 1 and "loads" in findings[0]["title"]
    # The corpus kernel's name streams 8-byte elements (long long): 2 wavefronts per instruction carry them
    # without conflict, so 4.0 wavefronts per instruction is a 2-way conflict, not 4-way.
    assert "2-way" in findings[0]["message"] and "4 wavefronts per instruction" in findings[0]["message"]
    # min(300, 1000 - 500) = 30% of the wavefronts, but L1TEX at 50% is not a limiter: reported, saving nothing
    assert findings[0]["speedup_pct"] == 0.0 and "not a limiter" in findings[0]["message"]
    busy = long_csv([DUR_10US, *raw(("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", "", "300"),
                                    ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", "", "1,000"),
                                    ("smsp__sass_inst_executed_op_shared_ld.sum", "inst", "250"),
                                    ("l1tex__throughput.avg.pct_of_peak_sustained_active", "%", "80"))])
    (tmp_path / "busy").mkdir()
    findings, _ = run_rule(tmp_path / "busy", SharedBankConflicts, busy)
    assert findings[0]["speedup_pct"] == pytest.approx(24.0)  # 30% x 80% L1TEX: a limiter now


@rule_case("NCU004", "silent")
def test_ncu004_silent_on_corpus_export_without_conflicts(tmp_path):
    findings, result = run_rule(tmp_path, SharedBankConflicts,
                                corpus_file("conv2d-shared-memory.csv").read_bytes())
    assert result.status == "ok" and findings == []


# NCU005 ---------------------------------------------------------------------------------------------------

def sol(sm, mem, *extra):
    return [DUR_10US, (SOL, "Compute (SM) Throughput", "%", sm), (SOL, "Memory Throughput", "%", mem), *extra]


@pytest.mark.parametrize(("rows", "title", "speedup"), [
    # No warp-stall metrics: the memory story cannot tell memory latency from other limits, nor does NCU005.
    (sol("20", "30", ("Launch Statistics", "Waves Per SM", "", "4")), "No unit near its peak", 70.0),
    (sol("20", "30", ("Launch Statistics", "Waves Per SM", "", "0.5")), "Grid too small to fill the GPU", 70.0),
    (sol("20", "70", (SOL, "DRAM Throughput", "%", "70"), (SOL, "L2 Cache Throughput", "%", "30"),
         (SOL, "L1/TEX Cache Throughput", "%", "20")), "Memory-bound kernel (DRAM)", 30.0),
    (sol("20", "70", (SOL, "DRAM Throughput", "%", "10"), (SOL, "L2 Cache Throughput", "%", "69")),
     "Memory-bound kernel (L2)", 30.0),
    (sol("75", "30"), "Compute-bound kernel", 25.0),
])
@rule_case("NCU005", "fires")
def test_ncu005_classification_fires(tmp_path, rows, title, speedup):
    findings, _ = run_rule(tmp_path, ThroughputBottleneck, long_csv(rows))
    assert len(findings) == 1 and findings[0]["title"].split(":")[0] == title
    assert findings[0]["speedup_pct"] == pytest.approx(speedup)


@pytest.mark.parametrize(("sm", "mem"), [("85", "30"), ("65", "70")])
@rule_case("NCU005", "silent")
def test_ncu005_silent_at_roofline_or_balanced(tmp_path, sm, mem):
    findings, result = run_rule(tmp_path, ThroughputBottleneck, long_csv(sol(sm, mem)))
    assert result.status == "ok" and findings == []


def test_ncu005_launches_of_one_kernel_weighted_by_duration(tmp_path):
    rows = [(SOL, "Duration", "usecond", "{d}"), (SOL, "Compute (SM) Throughput", "%", "{sm}"),
            (SOL, "Memory Throughput", "%", "30")]
    parts = []
    for kid, dur, sm in (("0", "10", "20"), ("1", "30", "90")):
        parts.append(long_csv([(s, n, u, v.format(d=dur, sm=sm)) for s, n, u, v in rows], kernels=[{"ID": kid}]))
    data = parts[0] + b"".join(p.split(b"\n", 1)[1] for p in parts[1:])  # one header, two launches
    findings, _ = run_rule(tmp_path, ThroughputBottleneck, data)
    assert len(findings) == 1
    # launch 0: 10 us at 70% headroom; launch 1 (30 us) at the roofline counts 0 -> 7,000 / 40,000
    assert findings[0]["speedup_pct"] == pytest.approx(17.5)
    assert findings[0]["impact_ns"] == 7000 and findings[0]["impact_pct"] == pytest.approx(17.5)
    assert findings[0]["evidence"][0]["detail"]["launches_with_problem"] == 1


# NCU006 ---------------------------------------------------------------------------------------------------

def launch(block="256", grid="1,024", sms="40", waves="6.40"):
    return [DUR_10US, ("Launch Statistics", "Block Size", "", block), ("Launch Statistics", "Grid Size", "", grid),
            ("Launch Statistics", "# SMs", "SM", sms), ("Launch Statistics", "Waves Per SM", "", waves)]


@rule_case("NCU006", "fires")
def test_ncu006_block_size_not_multiple_of_32(tmp_path):
    findings, _ = run_rule(tmp_path, LaunchConfiguration, long_csv(launch(block="100")))
    assert len(findings) == 1 and findings[0]["speedup_pct"] == pytest.approx(100 / 4 * (1 - 4 / 32))


def test_ncu006_grid_smaller_than_sm_count(tmp_path):
    findings, _ = run_rule(tmp_path, LaunchConfiguration, long_csv(launch(grid="20", sms="80", waves="0.25")))
    assert len(findings) == 1 and findings[0]["speedup_pct"] == pytest.approx(75.0)


def test_ncu006_tail_effect(tmp_path):
    data = long_csv(launch(waves="1.5") + occupancy("100", "50"))
    findings, _ = run_rule(tmp_path, LaunchConfiguration, data)
    assert [f["title"].split(":")[0] for f in findings] == ["Tail effect"]
    assert findings[0]["speedup_pct"] == pytest.approx(50.0)


@rule_case("NCU006", "silent")
def test_ncu006_silent_on_corpus_export(tmp_path):
    findings, result = run_rule(tmp_path, LaunchConfiguration, corpus_file("numba-copy-blocked-full.csv").read_bytes())
    assert result.status == "ok" and findings == []


# NCU007 ---------------------------------------------------------------------------------------------------

@rule_case("NCU007", "fires")
def test_ncu007_matrix_kernel_without_tensor_cores(tmp_path):
    data = long_csv([DUR_10US, *raw(("sm__inst_executed_pipe_tensor.sum", "inst", "0"),
                                    ("sm__sass_thread_inst_executed_op_ffma_pred_on.sum", "inst", "1,000"),
                                    ("sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active", "%", "40"))],
                    kernels=[{"Kernel Name": "void my_sgemm_nn<float>(float const*, float*)"}])
    findings, _ = run_rule(tmp_path, PipeUtilization, data)
    assert len(findings) == 1 and findings[0]["speedup_pct"] == pytest.approx(20.0)


@rule_case("NCU007", "silent")
def test_ncu007_silent_for_non_matrix_kernel_and_with_tensor_use(tmp_path):
    fp = raw(("sm__inst_executed_pipe_tensor.sum", "inst", "0"),
             ("sm__sass_thread_inst_executed_op_ffma_pred_on.sum", "inst", "1,000"))
    findings, result = run_rule(tmp_path, PipeUtilization, long_csv([DUR_10US, *fp],
                                                                     kernels=[{"Kernel Name": "vector_add(float*)"}]))
    assert result.status == "ok" and findings == []
    findings, _ = run_rule(tmp_path, PipeUtilization, corpus_file(OLD_LAYOUT).read_bytes())  # 640 tensor inst
    assert findings == []


def test_ncu007_saturated_pipe(tmp_path):
    data = long_csv([DUR_10US, *raw(("sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active", "%", "91"),
                                    ("sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active", "%", "40"))])
    findings, _ = run_rule(tmp_path, PipeUtilization, data)
    assert [f["title"].split(":")[0] for f in findings] == ["Saturated alu pipe"]
    assert findings[0]["speedup_pct"] == 0 and findings[0]["impact_ns"] == 0


def test_ncu006_falls_back_to_ncu_verdict_when_sm_count_is_missing(tmp_path):
    # The 2022 export lacks '# SMs', so the grid check cannot run; ncu's own LaunchConfiguration warning stands in.
    findings, result = run_rule(tmp_path, LaunchConfiguration, corpus_file(OLD_LAYOUT).read_bytes())
    assert result.status == "ok" and len(findings) == 1
    assert "108 multiprocessors" in findings[0]["message"] and findings[0]["speedup_pct"] == 0
    assert findings[0]["evidence"][0]["detail"]["ncu_rule"] == "LaunchConfiguration"


def test_thresholds_are_overridable(tmp_path):
    out = tmp_path / "ncu.duckdb"
    ingest_ncu(write(tmp_path, long_csv([DUR_10US, *occupancy("50", "45")])), out)
    registry = Registry(NCU_RULES)
    with Run.open([out]) as run:
        findings, _ = run_rules(run, registry, [Occupancy], {"NCU003.min_theoretical_pct": 40})
    assert findings == []


def test_all_rules_read_a_raw_page_export(tmp_path):
    from tests.analysis.ncu_builders import raw_csv

    units = {
        "gpu__time_duration.sum": "usecond", "sm__throughput.avg.pct_of_peak_sustained_elapsed": "%",
        "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": "%",
        "launch__waves_per_multiprocessor": "", "launch__block_size": "", "launch__grid_size": "",
        "device__attribute_multiprocessor_count": "", "sm__maximum_warps_per_active_cycle_pct": "%",
        "sm__warps_active.avg.pct_of_peak_sustained_active": "%", "launch__occupancy_limit_registers": "block",
        "launch__occupancy_limit_shared_mem": "block", "launch__occupancy_limit_warps": "block",
        "launch__occupancy_limit_blocks": "block", "smsp__issue_active.avg.per_cycle_active": "",
        "smsp__average_warp_latency_per_inst_issued.ratio": "cycle",
        "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio": "",
        "memory_l2_theoretical_sectors_global": "sector", "memory_l2_theoretical_sectors_global_ideal": "sector",
        "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": "",
        "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": "", "smsp__sass_inst_executed_op_shared_ld.sum": "inst",
        "sm__inst_executed_pipe_tensor.sum": "inst", "sm__sass_thread_inst_executed_op_ffma_pred_on.sum": "inst",
    }
    values = ["20", "40", "50", "8.5", "96", "2,048", "132", "50", "45", "5", "8", "21", "32", "0.4", "10", "6",
              "1,200", "1,000", "200", "400", "100", "0", "5,000"]
    data = raw_csv([{"ID": "0", "Kernel Name": "reduce_rows(float const*, float*)", **dict(zip(units, values,
                                                                                              strict=True))}], units)
    out = tmp_path / "ncu.duckdb"
    ingest_ncu(write(tmp_path, data), out)
    with Run.open([out]) as run:
        findings, results = run_rules(run, Registry(NCU_RULES))
    assert {r.rule_id: r.status for r in results} == {f"NCU00{i}": "ok" for i in range(1, 8)}
    got = {(f.rule_id, f.title.split(":")[0]): f.extra.speedup_pct for f in findings}
    assert got == {
        ("NCU001", "Uncoalesced global accesses"): pytest.approx(100 * 200 / 1200, abs=1e-3),  # no L2 cycles: local
        ("NCU002", "Warp stall 'barrier'"): pytest.approx(50.0),                    # 6/10 capped by 1 - 0.50
        ("NCU003", "Low theoretical occupancy"): pytest.approx(50.0),               # 1 - 0.50 (limiter: registers)
        ("NCU004", "Shared-memory bank conflicts on loads"): pytest.approx(50.0),   # 200/400, no L1 weight
        ("NCU005", "No unit near its peak"): pytest.approx(50.0),  # 1 - max(40, 50)%; barrier, not memory stalls
    }  # NCU006: 96 threads, 2,048 blocks, tail 1/9 < 20%; NCU007: not a matrix kernel -> silent
    assert "registers" in next(f.message for f in findings if f.rule_id == "NCU003")
    assert "4-way" in next(f.message for f in findings if f.rule_id == "NCU004")
