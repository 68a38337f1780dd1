"""Every corpus nsys export ingests, and its headline numbers equal direct SQL on the export itself."""

from __future__ import annotations

import re

import duckdb
import pytest

from analysis.diagnosis.summary import report_info
from analysis.readers.schema import DERIVED_TABLES, NSYS_TABLES, SCHEMA_VERSION
from tests.analysis.nsys_helpers import export_query, export_tables, ingest_cache, ingested, open_trace  # noqa: F401
from tests.conftest import NSYS_FILES, corpus_file

pytestmark = pytest.mark.usefixtures("ingest_cache")


def _direct(src, table: str, expr: str) -> int:
    if table not in export_tables(src):
        return 0
    return export_query(src, f'SELECT COALESCE({expr}, 0) FROM "{table}"')[0][0]  # noqa: S608 - test constants


@pytest.mark.parametrize("src", NSYS_FILES, ids=lambda p: p.name.split("__")[-1])
def test_corpus_file_ingests_with_exact_headline_numbers(src):
    trace = open_trace(src)
    try:
        info = report_info(trace)
        assert info["tool"] == "nsys"
        assert info["file"] == src.name
        assert info["counts"]["kernels"] == _direct(src, "CUPTI_ACTIVITY_KIND_KERNEL", "count(*)")
        assert info["counts"]["memcpy"] == _direct(src, "CUPTI_ACTIVITY_KIND_MEMCPY", "count(*)")
        assert info["counts"]["memset"] == _direct(src, "CUPTI_ACTIVITY_KIND_MEMSET", "count(*)")
        assert info["gpu_time_ns"] == _direct(src, "CUPTI_ACTIVITY_KIND_KERNEL", 'sum("end" - start)')
        assert info["memcpy_bytes"] == _direct(src, "CUPTI_ACTIVITY_KIND_MEMCPY", "sum(bytes)")
        # Every normalized table exists, even when the export lacked its source.
        assert set(NSYS_TABLES) <= trace.tables
        assert trace.meta["schema_version"] == str(SCHEMA_VERSION)
        version = export_query(src, "SELECT value FROM META_DATA_EXPORT WHERE name = 'EXPORT_PRODUCT_VERSION'") \
            if "META_DATA_EXPORT" in export_tables(src) else \
            export_query(src, "SELECT value FROM EXPORT_META_DATA WHERE name = 'EXPORT_PRODUCT_VERSION'") \
            if "EXPORT_META_DATA" in export_tables(src) else []
        assert info["tool_version"] == (version[0][0] if version else None)
        if info["counts"]["kernels"]:
            assert info["span_ns"] > 0 and info["devices"]
            assert sum(k["total_ns"] for k in info["top_kernels"]) <= info["gpu_time_ns"]
        else:
            assert info["top_kernels"] == []
    finally:
        trace.close()


def test_backtrace_duplicates_dropped_and_version_suffix_stripped():
    src = corpus_file("saxpy-mpi-rank0-perlmutter.sqlite")
    expected = export_query(src, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE eventClass <> 67")[0][0]
    trace = open_trace(src)
    assert trace.scalar("SELECT count(*) FROM cuda_api") == expected
    assert trace.scalar("SELECT count(*) FROM cuda_api WHERE regexp_matches(name, '_v[0-9]+$')") == 0
    names = {r[0] for r in trace.sql("SELECT DISTINCT name FROM cuda_api")}
    assert "cudaLaunchKernel" in names
    trace.close()


def test_deprecated_sync_call_keeps_its_name_without_suffix():
    trace = open_trace(corpus_file("gaussian-threadsync.sqlite"))
    assert trace.scalar("SELECT count(*) FROM cuda_api WHERE name = 'cudaThreadSynchronize'") == 8190
    assert trace.scalar("SELECT count(*) FROM cuda_api WHERE kind NOT IN ('runtime', 'driver')") == 0
    trace.close()


def test_kernel_launch_thread_joins_on_process_and_correlation_id():
    src = corpus_file("torchrun-2gpu-nccl-sendrecv-before-cropped.sqlite")
    # Independent count: kernels whose (pid, correlationId) has a launching API call in the same process.
    expected = export_query(src, """
        SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k WHERE EXISTS (
            SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME r
            WHERE r.correlationId = k.correlationId
              AND ((r.globalTid >> 24) & 16777215) = ((k.globalPid >> 24) & 16777215))""")[0][0]
    trace = open_trace(src)
    assert trace.scalar("SELECT count(tid) FROM kernels") == expected == 3986
    # Each joined thread belongs to the kernel's own process.
    assert trace.scalar("""SELECT count(*) FROM kernels k JOIN threads t ON t.tid = k.tid
                           WHERE t.pid <> k.pid""") == 0
    assert sorted(r[0] for r in trace.sql("SELECT DISTINCT device FROM kernels")) == [0, 1]
    assert len(report_info(trace)["pids"]) >= 2
    trace.close()


def test_nccl_kernels_of_both_generations_are_categorized():
    for short, expected in (("torchrun-2gpu-nccl-sendrecv-before-cropped.sqlite", 66),
                            ("nccl-ring-2node-r0-ault43.sqlite", 1)):
        trace = open_trace(corpus_file(short))
        assert trace.scalar("SELECT count(*) FROM kernels WHERE category = 'nccl'") == expected
        assert trace.scalar("SELECT count(*) FROM kernels WHERE category = 'nccl' AND NOT starts_with(name, 'nccl')"
                            ) == 0
        trace.close()


def test_absolute_clock_export_is_normalized_to_session_relative_ns():
    for short in ("nccl-ring-2node-r0-ault43.sqlite", "nccl-ring-2node-r1-ault44.sqlite"):
        src = corpus_file(short)
        shift = int(export_query(src, "SELECT value FROM META_DATA_EXPORT WHERE name = 'EXPORT_CONFIG_TIME_SHIFT'")[0][0])
        utc = export_query(src, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")[0][0]
        raw = export_query(src, 'SELECT min(start), max("end") FROM CUPTI_ACTIVITY_KIND_KERNEL')[0]
        trace = open_trace(src)
        assert trace.session_start_utc_ns == utc
        first, last = trace.sql("SELECT min(start_ns), max(end_ns) FROM kernels")[0]
        assert (first, last) == (raw[0] - shift, raw[1] - shift)
        assert 0 < first < 60 * 10**9  # seconds into the session, not 1.7e18
        assert trace.scalar("SELECT min(start_ns) FROM nvtx") >= 0
        # Wall clock is recoverable: session start + relative time == the export's absolute stamp.
        assert trace.session_start_utc_ns + first == raw[0]
        trace.close()


def test_relative_clock_export_is_left_as_is():
    src = corpus_file("cloverleaf-devsync.sqlite")
    raw = export_query(src, "SELECT min(start) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
    trace = open_trace(src)
    assert trace.scalar("SELECT min(start_ns) FROM kernels") == raw
    trace.close()


def test_device_ordinal_maps_through_cudevice_not_gpu_id():
    src = corpus_file("cloverleaf-devsync.sqlite")
    bus = export_query(src, "SELECT busLocation FROM TARGET_INFO_GPU WHERE cuDevice = 0")[0][0]
    trace = open_trace(src)
    assert trace.sql("SELECT DISTINCT device FROM kernels") == [(0,)]
    assert trace.sql("SELECT gpu_id, bus_location FROM devices WHERE device = 0") == [(3, bus)]
    assert report_info(trace)["devices"] == [{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}]
    trace.close()


def test_device_ordinal_maps_through_target_info_cuda_device():
    src = corpus_file("devsync-heavy-report13.sqlite")
    gpu, pid = export_query(src, "SELECT gpuId, pid FROM TARGET_INFO_CUDA_DEVICE WHERE cudaId = 0")[0]
    assert gpu == 1
    trace = open_trace(src)
    assert trace.sql("SELECT gpu_id FROM devices WHERE device = 0 AND pid = ?", [pid]) == [(1,)]
    assert [d["id"] for d in report_info(trace)["devices"]] == [0]
    trace.close()


def test_only_allow_listed_environment_reaches_the_duckdb_file():
    src = corpus_file("cloverleaf-devsync.sqlite")
    env = export_query(src, "SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'DeviceEnvironment'")[0][0]
    secret = re.search(r"(?:^|;)PMI_SHARED_SECRET=([^;]+)", env).group(1)
    user = re.search(r"(?:^|;)USER=([^;]+)", env).group(1)
    data = ingested(src).read_bytes()
    assert len(secret) > 8 and secret.encode() not in data
    assert b"PMI_SHARED_SECRET" not in data
    assert f"USER={user}".encode() not in data
    trace = open_trace(src)
    meta = trace.meta
    assert (meta["rank"], meta["world_size"], meta["local_rank"], meta["job_id"]) == ("0", "1", "0", "16618307")
    # nsys' own Hostname record of the node beats $HOSTNAME (a login node here).
    assert meta["host"] == "nid008553"
    trace.close()


def test_rank_comes_from_the_launcher_and_host_from_the_profiled_node():
    info0 = report_info(open_trace(corpus_file("nccl-ring-2node-r0-ault43.sqlite")))
    info1 = report_info(open_trace(corpus_file("nccl-ring-2node-r1-ault44.sqlite")))
    assert (info0["rank"], info0["world_size"], info0["host"]) == (0, 2, "ault43.cscs.ch")
    assert (info1["rank"], info1["world_size"], info1["host"]) == (1, 2, "ault44.cscs.ch")


def test_nvtx_text_resolves_inline_or_registered_and_domains_are_named():
    src = corpus_file("cupy-power-iteration.sqlite")
    expected = export_query(src, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (34, 59, 60)")[0][0]
    trace = open_trace(src)
    assert trace.scalar("SELECT count(*) FROM nvtx") == expected == 786
    assert trace.scalar("SELECT count(*) FROM nvtx WHERE text IS NULL") == 0
    assert trace.scalar("SELECT min(start_ns) FROM nvtx") >= 0  # the -1.96e9 domain-create row is excluded
    in_cccl = export_query(src, """SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59 AND domainId =
                                   (SELECT domainId FROM NVTX_EVENTS WHERE eventType = 75 AND text = 'CCCL')""")[0][0]
    assert trace.scalar("SELECT count(*) FROM nvtx WHERE domain = 'CCCL'") == in_cccl > 0
    assert trace.sql("SELECT DISTINCT domain FROM nvtx WHERE domain IS NOT NULL") == [("CCCL",)]
    trace.close()
    legacy = open_trace(corpus_file("cudf-groupby-2020.sqlite"))
    assert {r[0] for r in legacy.sql("SELECT DISTINCT domain FROM nvtx")} >= {"cudf_python", "libcudf"}
    legacy.close()


def test_memcpy_kinds_decoded_without_enum_tables():
    src = corpus_file("unified-memory-a100.sqlite")  # 2022.2: no ENUM_* tables at all
    assert not any(t.startswith("ENUM_") for t in export_tables(src))
    trace = open_trace(src)
    kinds = dict(trace.sql("SELECT copy_kind, count(*) FROM memcpy GROUP BY 1"))
    assert kinds == {"UVM_HtoD": 19766, "UVM_DtoH": 1536}
    assert trace.sql("SELECT DISTINCT src_kind FROM memcpy") == [("unknown",)]
    trace.close()
    trace = open_trace(corpus_file("cloverleaf-devsync.sqlite"))
    assert trace.scalar("SELECT count(*) FROM memcpy WHERE 'pageable' IN (src_kind, dst_kind)") == 279
    trace.close()


def test_exports_without_activity_tables_give_empty_tables():
    for short in ("nometa-nocuda-trace.sqlite", "runtime-only-no-kernel-table.sqlite", "poolformer-nvtx-only.sqlite"):
        info = report_info(open_trace(corpus_file(short)))
        assert info["counts"]["kernels"] == 0 and info["span_ns"] == 0 and info["gpu_time_ns"] == 0


def test_normalized_file_is_plain_duckdb_readable_read_only():
    path = ingested(corpus_file("vecadd-2026.sqlite"))
    con = duckdb.connect(str(path), read_only=True)
    assert con.execute("SELECT count(*) FROM kernels").fetchone()[0] == 4
    assert {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()} == \
        set(NSYS_TABLES) | set(DERIVED_TABLES)
    con.close()


def test_push_pop_nesting_equals_open_ranges_on_the_thread():
    src = corpus_file("pytorch-nvfuser-h200.sqlite")
    rows = export_query(src, """SELECT globalTid, start, "end" FROM NVTX_EVENTS
                                WHERE eventType = 59 AND "end" >= start ORDER BY globalTid, start, start - "end" """)
    expected: dict[tuple[int, int], list[int]] = {}
    open_ends: dict[int, list[int]] = {}
    for gtid, start, end in rows:
        ends = [e for e in open_ends.get(gtid, []) if e > start]
        expected.setdefault((gtid & 0xFFFFFF, start), []).append(len(ends))
        open_ends[gtid] = [*ends, end]
    trace = open_trace(src)
    got: dict[tuple[int, int], list[int]] = {}
    for tid, start, nesting in trace.sql("SELECT tid, start_ns, nesting FROM nvtx WHERE kind = 'push_pop'"):
        got.setdefault((tid, start), []).append(nesting)
    assert {k: sorted(v) for k, v in got.items()} == {k: sorted(v) for k, v in expected.items()}
    assert max(n for v in got.values() for n in v) >= 2
    trace.close()
