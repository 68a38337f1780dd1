"""What the ingest does less of, or beside the copy (issue #43), without changing a copied value: the launch join
without grouping, checked by a count (``normalize.Step.exact``), the launch table grouped in parts where a key
repeats (``normalize.LAUNCH_PARTS``), the string columns written without FSST (``child.open_output``), the
derive step's imports done while the child copies (``ingest_nsys(prepare=)``), our own words stored as ENUMs and
the mangled kernel names stored once (schema 6)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import duckdb
import pytest

from analysis.limits import Limits
from analysis.readers.nsys import child
from analysis.readers.nsys.guard import ExportInfo
from analysis.readers.nsys.ingest import ingest_nsys
from analysis.readers.nsys.normalize import CORR_MAX, LAUNCH_PARTS, statements
from analysis.readers.schema import NSYS_TABLES, ddl
from tests.analysis.nsys_helpers import export_query
from tests.analysis.planting import copy_export, sqlite_rw
from tests.conftest import corpus_file


def _launch_sql() -> str:
    info = ExportInfo(
        path=Path("x.sqlite"),
        size=1,
        tables={"CUPTI_ACTIVITY_KIND_RUNTIME": ["start", "end", "globalTid", "correlationId", "nameId"],
                "CUPTI_ACTIVITY_KIND_KERNEL": ["start", "end", "globalPid", "correlationId"]},
    )
    (step,) = [step for step in statements(info) if step.label == "kernels"]
    assert step.exact is not None and "_launch" not in step.sql
    return step.exact["fallback"][0]


def test_the_launch_table_grouped_in_parts_is_the_one_grouped_whole() -> None:
    con = duckdb.connect()
    con.execute(ddl({"cuda_api": NSYS_TABLES["cuda_api"]})[0])
    # Every part of the correlation ids, one id launched twice from two threads (the first thread wins), the same id
    # in another process, and ids no GPU row can match (negative, past 40 bits, NULL).
    rows = [(pid, tid, corr) for pid in (7, 8) for corr in range(100) for tid in ((corr % 5) + 1,)]
    rows += [(7, 9, 42), (7, 0, 43), (8, 3, 42), (7, 1, -4), (7, 1, CORR_MAX + 1), (7, 1, None)]
    con.executemany(
        "INSERT INTO cuda_api (pid, tid, start_ns, end_ns, correlation_id) VALUES (?, ?, 0, 1, ?)", rows
    )
    con.execute(_launch_sql())
    got = sorted(con.execute("SELECT k, tid FROM _launch").fetchall())
    want = {}
    for pid, tid, corr in rows:
        if corr is not None and 0 <= corr <= CORR_MAX:
            key = (pid << 40) | corr
            want[key] = min(tid, want.get(key, tid))
    assert got == sorted(want.items())
    assert dict(got)[(7 << 40) | 43] == 0 and dict(got)[(7 << 40) | 42] == 3
    assert LAUNCH_PARTS > 1 and LAUNCH_PARTS & (LAUNCH_PARTS - 1) == 0  # the parts are the id's low bits


_GPU = {"kernels": "CUPTI_ACTIVITY_KIND_KERNEL", "memcpy": "CUPTI_ACTIVITY_KIND_MEMCPY",
        "sync": "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"}


def _launching_threads(src: Path, table: str) -> list[tuple]:
    """(pid, correlationId, start, thread) of each GPU row of ``table``, from the export itself: the thread is the
    lowest of the API calls with the row's process and correlation id (NULL when there is none)."""
    return sorted(export_query(src, f"""
        SELECT (g.globalPid >> 24) & 16777215, g.correlationId, g.start,
               (SELECT min(r.globalTid & 16777215) FROM CUPTI_ACTIVITY_KIND_RUNTIME r
                WHERE r.correlationId = g.correlationId AND r.eventClass IS NOT 67
                  AND ((r.globalTid >> 24) & 16777215) = ((g.globalPid >> 24) & 16777215))
        FROM {table} g"""), key=repr)  # noqa: S608 - constant names


def _copied_threads(out: Path, table: str) -> list[tuple]:
    con = duckdb.connect(str(out), read_only=True)
    try:
        offset = int(con.execute("SELECT value FROM meta WHERE key = 'time_offset_ns'").fetchone()[0])
        rows = con.execute(f"SELECT pid, correlation_id, start_ns + {offset}, tid FROM {table}").fetchall()  # noqa: S608
    finally:
        con.close()
    return sorted(rows, key=repr)


@pytest.mark.parametrize("plant", [False, True])
def test_the_launch_join_without_grouping_and_its_fallback_give_the_grouped_threads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, plant: bool
) -> None:
    # Every corpus export has one API call per (process, correlation id), so the copy joins each GPU row to the calls
    # directly and checks that it wrote one row per source row. Planted: a kernel's launching call again on a later
    # thread and another one's on an earlier thread (the lowest thread wins, as in the grouped table): the kernels'
    # statement writes too many rows, rolls back and joins the grouped table; the other tables keep the direct join.
    src = corpus_file("torchrun-2gpu-nccl-sendrecv-before-cropped.sqlite")
    if plant:
        src = copy_export(src, tmp_path / "repeated.sqlite")
        con = sqlite_rw(src)
        calls = con.execute("""SELECT r.rowid, r.globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME r
                               JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId
                                AND (k.globalPid >> 24) = (r.globalTid >> 24)
                               ORDER BY k.start LIMIT 2""").fetchall()
        for (rowid, gtid), step in zip(calls, (+1, -1), strict=True):
            cols = [r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_RUNTIME)")]
            con.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME ({', '.join(cols)}) "  # noqa: S608 - the export's columns
                        f"SELECT {', '.join('?' if c == 'globalTid' else c for c in cols)} "
                        "FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE rowid = ?", [gtid + step, rowid])
        con.commit()
        con.close()
    out = tmp_path / "out.duckdb"
    with caplog.at_level(logging.INFO, logger="analysis.readers.nsys.ingest"):
        ingest_nsys(src, out, limits=Limits())
    for table, source in _GPU.items():
        want = _launching_threads(src, source)
        assert len(want) == export_query(src, f"SELECT count(*) FROM {source}")[0][0]  # noqa: S608
        assert _copied_threads(out, table) == want, table
    regrouped = [r.getMessage() for r in caplog.records if "grouped launch table" in r.getMessage()]
    if plant:
        assert len(regrouped) == 1 and "kernels" in regrouped[0] and "memcpy" not in regrouped[0]
        # The planted calls are there, and one of them lowered its kernel's thread.
        low = _launching_threads(src, "CUPTI_ACTIVITY_KIND_KERNEL")
        base = _launching_threads(corpus_file("torchrun-2gpu-nccl-sendrecv-before-cropped.sqlite"),
                                  "CUPTI_ACTIVITY_KIND_KERNEL")
        assert sum(a != b for a, b in zip(low, base, strict=True)) == 1
    else:
        assert regrouped == []


def test_the_copy_writes_strings_without_fsst(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # DuckDB 1.5 takes disabled_compression_methods as a connect option and ignores it: the child sets it itself.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    con = child.open_output(
        {
            "tmp": str(tmp_path / "out.duckdb"),
            "temp_directory": str(tmp_path / "spill"),
            "threads": 1,
            "duckdb_memory_bytes": 256 * 2**20,
        }
    )
    try:
        assert (
            "FSST"
            in con.execute("SELECT current_setting('disabled_compression_methods')").fetchone()[0].upper()
        )
        con.execute(
            "CREATE TABLE t AS SELECT md5(i::VARCHAR) || md5((i * 7)::VARCHAR) AS u FROM range(200000) r(i)"
        )
        con.execute("CHECKPOINT")
        methods = {
            m
            for (m,) in con.execute(
                "SELECT DISTINCT compression FROM pragma_storage_info('t') WHERE segment_type = 'VARCHAR'"
            ).fetchall()
        }
    finally:
        con.close()
    assert methods and "FSST" not in methods


def test_the_derive_steps_imports_run_beside_the_copy_and_a_failure_there_fails_nothing(
    tmp_path: Path,
) -> None:
    src = corpus_file("cupy-power-iteration.sqlite")
    seen: list[str] = []

    def prepare() -> None:
        seen.append(threading.current_thread().name)
        raise ImportError("a module the derive step will meet and log itself")

    def derive(path: Path, memory_bytes: int, deadline: float) -> None:
        seen.append("derive")

    counts = ingest_nsys(src, tmp_path / "out.duckdb", limits=Limits(), derive=derive, prepare=prepare)
    assert counts["kernels"] > 0 and (tmp_path / "out.duckdb").is_file()
    assert seen == ["ingest-prepare", "derive"]  # in its own thread, before the derive step
    seen.clear()
    ingest_nsys(src, tmp_path / "plain.duckdb", limits=Limits(), prepare=prepare)
    assert seen == []  # nothing to prepare for without a derive step


def _ingested(tmp_path: Path, short: str) -> tuple[Path, Path]:
    src = corpus_file(short)
    out = tmp_path / f"{short}.duckdb"
    ingest_nsys(src, out, limits=Limits())
    return src, out


def test_vocabulary_columns_are_enums_that_sort_and_group_as_their_text(tmp_path: Path) -> None:
    # Schema 6: our own words are stored as ENUMs declared in byte order, so ORDER BY, min/max and GROUP BY give
    # what the same VARCHAR gave (0.4 s less CPU of the copy at 2M kernels, docs/speed.md).
    _, out = _ingested(tmp_path, "devsync-heavy-report13.sqlite")
    con = duckdb.connect(str(out), read_only=True)
    try:
        enums = {
            (t, c): dt
            for t, c, dt in con.execute(
                "SELECT table_name, column_name, data_type FROM information_schema.columns "
                "WHERE data_type LIKE 'ENUM%'"
            ).fetchall()
        }
        assert set(enums) == {("kernels", "category"), ("cuda_api", "kind"), ("sync", "sync_type"),
                              ("memcpy", "copy_kind"), ("memcpy", "src_kind"), ("memcpy", "dst_kind"),
                              ("memset", "mem_kind")}
        for table, col in enums:  # names from the catalog
            as_enum = con.execute(f"SELECT {col}, count(*) FROM {table} GROUP BY 1 ORDER BY 1").fetchall()  # noqa: S608
            as_text = con.execute(
                f"SELECT {col}::VARCHAR, count(*) FROM {table} GROUP BY 1 ORDER BY 1").fetchall()  # noqa: S608
            assert as_enum == as_text
            bounds = con.execute(f"SELECT min({col}) IS NOT DISTINCT FROM min({col}::VARCHAR), "  # noqa: S608
                                 f"max({col}) IS NOT DISTINCT FROM max({col}::VARCHAR) FROM {table}").fetchone()
            assert bounds == (True, True)
        # Something to sort: several words in the memcpy and sync columns of this export.
        assert con.execute("SELECT count(DISTINCT copy_kind) FROM memcpy").fetchone()[0] >= 2
        assert con.execute("SELECT count(DISTINCT sync_type) FROM sync").fetchone()[0] >= 2
    finally:
        con.close()


def test_mangled_names_are_stored_once_and_a_kernel_is_found_by_its_mangled_name(tmp_path: Path) -> None:
    import sqlite3

    from analysis.model.trace import Trace
    from analysis.views.timeline import kernel_instances

    src, out = _ingested(tmp_path, "cloverleaf-devsync.sqlite")
    lite = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    want = dict(lite.execute(
        "SELECT s.value, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.mangledName "
        "GROUP BY 1").fetchall())
    lite.close()
    assert len(want) > 50
    trace = Trace(out, "t")
    try:
        stored = trace.sql("SELECT name FROM mangled_names")
        assert sorted(n for (n,) in stored) == sorted(want)  # each name once
        assert trace.sql("SELECT count(*) FROM kernels k LEFT JOIN mangled_names m ON m.id = k.mangled_id "
                         "WHERE m.name IS NULL")[0][0] == 0
        name, count = max(want.items(), key=lambda kv: (kv[1], kv[0]))
        found = kernel_instances(trace, name)
        assert found["count"] == count and len(found["first"]) == min(5, count)
    finally:
        trace.close()
    # A file of schema 5 and earlier holds the name in every row (kernels.mangled_name): found the same way.
    con = duckdb.connect(str(out))
    con.execute("ALTER TABLE kernels ADD COLUMN mangled_name VARCHAR")
    con.execute("UPDATE kernels SET mangled_name = (SELECT name FROM mangled_names m WHERE m.id = kernels.mangled_id)")
    con.execute("DROP TABLE mangled_names")
    con.close()
    old = Trace(out, "old")
    try:
        assert kernel_instances(old, name)["count"] == count
    finally:
        old.close()


def test_columns_reads_an_enum_column_as_one_column() -> None:
    from analysis.readers.schema import columns

    cols = columns(NSYS_TABLES, "memcpy")
    assert cols[cols.index("correlation_id") + 1:cols.index("correlation_id") + 5] == [
        "copy_kind", "bytes", "src_kind", "dst_kind"]
    assert "'HtoD'" not in cols and all(c.isidentifier() for c in cols)


def test_each_statement_commits_so_the_next_one_sees_the_temporary_tables_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # In one transaction a temporary table built by an earlier statement is estimated at 0 rows, and DuckDB hashed
    # the launch table for every GPU table whatever their sizes. Each statement commits now: the next one's plan sees
    # the rows (duckdb_tables().estimated_size is the count the optimizer reads).
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    con = child.open_output({"tmp": str(tmp_path / "out.duckdb"), "temp_directory": str(tmp_path / "spill"),
                             "threads": 1, "duckdb_memory_bytes": 256 * 2**20})
    plan = {
        "src": str(corpus_file("vecadd-2026.sqlite")),
        "meta": {},
        "statements": [
            ["t", "CREATE TEMP TABLE _t AS SELECT range AS r FROM range(1000)"],
            ["meta", "INSERT INTO meta SELECT 'seen', estimated_size::VARCHAR FROM duckdb_tables() "
                     "WHERE table_name = '_t'"],
        ],
    }
    try:
        child.run(con, plan)
        assert con.execute("SELECT value FROM meta WHERE key = 'seen'").fetchall() == [("1000",)]
    finally:
        con.close()


def test_a_statement_checked_by_its_count_is_kept_or_rolled_back_for_its_fallback() -> None:
    # ``child._exact``: the INSERT stays when it wrote the rows the count says it read; more rows, or a count that fails,
    # roll it back and run the fallback; a failing INSERT raises and leaves nothing half-written behind it.
    con = duckdb.connect()
    con.execute("CREATE TABLE t (x INTEGER)")
    fallback = ["INSERT INTO t VALUES (9)"]
    assert child._exact(con, "INSERT INTO t VALUES (1), (2)", {"count": "SELECT 2", "fallback": fallback})
    assert not child._exact(con, "INSERT INTO t VALUES (3), (4)", {"count": "SELECT 1", "fallback": fallback})
    assert not child._exact(con, "INSERT INTO t VALUES (5)", {"count": "SELECT * FROM missing", "fallback": fallback})
    with pytest.raises(duckdb.Error):
        child._exact(con, "INSERT INTO t VALUES ('not a number')", {"count": "SELECT 1", "fallback": fallback})
    assert sorted(r[0] for r in con.execute("SELECT x FROM t").fetchall()) == [1, 2, 9, 9]
    con.execute("INSERT INTO t VALUES (6)")  # no transaction left open
    assert con.execute("SELECT count(*) FROM t").fetchone()[0] == 5
