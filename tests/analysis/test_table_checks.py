"""Integrity checked table by table (``guard.TableChecks``): the copy reads a table only once it passed, a damaged
table fails the ingest with ``corrupt`` and nothing is published, and what SQLite's per-table check leaves out."""

from __future__ import annotations

import os
import shutil
import sqlite3
import struct
import threading
import time
from pathlib import Path

import apsw
import pytest

from analysis.api import Limits, ingest
from analysis.errors import TraceError
from analysis.readers.nsys import guard, spawn
from tests.conftest import corpus_file

BASE = "vecadd-2026.sqlite"  # small (0.6 MB); OSRT_API (read by the copy only) and OSRT_CALLCHAINS (read by
# nothing) span several pages each


def _copy(tmp_path: Path) -> Path:
    dst = tmp_path / "variant.sqlite"
    shutil.copyfile(corpus_file(BASE), dst)
    os.chmod(dst, 0o644)
    return dst


def _leaves(path: Path, table: str) -> list[int]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return [r[0] for r in con.execute("SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' "
                                          "ORDER BY pageno", (table,))]
    finally:
        con.close()


def _page_size(path: Path) -> int:
    size = struct.unpack(">H", path.read_bytes()[16:18])[0]
    return 65536 if size == 1 else size


def _damage(path: Path, page: int) -> None:
    """Overwrite the b-tree header and cell pointers of ``page``."""
    with path.open("r+b") as fh:
        fh.seek((page - 1) * _page_size(path))
        fh.write(b"\xab" * 64)


def _expect_corrupt(src: Path, tmp_path: Path) -> TraceError:
    out = tmp_path / "out" / "report.duckdb"
    out.parent.mkdir(exist_ok=True)
    with pytest.raises(TraceError) as info:
        ingest(src, out, limits=Limits(timeout_s=60))
    assert info.value.code == "corrupt", info.value.message
    assert list(out.parent.iterdir()) == []  # nothing published, no temporary left
    return info.value


def test_damaged_page_in_a_table_only_the_copy_reads_fails_the_ingest(tmp_path):
    src = _copy(tmp_path)
    leaves = _leaves(src, "OSRT_API")
    assert len(leaves) > 2 and "OSRT_API" not in guard._VALIDATION_READS
    _damage(src, leaves[1])
    err = _expect_corrupt(src, tmp_path)
    assert "integrity check failed" in err.message


def test_damaged_page_in_a_table_nothing_reads_still_fails_the_ingest(tmp_path):
    # Every table of the file is checked before the report is published, as the whole-file check did.
    src = _copy(tmp_path)
    leaves = _leaves(src, "OSRT_CALLCHAINS")
    assert len(leaves) > 2
    _damage(src, leaves[1])
    err = _expect_corrupt(src, tmp_path)
    assert "integrity check failed" in err.message


def test_a_failed_check_kills_the_copy_of_a_table_already_passed(tmp_path, monkeypatch):
    # The last table checked fails while the child copies: the child is stopped and nothing is published.
    src = _copy(tmp_path)
    real = guard.check_table

    def check(con, name):
        if name == "OSRT_CALLCHAINS":
            time.sleep(0.3)
            raise TraceError("corrupt", "SQLite's integrity check failed (planted); the file is damaged")
        real(con, name)

    monkeypatch.setattr(guard, "check_table", check)
    err = _expect_corrupt(src, tmp_path)
    assert "planted" in err.message


def test_each_statement_runs_only_after_the_tables_it_reads_passed(tmp_path, monkeypatch):
    src = corpus_file(BASE)
    real = guard.check_table
    passed: dict[str, float] = {}
    first_step = threading.Event()

    def check(con, name):
        if name in ("OSRT_API", "SCHED_EVENTS"):  # held until the copy has begun (at most 20 s)
            first_step.wait(20)
        elif name == "CUPTI_ACTIVITY_KIND_RUNTIME":
            time.sleep(0.3)
        real(con, name)
        passed[name] = time.monotonic()

    steps: list[tuple[int, float]] = []
    real_relay = spawn._relay

    def relay(progress, msg, *args):
        steps.append((int(msg["step"]), time.monotonic()))
        first_step.set()
        real_relay(progress, msg, *args)

    plans: list[dict] = []
    real_run = spawn.IngestChild.run

    def run(self, plan, *args, **kwargs):
        plans.append(plan)
        return real_run(self, plan, *args, **kwargs)

    monkeypatch.setattr(guard, "check_table", check)
    monkeypatch.setattr(spawn, "_relay", relay)
    monkeypatch.setattr(spawn.IngestChild, "run", run)
    ingest(src, tmp_path / "r.duckdb", limits=Limits(timeout_s=60), progress=lambda *a: None)
    (plan,) = plans
    needs = plan["needs"]
    assert any("OSRT_API" in n for n in needs) and any("CUPTI_ACTIVITY_KIND_RUNTIME" in n for n in needs)
    seen = {i for i, _ in steps}
    assert seen >= set(range(len(needs)))
    for i, at in steps:
        if i < len(needs):
            assert all(passed[t] <= at for t in needs[i]), (i, needs[i])
    # The copy did not wait for the whole file: its first statement ran before those tables passed.
    first = min(at for i, at in steps if i == 0)
    assert first < passed["OSRT_API"] and first < passed["SCHED_EVENTS"]


def test_the_child_stops_at_end_of_input_before_a_table_passed(tmp_path):
    # No go line for the table a statement reads: the child stops without running it.
    src = corpus_file(BASE)
    child = spawn.start_child(tmp_path / "c.duckdb", Limits())
    plan = {"src": str(src), "meta": {}, "statements": [("osrt", 'SELECT count(*) FROM src."OSRT_API"')],
            "needs": [["OSRT_API"]], "varchar_statements": [], "varchar_needs": []}

    class Never:
        progress = (0, 1)

        def wait(self, name):
            raise TraceError("corrupt", "SQLite's integrity check failed (planted)")

        def wait_all(self):
            raise AssertionError("not reached")

        def close(self):
            pass

    with pytest.raises(TraceError) as info:
        child.run(plan, time.monotonic() + 30, None, checks=Never())  # type: ignore[arg-type]
    assert info.value.code == "corrupt" and "planted" in info.value.message
    child.discard()


# What the per-table form of quick_check leaves out, on a small database built here (SQLite's pragma.c: a partial
# check verifies the freelist only for sqlite_schema and skips the search for pages no b-tree uses).


def _db(tmp_path: Path) -> Path:
    path = tmp_path / "t.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE a (x INTEGER, s TEXT)")
    con.execute("CREATE TABLE b (x INTEGER, s TEXT)")
    con.executemany("INSERT INTO a VALUES (?, ?)", [(i, "a" * 200) for i in range(400)])
    con.executemany("INSERT INTO b VALUES (?, ?)", [(i, "b" * 200) for i in range(400)])
    con.execute("DELETE FROM b WHERE x >= 200")  # leaves pages on the freelist
    con.commit()
    con.close()
    return path


def _checks(path: Path, *names: str) -> list[list[str]]:
    con = guard.open_hardened(path, time.monotonic() + 30)
    try:
        return [[r[0] for r in con.execute(f'PRAGMA main.quick_check("{n}")')] if n else
                [r[0] for r in con.execute("PRAGMA quick_check")] for n in names]
    finally:
        con.close()


def test_the_freelist_is_checked_with_sqlite_schema(tmp_path):
    path = _db(tmp_path)
    assert _checks(path, "", "sqlite_schema", "a", "b") == [["ok"]] * 4
    pages = path.stat().st_size // _page_size(path)
    with path.open("r+b") as fh:  # the first freelist trunk page: past the end of the file
        fh.seek(32)
        fh.write(struct.pack(">I", pages + 50))
    whole, schema, a, b = _checks(path, "", "sqlite_schema", "a", "b")
    assert whole != ["ok"] and schema != ["ok"]
    assert a == ["ok"] and b == ["ok"]  # the tables' own pages are intact
    with pytest.raises(TraceError) as info:
        guard.validate(path, max_bytes=2**30, timeout_s=30)
    assert info.value.code == "corrupt"


def test_a_page_no_table_uses_is_not_what_a_table_check_looks_at(tmp_path):
    # A page past the last one any b-tree or the freelist uses: the whole-file check reports it ("never used");
    # no read of any table touches it, and each table's check passes.
    path = _db(tmp_path)
    size = _page_size(path)
    data = bytearray(path.read_bytes())
    count = struct.unpack(">I", data[28:32])[0]
    data[28:32] = struct.pack(">I", count + 1)
    data += b"\x00" * size
    path.write_bytes(bytes(data))
    whole, schema, a, b = _checks(path, "", "sqlite_schema", "a", "b")
    assert any("never used" in p for p in whole)
    assert schema == a == b == ["ok"]


def test_every_table_is_checked_and_its_rows_estimated(tmp_path):
    src = corpus_file(BASE)
    con = apsw.Connection(str(src), flags=apsw.SQLITE_OPEN_READONLY)
    order = [r[0] for r in con.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")]
    rows = con.execute('SELECT max(rowid) FROM "OSRT_API"').fetchone()[0]
    con.close()
    checks = guard.TableChecks(src, order, time.monotonic() + 30, 30)
    try:
        checks.wait_all()
    finally:
        checks.close()
    assert checks.progress == (len(order), len(order))
    assert checks.rows["OSRT_API"] == rows > 0
    assert "OSRT_CALLCHAINS" not in checks.rows  # checked, not a table Goodput reads


def test_tables_with_odd_names_and_a_virtual_table_are_handled(tmp_path):
    # Every ordinary table is checked by its quoted name; a virtual table is not (its module's check would run its
    # code), its shadow tables are.
    src = _copy(tmp_path)
    con = apsw.Connection(str(src))
    con.execute('CREATE TABLE "we""ird ) x" (a)')
    con.execute('CREATE TABLE "5" (a)')
    con.execute("CREATE VIRTUAL TABLE ft USING fts5(body)")
    con.execute("INSERT INTO ft VALUES ('hello')")
    con.close()
    hardened = guard.open_hardened(src, time.monotonic() + 30)
    try:
        names = guard._check_order(guard._check_schema(hardened))
    finally:
        hardened.close()
    assert 'we"ird ) x' in names and "5" in names and "ft_data" in names and "ft" not in names
    ingest(src, tmp_path / "r.duckdb", limits=Limits(timeout_s=60))
    leaves = _leaves(src, "ft_content")
    _damage(src, leaves[0] if leaves else _root(src, "ft_content"))
    _expect_corrupt(src, tmp_path)


def _root(path: Path, table: str) -> int:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute("SELECT rootpage FROM sqlite_schema WHERE name = ?", (table,)).fetchone()[0]
    finally:
        con.close()
