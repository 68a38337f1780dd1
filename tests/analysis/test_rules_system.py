"""The whole-system rules on planted variants of real exports, with numbers checked against
direct SQL on the raw export."""

from __future__ import annotations

import sqlite3

import pytest

from analysis.api import analyze
from analysis.diagnosis.rules.nsys.links import device_peaks
from tests.analysis import test_rules_planted as planted
from tests.analysis.planting import copy_export, ingested
from tests.analysis.planting import corpus_rows as _raw
from tests.analysis.rule_cases_system import PLANT_BYTES, PLANT_NS, SYSTEM_CASES
from tests.conftest import corpus_file


@pytest.mark.parametrize("case", SYSTEM_CASES, ids=[c.id for c in SYSTEM_CASES])
def test_system_case(case, tmp_path) -> None:
    planted.test_planted_case(case, tmp_path)


def _case(plant):
    """The system case whose planting is ``plant``."""
    return next(c for c in SYSTEM_CASES if c.plant is plant)


def _only(result: dict, rule_id: str) -> dict:
    """The one finding of ``rule_id`` in an analysis' JSON (the test fails on none or several)."""
    (f,) = [x for x in result["findings"] if x["rule_id"] == rule_id]
    return f


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

    _, result = planted._run(_case(mem005_fires), tmp_path)
    f = _only(result, "MEM005")
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

    _, result = planted._run(_case(krn003_fires), tmp_path)
    f = _only(result, "KRN003")
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


def test_host001_takes_the_idle_inside_os_calls_from_gpu001(tmp_path) -> None:
    from tests.analysis.rule_cases import DELTA
    from tests.analysis.rule_cases_system import host001_fires

    expected, result = planted._run(_case(host001_fires), tmp_path)
    f = _only(result, "HOST001")
    # The read covers the planted 50 ms of the gap and the CUDA calls the gap held before; HOST001 owns the idle
    # inside OS calls outside CUDA calls, here and in the export's other gaps (a few reads, tens of microseconds).
    assert f["impact_ns"] == expected and sum(f["by_category"].values()) == expected
    assert DELTA < f["by_call"]["read"] <= expected and f["names"][0]["name"] == "read"
    assert f["by_class"]["file_io"] >= f["by_call"]["read"] and f["main_class"] == "file_io"
    assert f["file_io_pct"] == pytest.approx(100 * f["by_class"]["file_io"] / f["os_call_ns"], abs=1e-3)
    # Where: the planted gap, the longest whose launching thread sat mostly in OS calls, with the read.
    e = f["evidence"][0]
    assert e["name"] == "read" and e["detail"]["class"] == "file_io" and e["value_ns"] > DELTA
    assert "read data ahead" in f["advice"]
    # GPU001 keeps only the rest of that gap (the instants inside the CUDA calls it held), as an OS-runtime gap.
    gpu = _only(result, "GPU001")
    assert all(ev["detail"]["cause"] == "os_runtime" for ev in gpu["evidence"] if ev["start_ns"] == e["start_ns"])
    assert gpu["causes"]["os_runtime"]["total_ns"] < e["value_ns"] - DELTA


def test_host001_skipped_without_osrt() -> None:
    # cudf-groupby-2020: neither the OS runtime trace nor the scheduler's events.
    (status,) = analyze([ingested(corpus_file("cudf-groupby-2020.sqlite"))], rules=["HOST001"], window="all").to_json()["rules"]
    assert status["status"] == "skipped" and "--trace=cuda,osrt" in status["reason"]


def test_host001_real_writes_on_the_launching_thread() -> None:
    """The stdpar mini-app writes its output with pwrite64 from the thread that launches its kernels."""
    result = analyze([ingested(corpus_file("stdpar-um-gpu.sqlite"))], rules=["GPU", "HOST001"], window="all").to_json()
    f = _only(result, "HOST001")
    assert max(f["by_call"], key=f["by_call"].get) == "pwrite64" and f["main_class"] == "file_io"
    assert "file writes" in f["advice"]
    # GPU001 keeps of the gaps the writes mostly cover only what is outside them (CUDA calls, nothing recorded).
    g = _only(result, "GPU001")
    assert g["causes"]["os_runtime"]["total_ns"] < f["impact_ns"] / 10


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

    _, result = planted._run(_case(krn002_fires), tmp_path)
    shapes = [s["name"] for f in result["findings"] if f["rule_id"] == "KRN003" for s in f["shapes"]]
    assert "ampere_sgemm_128x64_nn" not in shapes


def test_comm004_owns_what_comm001_would_count(tmp_path) -> None:
    """The serialized collective's exposed time is COMM004's alone; on its own stream it is COMM001's."""
    from tests.analysis.rule_cases_system import comm004_fires, comm004_own_stream

    for plant, owner in ((comm004_fires, "COMM004"), (comm004_own_stream, "COMM001")):
        case = _case(plant)
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
    f = _only(result, "MEM005")
    assert f["directions"]["HtoD"]["bytes"] == 0 and f["directions"]["HtoD"]["gbps"] == 0.0
    assert f["devices"][0]["memory_only_ns"] == 10 * ms


# ----------------------------------------------------------------------------- COMM003

def _comm003(paths, **thresholds) -> dict:
    return analyze(paths, rules=["COMM003"], window="all",
                   thresholds={f"COMM003.{k}": v for k, v in thresholds.items()}).to_json()


RAW_NCCL = """SELECT k.globalPid / 16777216 % 16777216, k.deviceId, COUNT(*), SUM(k."end" - k.start),
                     MAX(k."end" - k.start)
              FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName
              WHERE s.value LIKE 'nccl%' GROUP BY 1, 2"""


def test_comm003_by_kernel_without_sizes_matches_raw_sql() -> None:
    """The NCCL exports of the corpus have payload schemas but no payload values: COMM003 lists the collectives
    by kernel (count, time, longest per process and GPU, equal to direct SQL), costs nothing and says how to
    get the sizes."""
    result = _comm003([ingested(corpus_file("torchrun-2gpu-nccl-sendrecv-before-cropped.sqlite"))])
    (status,) = result["rules"]
    assert status["status"] == "ok" and status["findings"] == 1
    (f,) = result["findings"]
    assert (f["impact_ns"], f["severity"], f["sizes"]) == (0, "info", "by kernel")
    assert "--trace=cuda,nvtx" in f["advice"] and "--include-blobs" in f["advice"]
    raw = _raw("torchrun-2gpu-nccl-sendrecv-before-cropped.sqlite", RAW_NCCL)
    (g,) = f["groups"]
    assert g["op"] == "SendRecv" and (g["algorithm"], g["protocol"]) == (None, None)
    assert (g["count"], g["time_ns"]) == (sum(r[2] for r in raw), sum(r[3] for r in raw))
    assert sorted((e["pid"], e["device"], e["count"], e["time_ns"], e["max_ns"]) for e in g["ranks"]) == sorted(raw)
    assert f["evidence"][0]["value_ns"] == max(r[4] for r in raw) == g["max_ns"]
    # No NCCL at all: nothing to list, not a skip.
    (status,) = _comm003([ingested(corpus_file("vecadd-2026.sqlite"))])["rules"]
    assert status["status"] == "ok" and status["findings"] == 0


def test_comm003_by_kernel_compares_the_ranks_of_a_run() -> None:
    """Both ranks of the two-node NCCL job: each rank's finding lists the AllReduce RING LL of every rank of
    the run, each equal to direct SQL on that rank's export (the run step reads the reports' facts)."""
    shorts = ("nccl-ring-2node-r0-ault43.sqlite", "nccl-ring-2node-r1-ault44.sqlite")
    result = _comm003([ingested(corpus_file(s)) for s in shorts])
    # The run says COMM003 once (each rank in per_rank); each report keeps its own finding.
    (run_wide,) = result["findings"]
    assert {r["rank"] for r in run_wide["per_rank"]} == {0, 1}
    found = [f for rep in result["reports"] for f in rep["findings"]]
    assert len(found) == 2 and {f["rank"] for f in found} == {0, 1}
    expected = sorted((rank, *row[:4]) for rank, s in enumerate(shorts) for row in _raw(s, RAW_NCCL))
    for f in found:
        (g,) = f["groups"]
        assert (g["op"], g["algorithm"], g["protocol"]) == ("AllReduce", "RING", "LL")
        assert sorted((e["rank"], e["pid"], e["device"], e["count"], e["time_ns"]) for e in g["ranks"]) == expected
        own = [e for e in g["ranks"] if e["rank"] == f["rank"]]
        assert (g["count"], g["time_ns"]) == (sum(e["count"] for e in own), sum(e["time_ns"] for e in own))


def test_comm003_sizes_and_bandwidth_match_raw_sql(tmp_path) -> None:
    """Bytes, time and bus bandwidth of the planted AllReduce equal direct SQL on the raw export; n comes from
    the planted ncclCommInitRank payload (its 'No. of ranks' entry at offset 4)."""
    from tests.analysis.rule_cases_system import COMM003_RING, plant_nccl_sizes

    src = copy_export(corpus_file("nccl-ring-2node-r0-ault43.sqlite"), tmp_path / "a.sqlite")
    plant_nccl_sizes(src, COMM003_RING, nranks=2)
    from analysis.api import ingest

    ingest(src, tmp_path / "a.duckdb")
    (f,) = _comm003([tmp_path / "a.duckdb"], link_peak_gbps=25.0)["findings"]
    ((dur, name),) = _raw("nccl-ring-2node-r0-ault43.sqlite", """
        SELECT k."end" - k.start, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName""")
    (g,) = f["groups"]
    assert (g["op"], g["algorithm"], g["protocol"]) == ("AllReduce", "RING", "LL") and "RING_LL" in name
    assert (g["count"], g["bytes"], g["time_ns"]) == (1, 2 * 2**20, dur)
    # n = 2: busBw = algBw x 2(n-1)/n = algBw.
    assert g["alg_gbps"] == pytest.approx(2 * 2**20 / dur, abs=1e-6)
    assert g["bus_gbps"] == pytest.approx(2 * 2**20 / dur, abs=1e-6)
    assert f["ranks_n"] == 2 and "communicator-init" in f["ranks_source"]
    assert g["peak_gbps"] == 25.0 and g["efficiency_pct"] == pytest.approx(100 * 2 * 2**20 / dur / 25.0, abs=1e-3)
    assert f["evidence"][0]["detail"]["bytes"] == 2 * 2**20
    # Without a given peak: the 3090 (compute capability 8.6, no NVLink record) is held against PCIe Gen4.
    (f,) = _comm003([tmp_path / "a.duckdb"])["findings"]
    assert f["groups"][0]["peak_gbps"] == 31.5


def test_comm003_reads_json_payloads(tmp_path) -> None:
    """Fixture built from the documented schema, since no corpus export was exported with JSON payloads:
    jsonText holds the payload as an object keyed by the schema entries' names (NVTX_PAYLOAD_SCHEMA_ENTRIES.name),
    here 'Message size [bytes]' of NCCL's AllReduce schema and 'No. of ranks' of its comm-init schema."""
    import json

    src = copy_export(corpus_file("nccl-ring-2node-r0-ault43.sqlite"), tmp_path / "a.sqlite")
    con = sqlite3.connect(src)
    with con:
        for name, payload in (("ncclAllReduce", {"Message size [bytes]": 3 * 2**20, "Reduction operation": 0}),
                              ("ncclCommInitRank", {"Rank": 0, "No. of ranks": 4, "CUDA device": 0})):
            con.execute("""UPDATE NVTX_EVENTS SET jsonText = ? WHERE textId IN
                           (SELECT id FROM StringIds WHERE value = ?)""", [json.dumps(payload), name])
    con.close()
    import duckdb

    from analysis.api import ingest

    ingest(src, tmp_path / "a.duckdb")
    rows = duckdb.connect(str(tmp_path / "a.duckdb"), read_only=True).execute(
        "SELECT name, bytes, nranks FROM nccl_calls ORDER BY start_ns").fetchall()
    assert rows == [("ncclCommInitRank", None, 4), ("ncclAllReduce", 3 * 2**20, None)]
    (f,) = _comm003([tmp_path / "a.duckdb"], link_peak_gbps=25.0)["findings"]
    ((dur,),) = _raw("nccl-ring-2node-r0-ault43.sqlite", 'SELECT "end" - start FROM CUPTI_ACTIVITY_KIND_KERNEL')
    # n = 4: busBw = algBw x 2 x 3 / 4.
    assert f["groups"][0]["bus_gbps"] == pytest.approx(3 * 2**20 / dur * 1.5, abs=1e-6)


def test_comm003_garbage_payload_is_no_size(tmp_path) -> None:
    """A payload too short for the field, or JSON without it, gives no size (the collectives are listed by kernel,
    no bandwidth), and the ingest is fine."""
    src = copy_export(corpus_file("nccl-ring-2node-r0-ault43.sqlite"), tmp_path / "a.sqlite")
    con = sqlite3.connect(src)
    with con:
        con.execute("""UPDATE NVTX_EVENTS SET binaryData = ?, jsonText = '{"x": 1}' WHERE textId IN
                       (SELECT id FROM StringIds WHERE value = 'ncclAllReduce')""", [b"\xff\x00\x01"])
    con.close()
    from analysis.api import ingest

    ingest(src, tmp_path / "a.duckdb")
    result = _comm003([tmp_path / "a.duckdb"])
    assert [r["status"] for r in result["rules"]] == ["ok"]
    assert [f["sizes"] for f in result["findings"]] == ["by kernel"]


def test_comm003_in_a_window_keeps_the_communicator_size(tmp_path) -> None:
    """Seen through a window around the AllReduce kernel (the steady state of a real run excludes start-up),
    the call is still matched and n still comes from the ncclCommInitRank payload outside the window."""
    from analysis.diagnosis.rules.nsys.collectives import CollectiveBandwidth
    from analysis.diagnosis.rules.registry import default_registry
    from analysis.model.trace import Run, Trace
    from tests.analysis.rule_cases_system import COMM003_RING, plant_nccl_sizes
    from tests.analysis.rule_runner import run_rules

    src = copy_export(corpus_file("nccl-ring-2node-r0-ault43.sqlite"), tmp_path / "a.sqlite")
    plant_nccl_sizes(src, COMM003_RING, nranks=2)
    from analysis.api import ingest

    ingest(src, tmp_path / "a.duckdb")
    whole = Trace(tmp_path / "a.duckdb", "a")
    (ks, ke), = whole.sql("SELECT start_ns, end_ns FROM kernels WHERE category = 'nccl'")
    whole.close()
    seen = Trace(tmp_path / "a.duckdb", "a").windowed(ks - 1_000, ke + 1_000)
    assert seen.scalar("SELECT COUNT(*) FROM nccl_calls") == 1  # the AllReduce call, not the comm init
    with Run([seen]) as run:
        reg = default_registry()
        findings, results = run_rules(run, reg, [CollectiveBandwidth],
                                      overrides={"COMM003.link_peak_gbps": 25.0})
    assert [r.status for r in results] == ["ok"]
    (f,) = findings
    assert f.extra.ranks_n == 2 and f.extra.groups[0]["bytes"] == 2 * 2**20


def test_comm003_two_nodes_compared_across_ranks(tmp_path) -> None:
    """Both ranks of the real 2-node AllReduce given their payloads: the ranks sit on two hosts, so the link is
    the typical InfiniBand of the 3090's generation (25 GB/s); each rank's group lists both ranks' bus
    bandwidth, each from its own kernel time (direct SQL)."""
    from analysis.api import ingest
    from tests.analysis.rule_cases_system import COMM003_RING, plant_nccl_sizes

    outs, durs = [], {}
    for i, short in enumerate(("nccl-ring-2node-r0-ault43.sqlite", "nccl-ring-2node-r1-ault44.sqlite")):
        src = copy_export(corpus_file(short), tmp_path / f"{i}.sqlite")
        plant_nccl_sizes(src, COMM003_RING, nranks=2)
        ingest(src, tmp_path / f"{i}.duckdb")
        outs.append(tmp_path / f"{i}.duckdb")
        ((durs[f"{i}.duckdb"],),) = _raw(short, 'SELECT "end" - start FROM CUPTI_ACTIVITY_KIND_KERNEL')
    result = _comm003(outs)
    assert {r["host"] for r in result["reports"]} == {"ault43.cscs.ch", "ault44.cscs.ch"}
    assert len(result["findings"]) == 1 and len(result["findings"][0]["per_rank"]) == 2  # once for the run
    own = [f for rep in result["reports"] for f in rep["findings"]]
    assert len(own) == 2
    for f in own:
        assert f["inter_node"] is True
        (g,) = f["groups"]
        assert g["peak_gbps"] == 25.0 and "InfiniBand" in g["peak_source"]
        assert {r["report"]: r["bus_gbps"] for r in g["ranks"]} == {
            k: pytest.approx(2 * 2**20 / v, abs=1e-6) for k, v in durs.items()}


def test_comm003_n_of_the_kernels_own_communicator(tmp_path) -> None:
    """Fixture from the documented payload fields (JSON keyed by the schema entries' names, as no corpus export
    has payload values): the AllReduce names communicator 7, initialised with 4 ranks; another communicator (9)
    has 8. n is 4, the kernel's own communicator's, not the largest."""
    import json

    from analysis.api import ingest
    from tests.analysis.planting import clone_row

    src = copy_export(corpus_file("nccl-ring-2node-r0-ault43.sqlite"), tmp_path / "a.sqlite")
    con = sqlite3.connect(src)
    with con:
        ids = dict(con.execute("SELECT value, id FROM StringIds WHERE value IN ('ncclAllReduce', 'ncclCommInitRank')"))
        con.execute("UPDATE NVTX_EVENTS SET jsonText = ? WHERE textId = ?",
                    [json.dumps({"NCCL communicator ID": 7, "Message size [bytes]": 3 * 2**20}), ids["ncclAllReduce"]])
        (init,) = con.execute("SELECT rowid FROM NVTX_EVENTS WHERE textId = ?", [ids["ncclCommInitRank"]]).fetchone()
        con.execute("UPDATE NVTX_EVENTS SET jsonText = ? WHERE rowid = ?",
                    [json.dumps({"NCCL communicator ID": 7, "No. of ranks": 4}), init])
        clone_row(con, "NVTX_EVENTS", init, jsonText=json.dumps({"NCCL communicator ID": 9, "No. of ranks": 8}))
    con.close()
    ingest(src, tmp_path / "a.duckdb")
    (f,) = _comm003([tmp_path / "a.duckdb"], link_peak_gbps=25.0)["findings"]
    ((dur,),) = _raw("nccl-ring-2node-r0-ault43.sqlite", 'SELECT "end" - start FROM CUPTI_ACTIVITY_KIND_KERNEL')
    (g,) = f["groups"]
    assert (g["ranks_n"], g["ranks_n_source"]) == (4, "the communicator's init payload")
    assert g["bus_gbps"] == pytest.approx(3 * 2**20 / dur * 2 * 3 / 4, abs=1e-6)
    assert f["ranks_n"] == 8  # the report-wide default: the largest communicator


def test_comm003_binary_communicator_id(tmp_path) -> None:
    """torchrun's NCCL schemas put the 64-bit communicator id at offset 0 and the size at 8: both decode from the
    planted bytes (an id above 2^63 included), one row per ncclSend/ncclRecv range of the export."""
    import duckdb

    from analysis.api import ingest
    from tests.analysis.rule_cases_system import COMM003_SENDRECV, plant_nccl_sizes

    src = copy_export(corpus_file("torchrun-2gpu-nccl-sendrecv-before-cropped.sqlite"), tmp_path / "a.sqlite")
    comm = 0xF123456789ABCDEF
    plant_nccl_sizes(src, COMM003_SENDRECV, comm_id=comm)
    ingest(src, tmp_path / "a.duckdb")
    rows = duckdb.connect(str(tmp_path / "a.duckdb"), read_only=True).execute(
        "SELECT name, bytes, comm_id, COUNT(*) FROM nccl_calls GROUP BY ALL ORDER BY 1").fetchall()
    (n_send,), = _raw("torchrun-2gpu-nccl-sendrecv-before-cropped.sqlite", """
        SELECT COUNT(*) FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId WHERE s.value = 'ncclSend'""")
    assert rows == [("ncclRecv", 16 * 2**20, str(comm), n_send), ("ncclSend", 16 * 2**20, str(comm), n_send)]


def test_comm003_lists_a_bounded_set_of_ranks() -> None:
    """Per group at most RANKS_LISTED entries: the finding's own report's, then the highest and lowest of the
    others by the compared figure, sorted by it; ranks_total counts them all."""
    from analysis.diagnosis.rules.nsys.collectives import RANKS_LISTED, bounded_ranks

    entries = [{"report": f"r{i}", "time_ns": 1000 + i} for i in range(100)]
    few = bounded_ranks(entries[:RANKS_LISTED], "r3", "time_ns")
    assert few["ranks_total"] == RANKS_LISTED and [e["report"] for e in few["ranks"]] == [
        f"r{i}" for i in reversed(range(RANKS_LISTED))]
    many = bounded_ranks(entries, "r50", "time_ns")
    kept = [e["report"] for e in many["ranks"]]
    assert many["ranks_total"] == 100 and len(kept) == RANKS_LISTED and "r50" in kept
    assert kept[:8] == [f"r{i}" for i in range(99, 91, -1)] and kept[-7:] == [f"r{i}" for i in range(6, -1, -1)]
    assert [e["time_ns"] for e in many["ranks"]] == sorted((e["time_ns"] for e in many["ranks"]), reverse=True)
