"""KRN002 with a linked ncu report: the measured math pipes decide where kernel names cannot (a generated
GEMM on the FP32 pipes is flagged) and where they mislead (a kernel named sgemm that ncu saw on the tensor pipe
is not). The nsys side is a real export with one kernel renamed; the ncu side is the real PyTorch sgemm report
of the corpus or a CSV in a real ncu layout. Impacts are recomputed from the raw export."""

from __future__ import annotations

import sqlite3

from analysis.api import analyze, ingest
from tests.analysis.declared_cases import observe_result, rule_case
from tests.analysis.ncu_builders import long_csv, write
from tests.analysis.planting import copy_export
from tests.conftest import corpus_file

NSYS = "tensorrt-3090.sqlite"
SGEMM_NCU = "pytorch-sgemm-small.csv"  # real: ampere_sgemm_32x32_sliced1x4_tn, 0 tensor inst, 65,536 FFMA
SGEMM = "ampere_sgemm_32x32_sliced1x4_tn"
ALL_TIME = {"KRN002.min_share_pct": 0, "KRN002.min_time_us": 0}
SECTION = "Command line profiler metrics"


def rename_longest_kernel(path, new_name: str) -> int:
    """Give the export's longest kernel (all its launches) a new name; returns their summed time."""
    con = sqlite3.connect(path)
    with con:
        (sid,) = con.execute('SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY "end" - start DESC '
                             "LIMIT 1").fetchone()
        con.execute("UPDATE StringIds SET value = ? WHERE id = ?", [new_name, sid])
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET shortName = ? WHERE demangledName = ?", [sid, sid])
        (total,) = con.execute('SELECT SUM("end" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE demangledName = ?',
                               [sid]).fetchone()
    con.close()
    return int(total)


def ncu_csv(tmp_path, name: str, tensor: str, ffma: str):
    data = long_csv([(SECTION, "sm__inst_executed_pipe_tensor.sum", "inst", tensor),
                     (SECTION, "sm__sass_thread_inst_executed_op_ffma_pred_on.sum", "inst", ffma),
                     (SECTION, "gpu__time_duration.sum", "nsecond", "10,000")],
                    kernels=[{"Kernel Name": name}])
    return write(tmp_path, data)


def run_pair(tmp_path, nsys_name: str, ncu_src) -> dict:
    src = copy_export(corpus_file(NSYS), tmp_path / "a.sqlite")
    total = rename_longest_kernel(src, nsys_name)
    ingest(src, tmp_path / "nsys.duckdb")
    ingest(ncu_src, tmp_path / "ncu.duckdb")
    result = analyze([tmp_path / "nsys.duckdb", tmp_path / "ncu.duckdb"], rules=["KRN002"], thresholds=ALL_TIME,
                     window="all").to_json()
    observe_result(result)
    return {"total": total, "result": result}


@rule_case("KRN002", "fires")
def test_generated_gemm_on_fp32_pipes_is_flagged(tmp_path) -> None:
    out = run_pair(tmp_path, "triton_tem_fused_mm_0", ncu_csv(tmp_path, "triton_tem_fused_mm_0", "0", "1,000"))
    (f,) = out["result"]["findings"]
    assert f["impact_ns"] == out["total"]
    v = f["ncu"]["triton_tem_fused_mm_0"]
    assert v["verdict"] == "fp32" and v["tensor_inst"] == 0 and v["fp32_inst"] == 1000 and not v["named_fp32"]


@rule_case("KRN002", "fires")
def test_real_ncu_report_confirms_the_named_sgemm(tmp_path) -> None:
    out = run_pair(tmp_path, SGEMM, corpus_file(SGEMM_NCU))
    (f,) = out["result"]["findings"]
    assert f["impact_ns"] == out["total"]
    v = f["ncu"][SGEMM]
    # The corpus CSV's own numbers for this kernel.
    assert (v["verdict"], v["tensor_inst"], v["fp32_inst"]) == ("fp32", 0, 65_536 + 8_192 + 6_144)
    assert v["named_fp32"] is True


@rule_case("KRN002", "silent")
def test_named_sgemm_measured_on_tensor_pipe_is_not_flagged(tmp_path) -> None:
    out = run_pair(tmp_path, SGEMM, ncu_csv(tmp_path, SGEMM, "4,096", "0"))
    assert out["result"]["findings"] == []


@rule_case("KRN002", "silent")
def test_fp32_pipes_without_a_matrix_name_are_not_flagged(tmp_path) -> None:
    """An elementwise kernel on the FP32 pipes has no tensor-core variant to switch to."""
    out = run_pair(tmp_path, "vector_scale_kernel", ncu_csv(tmp_path, "vector_scale_kernel", "0", "1,000"))
    assert out["result"]["findings"] == []


def test_without_ncu_the_named_sgemm_is_flagged(tmp_path) -> None:
    src = copy_export(corpus_file(NSYS), tmp_path / "a.sqlite")
    total = rename_longest_kernel(src, SGEMM)
    ingest(src, tmp_path / "nsys.duckdb")
    (f,) = analyze([tmp_path / "nsys.duckdb"], rules=["KRN002"], thresholds=ALL_TIME, window="all").to_json()["findings"]
    assert f["impact_ns"] == total and "ncu" not in f
