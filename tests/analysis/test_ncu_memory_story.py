"""The per-kernel memory story on every corpus ncu CSV, each number checked against the CSV cells parsed independently."""

from __future__ import annotations

from collections import defaultdict

import pytest

from analysis.api import analyze
from analysis.diagnosis.ncu.hardware import LATENCY_CYCLES
from analysis.readers.ncu.ingest import ingest_ncu
from tests.analysis.ncu_builders import read_corpus_csv
from tests.conftest import corpus_file

CORPUS = ["numba-copy-blocked-full.csv", "conv2d-result-rules.csv", "conv2d-shared-memory.csv",
          "pytorch-dropout-dram.csv", "pytorch-sgemm-small.csv"]


def num(text: str) -> float:
    return float(text.replace(",", ""))


def cells(short: str) -> dict[str, dict[str, str]]:
    """ID -> {metric name (raw, or 'Section/Display') -> value text} straight from the csv module."""
    out: dict[str, dict[str, str]] = defaultdict(dict)
    for row in read_corpus_csv(corpus_file(short)).rows:
        if row.get("Metric Name"):
            out[row["ID"]].setdefault(row["Metric Name"], row["Metric Value"])
            out[row["ID"]].setdefault(f"{row['Section Name']}/{row['Metric Name']}", row["Metric Value"])
    return out


@pytest.fixture(scope="module")
def stories(tmp_path_factory):
    out = {}
    for short in CORPUS:
        db = tmp_path_factory.mktemp("ncu") / "r.duckdb"
        ingest_ncu(corpus_file(short), db)
        result = analyze([db], labels=[short]).to_json()
        out[short] = {str(k["kernel_id"]): k for k in result["reports"][0]["kernels"]}
    return out


def level(kernel: dict, name: str) -> dict:
    return next(lv for lv in kernel["memory"]["levels"] if lv["name"] == name)


@pytest.mark.parametrize("short", CORPUS)
def test_one_entry_per_profiled_launch(stories, short):
    assert sorted(stories[short], key=int) == sorted(cells(short), key=int)
    for k in stories[short].values():
        assert set(k["memory"]) >= {"levels", "sectors_per_request", "bound", "roofline"}
        assert k["memory"]["bound"]["kind"] in ("latency", "bandwidth", "compute", "unknown")


@pytest.mark.parametrize("short", ["conv2d-result-rules.csv", "pytorch-dropout-dram.csv", "pytorch-sgemm-small.csv"])
def test_levels_and_roofline_equal_the_csv_cells(stories, short):
    for kid, c in cells(short).items():
        k = stories[short][kid]
        if "gpu__time_duration.sum" in c:
            seconds = num(c["gpu__time_duration.sum"]) * 1e-9
        else:  # the 2022 conv2d export: elapsed SM cycles / SM clock
            seconds = num(c["sm__cycles_elapsed.avg"]) / num(c["sm__cycles_elapsed.avg.per_second"])
        for name, metric, pct in (("dram", "dram__bytes.sum", "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"),
                                  ("l2", "lts__t_bytes.sum", "lts__throughput.avg.pct_of_peak_sustained_elapsed"),
                                  ("l1", "l1tex__t_bytes.sum", "l1tex__throughput.avg.pct_of_peak_sustained_elapsed")):
            lv = level(k, name)
            assert lv["bytes"] == num(c[metric])
            assert lv["throughput_bps"] == pytest.approx(num(c[metric]) / seconds, rel=1e-9)
            if pct in c:
                assert lv["pct_of_peak"] == num(c[pct])
                if num(c[pct]) > 0:  # ncu's peak: achieved / share
                    assert lv["peak_source"] == "implied"
                    assert lv["peak_bps"] == pytest.approx(num(c[metric]) / seconds / (num(c[pct]) / 100), rel=1e-9)
        op = {o: num(c[f"sm__sass_thread_inst_executed_op_{o}_pred_on.sum"]) for o in
              ("dadd", "dmul", "dfma", "fadd", "fmul", "ffma", "hadd", "hmul", "hfma")}
        flops = {"fp64": op["dadd"] + op["dmul"] + 2 * op["dfma"], "fp32": op["fadd"] + op["fmul"] + 2 * op["ffma"],
                 "fp16": 2 * op["hadd"] + 2 * op["hmul"] + 4 * op["hfma"]}
        roof = k["memory"]["roofline"]
        assert roof["flops"] == flops
        total = sum(flops.values())
        assert roof["achieved_flops"] == pytest.approx(total / seconds, rel=1e-9)
        assert roof["intensity_dram"] == pytest.approx(total / num(c["dram__bytes.sum"]), rel=1e-12)
        assert roof["intensity_l2"] == pytest.approx(total / num(c["lts__t_bytes.sum"]), rel=1e-12)
        assert roof["precision"] == max(flops, key=flops.get)
        # No compute peak in these exports (no CC, no device): the lowest bandwidth roof bounds the kernel.
        assert roof["compute_peak_known"] is False
        mem_roofs = {}
        for name in ("dram", "l2"):
            lv = level(k, name)
            if lv["peak_bps"]:
                mem_roofs[name] = total / lv["bytes"] * lv["peak_bps"]
        assert roof["roof"] == min(mem_roofs, key=mem_roofs.get)
        assert roof["attainable_flops"] == pytest.approx(min(mem_roofs.values()), rel=1e-9)


def test_numba_copy_story_from_section_display_names(stories):
    c = cells("numba-copy-blocked-full.csv")["0"]
    k = stories["numba-copy-blocked-full.csv"]["0"]
    seconds = num(c["GPU Speed Of Light Throughput/Duration"]) * 1e-9
    dram = level(k, "dram")
    rate = num(c["Memory Workload Analysis/Memory Throughput"])  # byte/s
    assert dram["throughput_bps"] == rate
    assert dram["bytes"] == pytest.approx(rate * seconds, rel=1e-12)
    assert dram["pct_of_peak"] == num(c["GPU Speed Of Light Throughput/DRAM Throughput"])
    assert dram["peak_bps"] == pytest.approx(rate / 0.6184, rel=1e-12)  # ~318 GB/s: a T4 at its DRAM clock
    assert level(k, "l1")["hit_rate_pct"] == num(c["Memory Workload Analysis/L1/TEX Hit Rate"])
    assert level(k, "l2")["hit_rate_pct"] == num(c["Memory Workload Analysis/L2 Hit Rate"])
    assert level(k, "l2")["pct_of_peak"] == num(c["GPU Speed Of Light Throughput/L2 Cache Throughput"])
    b = k["memory"]["bound"]
    assert b["kind"] == "bandwidth" and b["level"] == "dram"  # 61.84% >= 60%
    n = b["numbers"]
    # Little's law with the Turing DRAM latency (cycles at the measured SM clock) and ncu's DRAM peak
    sm_hz = num(c["GPU Speed Of Light Throughput/SM Frequency"])
    latency_s = LATENCY_CYCLES["7.5"]["dram"] / sm_hz
    assert n["bytes_in_flight_needed"] == pytest.approx(rate / 0.6184 * latency_s, rel=1e-9)
    assert n["bytes_in_flight"] == pytest.approx(rate * latency_s, rel=1e-9)
    warps = num(c["Occupancy/Achieved Active Warps Per SM"]) * num(c["Launch Statistics/# SMs"])
    assert n["resident_warps"] == pytest.approx(warps)
    assert n["requests_in_flight_per_warp"] == pytest.approx(rate * latency_s / warps / 128, rel=1e-9)
    assert k["memory"]["roofline"] is None  # no instruction counts in this export


def test_shared_memory_only_export_has_no_levels_and_says_what_to_collect(stories):
    k = stories["conv2d-shared-memory.csv"]["0"]
    assert k["memory"]["levels"] == [] and k["memory"]["bound"]["kind"] == "unknown"
    assert "--section MemoryWorkloadAnalysis" in k["memory"]["bound"]["reason"]
