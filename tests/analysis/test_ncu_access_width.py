"""NCU001 without ncu's bytes-per-sector metric: the access width from the SASS data bytes, else
from the element type in the kernel's name (the assumption stated), else only the 16-byte lower bound."""

from __future__ import annotations

import pytest

from analysis.diagnosis.ncu.access_width import ELEMENT_BYTES, element_types
from analysis.diagnosis.rules.ncu.ncu001_uncoalesced import UncoalescedGlobalAccess
from tests.analysis.ncu_builders import OLD_LAYOUT, long_csv, read_corpus_csv
from tests.analysis.test_ncu_rules import DUR_10US, raw, run_rule
from tests.conftest import NCU_FILES

# 8 sectors per load request: half of them waste for 4-byte elements, none for 8-byte ones.
LOADS_8 = raw(("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "sector", "800"),
              ("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "request", "100"))


def _loads(findings):
    return [f for f in findings if f["title"].startswith("Uncoalesced global loads")]


def test_float_kernel_with_8_sectors_per_request_is_flagged_with_its_assumption(tmp_path):
    data = long_csv([DUR_10US, *LOADS_8], kernels=[{"Kernel Name": "void scale<float>(float*, float const*, int)"}])
    findings, result = run_rule(tmp_path, UncoalescedGlobalAccess, data)
    (f,) = _loads(findings)
    assert result.status == "ok"
    # 32 threads x 4 bytes = 128 bytes = 4 sectors carry the data; 8 were moved.
    assert f["speedup_pct"] == pytest.approx(50.0)
    assert "assuming 4-byte accesses (the element type float in the kernel's name)" in f["message"]
    detail = f["evidence"][0]["detail"]
    assert detail["width_source"] == "name" and detail["ideal_sectors_per_request"] == pytest.approx(4.0)


def test_double_kernel_with_8_sectors_per_request_is_coalesced(tmp_path):
    data = long_csv([DUR_10US, *LOADS_8], kernels=[{"Kernel Name": "void scale<double>(double*, int)"}])
    findings, result = run_rule(tmp_path, UncoalescedGlobalAccess, data)
    assert result.status == "ok" and _loads(findings) == []


def test_sass_data_bytes_give_the_exact_width_without_assumption(tmp_path):
    # 100 requests asked for 6,400 bytes: 64 bytes = 2 sectors each; 8 moved -> 75%, whatever the name says.
    data = long_csv([DUR_10US, *LOADS_8, *raw(("smsp__sass_data_bytes_mem_global_op_ld.sum", "byte", "6,400"))],
                    kernels=[{"Kernel Name": "void scale<double>(double*, int)"}])
    (f,) = _loads(run_rule(tmp_path, UncoalescedGlobalAccess, data)[0])
    assert f["speedup_pct"] == pytest.approx(75.0)
    assert f["evidence"][0]["detail"]["width_source"] == "sass_bytes" and "assuming" not in f["message"]


def test_old_corpus_layout_infers_float_from_the_real_kernel_name(tmp_path):
    # conv2d-result-rules' kernel: implicit_convolve_sgemm<float, float, (int)128, ...>(int, int, int, const T
    data = long_csv([DUR_10US, *LOADS_8], layout=OLD_LAYOUT)
    (f,) = _loads(run_rule(tmp_path, UncoalescedGlobalAccess, data)[0])
    assert f["speedup_pct"] == pytest.approx(50.0) and "element type float" in f["message"]


def test_no_inference_keeps_the_rule_silent_below_the_widest_access(tmp_path):
    name = {"Kernel Name": "ampere_sgemm_32x32_sliced1x4_tn"}  # a real cuBLAS name with no element type in it
    findings, result = run_rule(tmp_path, UncoalescedGlobalAccess, long_csv([DUR_10US, *LOADS_8], kernels=[name]))
    assert result.status == "ok" and findings == []
    loads_32 = raw(("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "sector", "3,200"),
                   ("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "request", "100"))
    (tmp_path / "wide").mkdir()
    (f,) = _loads(run_rule(tmp_path / "wide", UncoalescedGlobalAccess, long_csv([DUR_10US, *loads_32], kernels=[name]))[0])
    assert f["speedup_pct"] == pytest.approx(50.0) and "at least" in f["message"]
    assert f["evidence"][0]["detail"]["width_source"] == "widest_access"


def test_element_types_of_the_real_corpus_kernel_names():
    names = {row["Kernel Name"] for path in NCU_FILES for row in read_corpus_csv(path).rows}

    def widest(part: str) -> str | None:
        (name,) = {n for n in names if part in n}
        return max(element_types(name), key=ELEMENT_BYTES.__getitem__, default=None)

    assert widest("implicit_convolve_sgemm") == "float"
    assert widest("fused_dropout_kernel_vec") == "double"  # not its index type, unsigned int
    assert widest("splitKreduce_kernel") == "float"
    assert widest("copy_blocked") == "long long"  # numba's Array<long long, ...>
    assert widest("ampere_sgemm_32x32_sliced1x4_tn") is None


def test_casts_and_scalar_parameters_are_not_element_types():
    assert element_types("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<(unsigned long)4096>)") == []
    assert element_types("saxpy(int, float, float*, unsigned long)") == ["float"]
    assert element_types("k(float const * __restrict__, double, __half2*)") == ["float", "__half2"]
