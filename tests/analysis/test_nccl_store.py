"""The NCCL store's copy of its rows (``schema.ROWS_COPY_TABLE``, read by ``store.read_many`` to merge a
thousand per-rank logs quickly) holds exactly what its tables hold, and a store without it, or with a broken
one, is read from its tables."""

from __future__ import annotations

import json
import typing
from pathlib import Path

import duckdb
import pytest

from analysis.errors import TraceError
from analysis.readers.nccl import ingest
from analysis.readers.nccl.merge import merge_tables
from analysis.readers.nccl.schema import NCCL_TABLES, ROWS_COPY_MAX_ROWS, ROWS_COPY_TABLE, Tables
from analysis.readers.nccl.store import read_many, read_tables
from tests.conftest import corpus_dir

LOGS = sorted((corpus_dir() / "nccl").glob("*.log"))


def _without_copy(db: Path) -> None:
    con = duckdb.connect(str(db))
    con.execute(f"DROP TABLE {ROWS_COPY_TABLE}")
    con.close()


def _has_copy(db: Path) -> bool:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return bool(con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = ?",
                                [ROWS_COPY_TABLE]).fetchone()[0])
    finally:
        con.close()


def _rows(db: Path) -> int:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return sum(con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in NCCL_TABLES)  # noqa: S608
    finally:
        con.close()


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.name.split("__")[-1][:50])
def test_the_copy_equals_the_tables_on_every_corpus_log(path, tmp_path):
    db = tmp_path / "log.duckdb"
    ingest(path, db)
    rows = _rows(db)
    assert _has_copy(db) == (rows <= ROWS_COPY_MAX_ROWS)
    from_copy = read_tables(db)
    [from_many] = list(read_many([db]))
    if _has_copy(db):
        _without_copy(db)
    from_tables = read_tables(db)
    assert from_copy == from_tables
    assert from_many == from_tables
    assert sum(len(v) for v in from_tables.values()) == rows


def test_control_bytes_and_quotes_survive_the_copy(tmp_path):
    src = tmp_path / "odd.log"
    src.write_bytes("h'o:1:2 [0] NCCL INFO NCCL_ALGO set by environment to 'Ring'\x01\u00e9\\\"\n"
                    "h'o:1:2 [0] NCCL WARN Call to ibv_create_cq failed \x00 '; DROP TABLE meta; --\n".encode())
    db = tmp_path / "odd.duckdb"
    ingest(src, db)
    assert _has_copy(db)
    from_copy = read_tables(db)
    _without_copy(db)
    assert from_copy == read_tables(db)
    assert from_copy["nccl_env"][0]["value"].startswith("'Ring'\x01")


def test_a_broken_copy_is_ignored_and_the_tables_are_read(tmp_path):
    src = next(p for p in LOGS if "2x1-a100pcie-ib-gdr-on" in p.name)
    db = tmp_path / "log.duckdb"
    ingest(src, db)
    want = read_tables(db)
    for broken in ("not json", json.dumps([1, 2]), json.dumps({"meta": [["tool"]]}), "{}"):
        con = duckdb.connect(str(db))
        con.execute(f"DELETE FROM {ROWS_COPY_TABLE}")  # noqa: S608 - a fixed name
        con.execute(f"INSERT INTO {ROWS_COPY_TABLE} VALUES (?)", [broken])  # noqa: S608 - a fixed name
        con.close()
        assert read_tables(db) == want
        assert list(read_many([db])) == [want]


def test_read_many_reads_each_store_once_in_order_and_names_a_bad_one(tmp_path):
    dbs = []
    for i, src in enumerate(LOGS[:3]):
        db = tmp_path / f"{i}.duckdb"
        ingest(src, db)
        dbs.append(db)
    _without_copy(dbs[1])  # a store written before the copy: read table by table, through the same connection
    assert list(read_many(dbs)) == [read_tables(db) for db in dbs]
    junk = tmp_path / "junk.duckdb"
    junk.write_bytes(b"not a database" * 100)
    got = read_many([dbs[0], junk, dbs[2]])
    assert next(got) == read_tables(dbs[0])
    with pytest.raises(TraceError) as err:
        next(got)
    assert err.value.code == "corrupt"
    other = tmp_path / "other.duckdb"
    con = duckdb.connect(str(other))
    con.execute("CREATE TABLE meta (key VARCHAR, value VARCHAR)")
    con.close()
    with pytest.raises(TraceError) as err:
        list(read_many([other]))
    assert err.value.code == "unsupported_schema"


_PYTHON = {"VARCHAR": str, "BIGINT": int, "DOUBLE": float, "BOOLEAN": bool}


def _declared(table: str) -> dict[str, tuple[type, bool]]:
    """A table's row type in ``schema.Tables``: column -> (its Python type, whether it may be None)."""
    row = typing.get_args(typing.get_type_hints(Tables)[table])[0]
    out = {}
    for col, hint in typing.get_type_hints(row).items():
        args = [a for a in typing.get_args(hint) or (hint,) if a is not type(None)]
        assert len(args) == 1, (table, col, hint)
        out[col] = (args[0], type(None) in typing.get_args(hint))
    return out


def test_every_table_has_its_row_type_with_its_columns_and_types():
    """``store.typed`` trusts ``schema.Tables``: each table of the DDL has a row type there, column for column in the
    same order, each of the Python type of its DuckDB type."""
    assert list(typing.get_type_hints(Tables)) == list(NCCL_TABLES)
    for table, cols in NCCL_TABLES.items():
        declared = _declared(table)
        assert list(declared) == [c for c, _ in cols], table
        assert {c: declared[c][0] for c, _ in cols} == {c: _PYTHON[t] for c, t in cols}, table


def test_the_row_types_hold_on_every_corpus_log(tmp_path):
    """Every value of every corpus log's store (and of their merge) is of its column's declared type, and None only
    where the type allows it: a column declared not nullable that a log leaves NULL fails here."""
    dbs = []
    for i, path in enumerate(LOGS):
        db = tmp_path / f"{i}.duckdb"
        ingest(path, db)
        dbs.append(db)
    wrong = set()
    for raw in [*read_many(dbs), merge_tables([(str(i), read_tables(db)) for i, db in enumerate(dbs[:4])])[0]]:
        for table, rows in raw.items():
            declared = _declared(table)
            for row in rows:
                for col, value in row.items():
                    kind, nullable = declared[col]
                    if value is None and not nullable or value is not None and type(value) is not kind:
                        wrong.add((table, col, repr(value)[:20]))
    assert wrong == set()
