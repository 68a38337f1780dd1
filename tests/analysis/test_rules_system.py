"""The whole-system rules (issue #14) on planted variants of real exports, with numbers checked against
direct SQL on the raw export."""

from __future__ import annotations

import sqlite3

import pytest

from analysis.api import analyze
from analysis.rules.nsys.links import device_peaks
from tests.analysis import test_rules_planted as planted
from tests.analysis.planting import copy_export, ingested
from tests.analysis.rule_cases_system import PLANT_BYTES, PLANT_NS, SYSTEM_CASES
from tests.conftest import corpus_file


@pytest.mark.parametrize("case", SYSTEM_CASES, ids=[c.id for c in SYSTEM_CASES])
def test_system_case(case, tmp_path) -> None:
    planted.test_planted_case(case, tmp_path)


def _raw(short: str, sql: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{corpus_file(short)}?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_mem005_directions_match_raw_sql() -> None:
    """Bytes, counts, copy time and bandwidth per direction equal direct SQL on the raw export; the peak
    is the typical PCIe Gen4 x16 of a compute capability 8.9 GPU, since the export has no link record."""
    result = analyze([ingested(corpus_file("vecadd-2026.sqlite"))], rules=["MEM005"], window="all").to_json()
    (f,) = result["findings"]
    raw = {k: (n, b, t) for k, n, b, t in _raw("vecadd-2026.sqlite", """
        SELECT copyKind, COUNT(*), SUM(bytes), SUM("end" - start) FROM CUPTI_ACTIVITY_KIND_MEMCPY GROUP BY 1""")}
    assert set(f["directions"]) == {"HtoD", "DtoH"}
    for name, kind in (("HtoD", 1), ("DtoH", 2)):
        d = f["directions"][name]
        n, b, t = raw[kind]
        assert (d["count"], d["bytes"], d["time_ns"]) == (n, b, t)
        assert d["gbps"] == pytest.approx(b / t, abs=1e-3)
        assert d["peak_gbps"] == 31.5 and "PCIe Gen4" in d["peak_source"]
        assert d["bound"] == "bandwidth" and d["small_copies"] == 0
    cc = _raw("vecadd-2026.sqlite", "SELECT computeMajor, name FROM TARGET_INFO_GPU")[0]
    assert cc == (8, "NVIDIA GeForce RTX 4060 Ti")
    assert f["main_direction"] == "HtoD"
    # Copies at 41% of the link's peak: the advice is about the link, not about moving fewer bytes.
    assert "nvidia-smi" in f["advice"]


def test_mem005_planted_copy_is_evidence(tmp_path) -> None:
    from tests.analysis.rule_cases_system import mem005_fires

    case = next(c for c in SYSTEM_CASES if c.plant is mem005_fires)
    _, result = planted._run(case, tmp_path)
    (f,) = [x for x in result["findings"] if x["rule_id"] == "MEM005"]
    top = f["evidence"][0]
    assert top["name"] == "HtoD" and top["value_ns"] == PLANT_NS and top["detail"]["bytes"] == PLANT_BYTES
    assert f["directions"]["HtoD"]["bytes"] >= PLANT_BYTES
    # The 3090's device memory bandwidth comes from the export: DtoD copies are held against half of it.
    bw = _raw("tensorrt-3090.sqlite", "SELECT DISTINCT memoryBandwidth FROM TARGET_INFO_GPU")[0][0]
    assert f["directions"]["DtoD"]["peak_gbps"] == pytest.approx(bw / 1e9 / 2)


def test_mem005_skipped_without_copies(tmp_path) -> None:
    src = copy_export(corpus_file("tensorrt-3090.sqlite"), tmp_path / "a.sqlite")
    con = sqlite3.connect(src)
    with con:
        con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_MEMCPY")
    con.close()
    from analysis.api import ingest

    ingest(src, tmp_path / "a.duckdb")
    (status,) = analyze([tmp_path / "a.duckdb"], rules=["MEM005"], window="all").to_json()["rules"]
    assert status["status"] == "skipped" and "--trace=cuda" in status["reason"]


@pytest.mark.parametrize(("name", "cc", "expected"), [
    ("NVIDIA H200", 9, 63.0), ("NVIDIA A100-SXM4-40GB", 8, 31.5), ("Tesla T4", 7, 15.75),
    ("NVIDIA GH200 480GB", 9, 450.0), ("Orin", 8, None), ("Quadro", None, None)])
def test_link_peaks(name, cc, expected) -> None:
    assert device_peaks(name, cc, 0, None).host_gbps == expected
    assert device_peaks(name, cc, 0, 2_000_000_000_000, host_link_gbps=12.0).host_gbps == 12.0


def test_krn003_names_the_planted_instances(tmp_path) -> None:
    from tests.analysis.rule_cases_system import krn003_fires

    case = next(c for c in SYSTEM_CASES if c.plant is krn003_fires)
    _, result = planted._run(case, tmp_path)
    (f,) = [x for x in result["findings"] if x["rule_id"] == "KRN003"]
    (shape,) = f["shapes"]
    # The loop alternates two kernels (500 each); every tenth launch is always the same one.
    assert shape["outliers"] == 5 and shape["count"] == 500 and not shape["unstable"]
    assert all(e["detail"]["outlier"] for e in f["evidence"]) and len(f["evidence"]) == 5
    for e in f["evidence"]:  # each planted instance lasts ten times its original length, about the median
        assert e["value_ns"] == e["detail"]["duration_ns"] - shape["median_ns"]
    # Dominance from the planted file itself (the other kernel of the loop is the longer one).
    con = sqlite3.connect(tmp_path / "a.sqlite")
    per_name = dict(con.execute('SELECT s.value, SUM(k."end" - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k '
                                "JOIN StringIds s ON s.id = k.demangledName GROUP BY 1").fetchall())
    con.close()
    name = max(per_name, key=per_name.get)
    assert f["dominant_kernel"]["name"] == name
    assert f["dominant_kernel"]["share_pct"] == round(100 * per_name[name] / sum(per_name.values()), 3)


def test_host001_takes_the_gap_from_gpu001(tmp_path) -> None:
    from tests.analysis.rule_cases_system import host001_fires

    case = next(c for c in SYSTEM_CASES if c.plant is host001_fires)
    expected, result = planted._run(case, tmp_path)
    (f,) = [x for x in result["findings"] if x["rule_id"] == "HOST001"]
    assert f["by_call"]["read"] == expected  # the read covers the gap, clipped to it
    # Beside it, the export's own calls on that thread during the gap (a few short ones, an ioctl).
    assert f["by_class"]["file_io"] >= expected and f["main_class"] == "file_io"
    assert f["file_io_pct"] == pytest.approx(100 * f["by_class"]["file_io"] / f["os_call_ns"], abs=1e-3)
    (e,) = f["evidence"]
    assert e["name"] == "read" and e["value_ns"] == expected and e["detail"]["class"] == "file_io"
    assert "read data ahead" in f["advice"]
    # One owner per idle nanosecond: the gap is not also among GPU001's.
    gpu = [x for x in result["findings"] if x["rule_id"] == "GPU001"]
    assert all(ev["start_ns"] != e["start_ns"] for x in gpu for ev in x["evidence"])


def test_host001_skipped_without_osrt() -> None:
    (status,) = analyze([ingested(corpus_file("tensorrt-3090.sqlite"))], rules=["HOST001"], window="all").to_json()["rules"]
    assert status["status"] == "skipped" and "--trace=cuda,osrt" in status["reason"]


def test_host001_real_writes_on_the_launching_thread() -> None:
    """The stdpar mini-app writes its output with pwrite64 from the thread that launches its kernels."""
    result = analyze([ingested(corpus_file("stdpar-um-gpu.sqlite"))], rules=["GPU", "HOST001"], window="all").to_json()
    (f,) = [x for x in result["findings"] if x["rule_id"] == "HOST001"]
    assert max(f["by_call"], key=f["by_call"].get) == "pwrite64" and f["main_class"] == "file_io"
    assert "file writes" in f["advice"]
    (g,) = [x for x in result["findings"] if x["rule_id"] == "GPU001"]
    assert "os_runtime" not in g["causes"]


def test_krn002_advice_follows_the_gpu() -> None:
    """Turing (7.5) has FP16 tensor cores but no TF32: the advice says so; Ampere gets TF32 first."""
    result = analyze([ingested(corpus_file("pytorch-dlprof-relu.sqlite"))], rules=["KRN002"],
                     thresholds={"KRN002.min_time_us": 0}).to_json()
    (f,) = result["findings"]
    assert "no TF32" in f["advice"]
    assert any("implicit_convolve_sgemm" in n for n in f["by_name"])
    assert not any("fft" in n or "im2col" in n or "gcgemm" in n for n in f["by_name"])


def test_krn002_kernels_are_not_krn003s(tmp_path) -> None:
    """A kernel KRN002 flags is left out of KRN003's shapes (one owner per kernel)."""
    from tests.analysis.rule_cases_system import krn002_fires

    case = next(c for c in SYSTEM_CASES if c.plant is krn002_fires)
    _, result = planted._run(case, tmp_path)
    shapes = [s["name"] for f in result["findings"] if f["rule_id"] == "KRN003" for s in f["shapes"]]
    assert "ampere_sgemm_128x64_nn" not in shapes


def test_comm004_owns_what_comm001_would_count(tmp_path) -> None:
    """The serialized collective's exposed time is COMM004's alone; on its own stream it is COMM001's."""
    from tests.analysis.rule_cases_system import comm004_fires, comm004_own_stream

    for plant, owner in ((comm004_fires, "COMM004"), (comm004_own_stream, "COMM001")):
        case = next(c for c in SYSTEM_CASES if c.plant is plant)
        case = type(case)(case.rule, case.corpus, case.plant, thresholds={"COMM001.min_exposed_pct": 0})
        (tmp_path / owner).mkdir()
        _, result = planted._run(case, tmp_path / owner)
        comm = {f["rule_id"]: f["impact_ns"] for f in result["findings"] if f["rule_id"] in ("COMM001", "COMM004")}
        assert list(comm) == [owner], comm
        assert comm[owner] == result["reports"][0]["breakdown"]["comm_exposed_ns"]


def test_system_rules_on_sparse_rows(tmp_path) -> None:
    """NULL pids, devices, streams, bytes and grids (older exports leave them out): no rule errors, and the
    copy-only device is copy-bound."""
    from tests.analysis.planting import kernel, normalized

    ms = 1_000_000
    ks = [kernel(i * ms, i * ms + ms // 2, pid=None, device=None, name="k") for i in range(30)]
    ks += [kernel(40 * ms, 41 * ms, stream=None, name="ncclDevKernel_AllReduce_Sum_f32_RING_LL", category="nccl")]
    copies = [{"pid": None, "device": None, "start_ns": 50 * ms, "end_ns": 60 * ms, "copy_kind": "HtoD",
               "bytes": None, "src_kind": "pinned", "dst_kind": "device"}]
    path = normalized(tmp_path / "r.duckdb", kernels=ks, memcpy=copies,
                      osrt=[{"pid": 1, "tid": 1, "start_ns": 0, "end_ns": ms, "name": "read"}])
    result = analyze([path], rules=["MEM005", "KRN002", "KRN003", "HOST001", "COMM004"], window="all").to_json()
    assert [r for r in result["rules"] if r["status"] == "error"] == []
    (f,) = [x for x in result["findings"] if x["rule_id"] == "MEM005"]
    assert f["directions"]["HtoD"]["bytes"] == 0 and f["directions"]["HtoD"]["gbps"] == 0.0
    assert f["devices"][0]["memory_only_ns"] == 10 * ms
