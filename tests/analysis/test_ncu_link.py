"""An nsys + ncu pair of one run: ncu speedups applied to the kernel's nsys GPU time, ranked with nsys findings."""

from __future__ import annotations

import sqlite3

import pytest

from analysis.api import analyze, ingest
from analysis.diagnosis.rules.base import Registry
from analysis.diagnosis.rules.ncu.ncu005_throughput import ThroughputBottleneck
from analysis.diagnosis.summary import report_info
from analysis.model.trace import Run, Trace
from tests.analysis.ncu_builders import long_csv, write
from tests.analysis.rule_runner import run_rules
from tests.conftest import corpus_file

NSYS = "vecadd-2026.sqlite"
SOL = "GPU Speed Of Light Throughput"
LATENCY_70 = [(SOL, "Duration", "msecond", "1"), (SOL, "Compute (SM) Throughput", "%", "20"),
              (SOL, "Memory Throughput", "%", "30")]


def nsys_kernels() -> dict[str, tuple[int, int, int, int]]:
    """Demangled name -> (total ns, launches, gridX, blockX), straight from the corpus SQLite file."""
    con = sqlite3.connect(f"file:{corpus_file(NSYS)}?mode=ro", uri=True)
    rows = con.execute("SELECT s.value, sum(k.end - k.start), count(*), min(k.gridX), min(k.blockX) "
                       "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName "
                       "GROUP BY s.value").fetchall()
    con.close()
    return {r[0]: r[1:] for r in rows}


@pytest.fixture(scope="module")
def nsys_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("nsys") / "nsys.duckdb"
    ingest(corpus_file(NSYS), out)
    trace = Trace(out, NSYS)
    span = report_info(trace)["span_ns"]
    trace.close()
    return out, span


def run_pair(tmp_path, nsys_report, kernel: dict):
    ncu = tmp_path / "ncu.duckdb"
    ingest(write(tmp_path, long_csv(LATENCY_70, kernels=[kernel])), ncu)
    with Run.open([ncu, nsys_report[0]], ["ncu.csv", NSYS]) as run:
        findings, _ = run_rules(run, Registry([ThroughputBottleneck]))
    assert len(findings) == 1
    return findings[0].to_dict()


def test_linked_by_demangled_name_grid_and_block(tmp_path, nsys_report):
    (name, (total, launches, grid, block)), = nsys_kernels().items()
    f = run_pair(tmp_path, nsys_report, {"Kernel Name": name, "Block Size": f"({block}, 1, 1)",
                                         "Grid Size": f"({grid}, 1, 1)"})
    assert f["linked_to_nsys"] is True and f["speedup_pct"] == pytest.approx(70.0)
    assert f["impact_ns"] == round(total * 0.7)
    assert f["impact_pct"] == pytest.approx(100 * total * 0.7 / nsys_report[1], abs=1e-3)
    detail = f["evidence"][0]["detail"]
    assert (detail["nsys_total_ns"], detail["nsys_launches"], detail["nsys_match"]) == (total, launches,
                                                                                       "name+grid+block")


def test_base_name_links_only_with_the_exact_grid_and_block(tmp_path, nsys_report):
    (name, (total, _, grid, block)), = nsys_kernels().items()
    base = name.split("(")[0].split()[-1]  # ncu exported base names: 'vectorAdd', no signature
    f = run_pair(tmp_path, nsys_report, {"Kernel Name": base, "Block Size": f"({block}, 1, 1)",
                                         "Grid Size": f"({grid}, 1, 1)"})
    assert f["linked_to_nsys"] is True and f["impact_ns"] == round(total * 0.7)
    assert f["nsys_match"] == f["evidence"][0]["detail"]["nsys_match"] == "short_name+grid+block"
    assert "linked by base name, grid and block" in f["message"]


def test_short_name_alone_never_links(tmp_path, nsys_report):
    (name, _), = nsys_kernels().items()
    base = name.split("(")[0].split()[-1]
    f = run_pair(tmp_path, nsys_report, {"Kernel Name": base, "Block Size": "(64, 1, 1)"})
    assert f["linked_to_nsys"] is False and f["nsys_match"] is None
    assert f["impact_ns"] == 700_000  # the profiled 1 ms x 70%, not the nsys time of another launch shape


def test_same_short_name_different_kernel_does_not_link(tmp_path, nsys_report):
    """Another instantiation of the same function (same short name, other template argument and signature)
    with the very grid and block of the nsys kernel is a different kernel: no nsys weight."""
    (name, (_, _, grid, block)), = nsys_kernels().items()
    base = name.split("(")[0].split()[-1]
    other = f"void {base}<double>(double const*, double const*, double*, int)"
    assert other != name
    f = run_pair(tmp_path, nsys_report, {"Kernel Name": other, "Block Size": f"({block}, 1, 1)",
                                         "Grid Size": f"({grid}, 1, 1)"})
    assert f["linked_to_nsys"] is False and "nsys_total_ns" not in f["evidence"][0]["detail"]
    assert f["impact_ns"] == 700_000 and f["kernel_time_ns"] == 1_000_000


def test_same_name_other_launch_shape_does_not_link(tmp_path, nsys_report):
    (name, (_, _, grid, block)), = nsys_kernels().items()
    f = run_pair(tmp_path, nsys_report, {"Kernel Name": name, "Block Size": f"({block * 2}, 1, 1)",
                                         "Grid Size": f"({grid}, 1, 1)"})
    assert f["linked_to_nsys"] is False and f["impact_ns"] == 700_000


def test_unmatched_kernel_uses_profiled_duration(tmp_path, nsys_report):
    f = run_pair(tmp_path, nsys_report, {"Kernel Name": "other_kernel(int)"})
    assert f["linked_to_nsys"] is False
    assert f["impact_ns"] == 700_000 and f["impact_pct"] == pytest.approx(70.0)  # 1 ms profiled x 70%


def test_analyze_ranks_ncu_and_nsys_findings_together(tmp_path, nsys_report):
    (name, (total, _, grid, block)), = nsys_kernels().items()
    ncu = tmp_path / "ncu.duckdb"
    ingest(write(tmp_path, long_csv(LATENCY_70, kernels=[{"Kernel Name": name, "Block Size": f"({block}, 1, 1)",
                                                           "Grid Size": f"({grid}, 1, 1)"}])), ncu)
    # The whole nsys report, as nsys_kernels() reads it (the steady window would count less kernel time).
    result = analyze([ncu, nsys_report[0]], labels=["ncu.csv", NSYS], window="all").to_json()
    assert [r["tool"] for r in result["reports"]] == ["ncu", "nsys"]
    assert result["reports"][0]["counts"] == {"kernels": 1, "metrics": 3, "rule_results": 0}
    impacts = [f["impact_ns"] for f in result["findings"]]
    assert impacts == sorted(impacts, reverse=True)
    ncu_findings = [f for f in result["findings"] if f["rule_id"].startswith("NCU")]
    assert [f["rule_id"] for f in ncu_findings] == ["NCU005"]
    assert ncu_findings[0]["speedup_pct"] == pytest.approx(70.0) and ncu_findings[0]["impact_ns"] == round(total * 0.7)
    # The headline saving is drawn from the linked nsys time, as a share of the nsys report's span.
    saving = result["reports"][0]["estimated_saving"]
    assert saving["drawn_from"] == "nsys" and saving["ns"] == ncu_findings[0]["impact_ns"]
    assert saving["pct"] == pytest.approx(ncu_findings[0]["impact_pct"], abs=1e-3)  # findings round to 3 places
    kernel = result["reports"][0]["kernels"][0]
    # The profiled launch shows its own saving (1 ms x 70%), never the group's nsys-time saving under one launch.
    assert kernel["nsys_total_ns"] == total and kernel["estimated_saving_ns"] == 700_000 < saving["ns"]
    assert any(not f["rule_id"].startswith("NCU") for f in result["findings"])
    status = {r["id"]: r["status"] for r in result["rules"]}
    assert status["NCU005"] == "ok" and status["NCU002"] == "skipped"


def test_another_gpu_does_not_link(tmp_path, nsys_report):
    """Both reports name the GPU: a launch ncu profiled on GPU 5 is not the nsys kernel that ran on GPU 0."""
    (name, (total, _, grid, block)), = nsys_kernels().items()
    con = sqlite3.connect(f"file:{corpus_file(NSYS)}?mode=ro", uri=True)
    devices = {r[0] for r in con.execute("SELECT DISTINCT deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL")}
    con.close()
    assert devices == {0}
    shape = {"Kernel Name": name, "Block Size": f"({block}, 1, 1)", "Grid Size": f"({grid}, 1, 1)"}
    assert run_pair(tmp_path, nsys_report, {**shape, "Device": "0"})["impact_ns"] == round(total * 0.7)
    f = run_pair(tmp_path, nsys_report, {**shape, "Device": "5"})
    assert f["linked_to_nsys"] is False and f["impact_ns"] == 700_000


def test_ncu_verdict_weighs_the_kernel_by_its_nsys_time(tmp_path, nsys_report):
    """nsys + ncu: the ncu report's verdict speaks in the kernel's nsys time (its 4 launches there, not the one
    profiled), and the run's verdict stays the nsys report's."""
    (name, (total, _, grid, block)), = nsys_kernels().items()
    ncu = tmp_path / "ncu.duckdb"
    ingest(write(tmp_path, long_csv(LATENCY_70, kernels=[{"Kernel Name": name, "Block Size": f"({block}, 1, 1)",
                                                           "Grid Size": f"({grid}, 1, 1)"}])), ncu)
    result = analyze([ncu, nsys_report[0]], labels=["ncu.csv", NSYS], window="all").to_json()
    ncu_verdict, nsys_verdict = result["reports"][0]["verdict"], result["reports"][1]["verdict"]
    saving = result["reports"][0]["estimated_saving"]["ns"]
    assert ncu_verdict["impact_ns"] == saving == round(total * 0.7)
    assert f"{total / 1e6:,.2f} ms in nsys" in ncu_verdict["text"] and ncu_verdict["kind"].startswith("ncu_")
    assert result["verdict"] == nsys_verdict and not result["verdict"]["kind"].startswith("ncu_")
