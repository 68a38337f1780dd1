"""GPU metrics and NIC counters: ingested, summarised per sampled device in the report summary, and used as
MEM005's evidence of the measured link throughput.

No corpus export carries these tables (the corpus README: no GPU_METRICS / TARGET_INFO_GPU_METRICS, no NIC
metrics), so the tests add them to a real export as the documented nsys export schema lays them out:
GPU_METRICS(timestamp, typeId, metricId, value) with TARGET_INFO_GPU_METRICS(typeId, sourceId, typeName,
metricId, metricName); NET_NIC_METRIC(start, end, globalId, portId, metricsListId, metricsIdx, value) with
TARGET_INFO_NETWORK_METRICS(metricsListId, metricsIdx, name, description, unit), NIC_ID_MAP(nicId, globalId)
and TARGET_INFO_NIC_INFO(nicId, name, ...). Every expected number is computed here from the raw rows.
"""

from __future__ import annotations

import sqlite3

import pytest

from analysis.api import analyze, ingest
from tests.analysis.declared_cases import observe_result, rule_case
from tests.analysis.planting import copy_export
from tests.conftest import corpus_file

PCIE_RX = "PCIe RX Throughput [Throughput %]"
SM_ACTIVE = "SMs Active [Throughput %]"
SOURCE = "GPU 0 - NVIDIA GeForce RTX 4060 Ti"
STEP_NS = 100_000  # one sample per metric every 100 us


def plant_gpu_metrics(path) -> list[tuple[int, str, float]]:
    """Samples over the whole GPU span: PCIe RX at 70 % while a host-to-device copy runs, 3 % otherwise;
    SMs Active at 40 % while a kernel runs, 0 otherwise. Returns the (time, metric, value) rows written."""
    con = sqlite3.connect(path)
    copies = con.execute("SELECT start, \"end\" FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 1").fetchall()
    kernels = con.execute('SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchall()
    lo = min(s for s, _ in copies + kernels)
    hi = max(e for _, e in copies + kernels)
    rows = []
    with con:
        con.execute("""CREATE TABLE TARGET_INFO_GPU_METRICS (typeId INTEGER NOT NULL, sourceId INTEGER NOT NULL,
                       typeName TEXT NOT NULL, metricId INTEGER NOT NULL, metricName TEXT NOT NULL)""")
        con.execute("""CREATE TABLE GPU_METRICS (timestamp INTEGER, typeId INTEGER NOT NULL,
                       metricId INTEGER NOT NULL, value INTEGER NOT NULL)""")
        con.executemany("INSERT INTO TARGET_INFO_GPU_METRICS VALUES (65536, 1, ?, ?, ?)",
                        [(SOURCE, 1, PCIE_RX), (SOURCE, 2, SM_ACTIVE)])
        for t in range(lo, hi + 1, STEP_NS):
            rx = 70 if any(s <= t <= e for s, e in copies) else 3
            sm = 40 if any(s <= t <= e for s, e in kernels) else 0
            con.executemany("INSERT INTO GPU_METRICS VALUES (?, 65536, ?, ?)", [(t, 1, rx), (t, 2, sm)])
            rows += [(t, PCIE_RX, rx), (t, SM_ACTIVE, sm)]
    con.close()
    return rows


def _ingest(src, tmp_path):
    out = tmp_path / "a.duckdb"
    ingest(src, out)
    return out


@rule_case("MEM005", "fires")
def test_mem005_carries_the_measured_pcie_throughput(tmp_path) -> None:
    src = copy_export(corpus_file("vecadd-2026.sqlite"), tmp_path / "a.sqlite")
    rows = plant_gpu_metrics(src)
    con = sqlite3.connect(src)
    copies = con.execute("SELECT start, \"end\" FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 1").fetchall()
    con.close()
    result = analyze([_ingest(src, tmp_path)], rules=["MEM005"], window="all").to_json()
    observe_result(result)
    (f,) = result["findings"]
    assert f["main_direction"] == "HtoD"
    (m,) = f["measured_link"]
    during = [v for t, name, v in rows if name == PCIE_RX and any(s <= t <= e for s, e in copies)]
    whole = [v for _, name, v in rows if name == PCIE_RX]
    assert (m["source"], m["metric"]) == (SOURCE, PCIE_RX)
    assert m["samples"] == len(during) > 0 and m["mean_during_copies"] == pytest.approx(70.0)
    assert m["max_during_copies"] == 70.0
    assert m["mean_whole_capture"] == pytest.approx(sum(whole) / len(whole), abs=1e-6)


def test_gpu_metrics_summarised_per_device(tmp_path) -> None:
    src = copy_export(corpus_file("vecadd-2026.sqlite"), tmp_path / "a.sqlite")
    rows = plant_gpu_metrics(src)
    (report,) = analyze([_ingest(src, tmp_path)], rules=["MEM005"], window="all").to_json()["reports"]
    got = {(g["source"], g["metric"]): g for g in report["system_metrics"]["gpu"]}
    assert set(got) == {(SOURCE, PCIE_RX), (SOURCE, SM_ACTIVE)}
    for name in (PCIE_RX, SM_ACTIVE):
        vals = [v for _, n, v in rows if n == name]
        g = got[(SOURCE, name)]
        assert g["samples"] == len(vals) and g["mean"] == pytest.approx(sum(vals) / len(vals), abs=1e-6)
        assert (g["min"], g["max"]) == (min(vals), max(vals))
    assert report["system_metrics"]["nic"] == []


def test_no_metrics_no_key_and_no_measured_link() -> None:
    """The corpus has no GPU or NIC metrics: the report summary's system_metrics has only the storage I/O of the
    OS runtime trace, MEM005 no measured_link."""
    from tests.analysis.planting import ingested

    result = analyze([ingested(corpus_file("vecadd-2026.sqlite"))], rules=["MEM005"], window="all").to_json()
    metrics = result["reports"][0]["system_metrics"]
    assert (metrics["gpu"], metrics["nic"], metrics["nics"]) == ([], [], []) and metrics["storage"]
    assert "measured_link" not in result["findings"][0]


def test_nic_counters_summarised_per_port(tmp_path) -> None:
    src = copy_export(corpus_file("nccl-ring-2node-r0-ault43.sqlite"), tmp_path / "a.sqlite")
    con = sqlite3.connect(src)
    assert con.execute("SELECT name FROM TARGET_INFO_NIC_INFO WHERE nicId = 1").fetchone() == ("mlx5_1",)
    (t0,) = con.execute('SELECT MIN(start) FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone()
    intervals = [(t0 + i * 1_000_000, t0 + (i + 1) * 1_000_000, 1000 * (i + 1)) for i in range(10)]
    with con:
        con.execute("""CREATE TABLE NET_NIC_METRIC (start INTEGER NOT NULL, "end" INTEGER NOT NULL,
                       globalId INTEGER NOT NULL, portId INTEGER NOT NULL, metricsListId INTEGER NOT NULL,
                       metricsIdx INTEGER NOT NULL, value INTEGER NOT NULL)""")
        con.execute("""CREATE TABLE TARGET_INFO_NETWORK_METRICS (metricsListId INTEGER NOT NULL,
                       metricsIdx INTEGER NOT NULL, name TEXT NOT NULL, description TEXT NOT NULL, unit TEXT NOT NULL)""")
        con.execute("CREATE TABLE NIC_ID_MAP (nicId INTEGER NOT NULL, globalId INTEGER NOT NULL)")
        con.execute("INSERT INTO TARGET_INFO_NETWORK_METRICS VALUES (7, 0, 'Bytes received', 'rx', 'bytes')")
        con.execute("INSERT INTO TARGET_INFO_NETWORK_METRICS VALUES (7, 1, 'Bytes sent', 'tx', 'bytes')")
        # The export's own NIC inventory (TARGET_INFO_NIC_INFO, real) names nicId 1 'mlx5_1'.
        con.execute("INSERT INTO NIC_ID_MAP VALUES (1, 99)")
        for s, e, v in intervals:
            con.execute("INSERT INTO NET_NIC_METRIC VALUES (?, ?, 99, 1, 7, 0, ?)", [s, e, v])
            con.execute("INSERT INTO NET_NIC_METRIC VALUES (?, ?, 99, 1, 7, 1, ?)", [s, e, 2 * v])
    con.close()
    (report,) = analyze([_ingest(src, tmp_path)], rules=["COMM001"], window="all").to_json()["reports"]
    nic = {n["metric"]: n for n in report["system_metrics"]["nic"]}
    total = sum(v for *_, v in intervals)
    covered = sum(e - s for s, e, _ in intervals)
    rx, tx = nic["Bytes received"], nic["Bytes sent"]
    assert (rx["nic"], rx["port"], rx["unit"], rx["intervals"]) == ("mlx5_1", 1, "bytes", 10)
    assert rx["total"] == total and rx["covered_ns"] == covered
    assert rx["per_second"] == pytest.approx(total * 1e9 / covered) and tx["total"] == 2 * total
    assert report["system_metrics"]["gpu"] == []


NIC_EXPORTS = ("nccl-ring-2node-r0-ault43.sqlite", "a30-mig.sqlite", "pytorch-nvfuser-h200.sqlite",
               "devsync-heavy-report13.sqlite", "cupy-a100.sqlite")


@pytest.mark.parametrize("short", NIC_EXPORTS)
def test_nic_inventory_matches_the_export(short) -> None:
    """The real NIC inventories of the corpus (TARGET_INFO_NIC_INFO, no NIC counters): name, link layer and
    model in the report summary equal a direct join on the export; no GPU or NIC metrics."""
    from tests.analysis.planting import ingested

    con = sqlite3.connect(f"file:{corpus_file(short)}?mode=ro", uri=True)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if {"ENUM_NET_LINK_TYPE", "ENUM_NET_DEVICE_ID"} <= tables:
        raw = con.execute("""SELECT n.nicId, n.name, lower(l.name), d.label, n.stateName FROM TARGET_INFO_NIC_INFO n
                             LEFT JOIN ENUM_NET_LINK_TYPE l ON l.id = n.linkLayer
                             LEFT JOIN ENUM_NET_DEVICE_ID d ON d.id = n.deviceId ORDER BY 1, 2""").fetchall()
    else:  # 2025.5 writes only the enums it references elsewhere: the built-in link-layer map, no model
        assert short == "devsync-heavy-report13.sqlite"
        layers = {0: "unknown", 1: "ethernet", 2: "infiniband"}
        raw = [(i, n, layers[ll], None, st) for i, n, ll, st in con.execute(
            "SELECT nicId, name, linkLayer, stateName FROM TARGET_INFO_NIC_INFO ORDER BY 1, 2")]
    con.close()
    (report,) = analyze([ingested(corpus_file(short))], rules=["COMM001"], window="all").to_json()["reports"]
    got = [(n["nic_id"], n["name"], n["link_layer"], n["model"], n["state"]) for n in report["system_metrics"]["nics"]]
    assert got == raw and raw
    assert report["system_metrics"]["gpu"] == [] and report["system_metrics"]["nic"] == []


def test_gpu002_carries_the_measured_sm_activity(tmp_path) -> None:
    """GPU002's planted low-utilization export (rule_cases.gpu002_fires) with GPU metrics from the documented
    schema: SMs Active 40 % while a kernel runs, 0 otherwise. The finding's measured_sm averages the samples
    inside its evidence regions, recomputed here from the rows written."""
    from tests.analysis.rule_cases import gpu002_fires

    src = copy_export(corpus_file("tensorrt-3090.sqlite"), tmp_path / "a.sqlite")
    gpu002_fires(src, None)
    rows = plant_gpu_metrics(src)
    result = analyze([_ingest(src, tmp_path)], rules=["GPU002"], window="all",
                     thresholds={"KRN001.min_run_kernels": 1e9}).to_json()
    (f,) = result["findings"]
    regions = [(e["start_ns"], e["end_ns"]) for e in f["evidence"]]
    (m,) = [x for x in f["measured_sm"] if x["metric"] == SM_ACTIVE]
    inside = [v for t, name, v in rows if name == SM_ACTIVE and any(s <= t <= e for s, e in regions)]
    whole = [v for _, name, v in rows if name == SM_ACTIVE]
    assert m["samples"] == len(inside) > 0
    assert m["mean_during"] == pytest.approx(sum(inside) / len(inside), abs=1e-6)
    assert m["mean_whole_capture"] == pytest.approx(sum(whole) / len(whole), abs=1e-6)
    assert m["mean_during"] < m["mean_whole_capture"]  # the low regions are where the SMs idle
    assert [x["metric"] for x in f["measured_sm"]] == [SM_ACTIVE]  # PCIe RX is not an SM metric


# ----------------------------------------------------------------------------- storage I/O (OS runtime trace)

def _raw_file_calls(short: str) -> list[tuple[int, str, int, int]]:
    """(pid, call name without leading underscores and the 64 suffix, tid, duration) of every OS runtime call."""
    import re

    con = sqlite3.connect(f"file:{corpus_file(short)}?mode=ro", uri=True)
    try:
        rows = con.execute("""SELECT o.globalTid / 16777216 % 16777216, s.value, o.globalTid % 16777216,
                                     o."end" - o.start
                              FROM OSRT_API o JOIN StringIds s ON s.id = o.nameId""").fetchall()
    finally:
        con.close()
    return [(pid, re.sub(r"64$", "", name.lstrip("_")), tid, d) for pid, name, tid, d in rows]


@pytest.mark.parametrize("short", ["vecadd-2026.sqlite", "cloverleaf-devsync.sqlite", "stdpar-um-gpu.sqlite"])
def test_storage_io_per_process_and_kind_matches_raw_sql(short) -> None:
    """The report summary's storage I/O (calls, threads, time and longest call per process and kind) equals the
    raw OSRT_API rows classified in Python; exports without an OS runtime trace have none."""
    from analysis.diagnosis.system_metrics import storage_kind_of
    from tests.analysis.planting import ingested

    result = analyze([ingested(corpus_file(short))], rules=["GPU001"], window="all").to_json()
    storage = result["reports"][0]["system_metrics"]["storage"]
    kinds = storage_kind_of()
    expected: dict[tuple[int, str], list] = {}
    for pid, name, tid, d in _raw_file_calls(short):
        if name in kinds:
            e = expected.setdefault((pid, kinds[name]), [0, set(), 0, 0])
            e[0] += 1
            e[1].add(tid)
            e[2] += d
            e[3] = max(e[3], d)
    assert expected, "the export has file calls in its OS runtime trace"
    assert {(r["pid"], r["kind"]): (r["calls"], r["threads"], r["total_ns"], r["max_ns"]) for r in storage} == {
        k: (n, len(tids), t, m) for k, (n, tids, t, m) in expected.items()}
    assert [r["total_ns"] for r in storage if r["pid"] == storage[0]["pid"]] == sorted(
        (r["total_ns"] for r in storage if r["pid"] == storage[0]["pid"]), reverse=True)
    # No OS runtime trace: no storage section (and no system metrics at all in this export).
    plain = analyze([ingested(corpus_file("saxpy-mpi-rank0-perlmutter.sqlite"))], rules=["GPU001"]).to_json()
    assert "system_metrics" not in plain["reports"][0]
