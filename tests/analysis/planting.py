"""Test helpers: tiny normalized reports built from the schema DDL, and planted-defect corpus variants.

``normalized(path, kernels=[...], ...)`` writes a DuckDB file in the normalized schema from plain
dicts (missing columns are NULL), for engine-level tests. The ``plant_*`` functions copy a real corpus
export and modify it with plain ``sqlite3`` (the nsys layout), so the real ingest runs on it.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

import duckdb

from analysis.schema import NSYS_TABLES, columns, ddl


def normalized(path: Path, meta: dict[str, str] | None = None, **tables: list[dict[str, Any]]) -> Path:
    """Write a normalized nsys report with the given rows; every other table exists and is empty."""
    con = duckdb.connect(str(path))
    try:
        for stmt in ddl(NSYS_TABLES):
            con.execute(stmt)
        for key, value in {"tool": "nsys", **(meta or {})}.items():
            con.execute("INSERT INTO meta VALUES (?, ?)", [key, str(value)])
        for name, rows in tables.items():
            cols = columns(NSYS_TABLES, name)
            for row in rows:
                unknown = set(row) - set(cols)
                assert not unknown, f"{name} has no column(s) {unknown}"
                con.execute(f"INSERT INTO {name} VALUES ({', '.join('?' for _ in cols)})",  # noqa: S608 - constants and server-made names
                            [row.get(c) for c in cols])
    finally:
        con.close()
    return path


def kernel(start: int, end: int, *, pid: int = 1, device: int = 0, stream: int = 7, tid: int = 1,
           name: str = "k", category: str = "compute", corr: int | None = None) -> dict[str, Any]:
    return {"pid": pid, "tid": tid, "device": device, "stream": stream, "start_ns": start, "end_ns": end,
            "name": name, "short_name": name, "category": category, "correlation_id": corr}


def api(start: int, end: int, name: str, *, pid: int = 1, tid: int = 1, corr: int | None = None) -> dict[str, Any]:
    return {"pid": pid, "tid": tid, "start_ns": start, "end_ns": end, "name": name, "kind": "runtime",
            "correlation_id": corr}


# ----------------------------------------------------------------------------- real corpus variants

def copy_export(src: Path, dst: Path) -> Path:
    """A writable copy of a (read-only) corpus export."""
    shutil.copyfile(src, dst)
    dst.chmod(0o644)
    return dst


def sqlite_rw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(str(path))


def has_table(con: sqlite3.Connection, name: str) -> bool:
    return con.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", [name]).fetchone() is not None


GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")


def shift_gpu_after(path: Path, at: int, delta: int) -> None:
    """Open a gap: every GPU operation starting at or after ``at`` moves later by ``delta`` ns."""
    con = sqlite_rw(path)
    with con:
        for table in GPU_TABLES:
            if has_table(con, table):
                con.execute(f"UPDATE {table} SET start = start + ?, end = end + ? WHERE start >= ?",  # noqa: S608 - constants and server-made names
                            [delta, delta, at])
    con.close()


def new_string(con: sqlite3.Connection, value: str) -> int:
    """Add a StringIds row and return its id."""
    sid = con.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM StringIds").fetchone()[0]
    con.execute("INSERT INTO StringIds (id, value) VALUES (?, ?)", [sid, value])
    return sid


def add_kernel_like(con: sqlite3.Connection, template_rowid: int, start: int, end: int,
                    name: str | None = None, correlation: int | None = None) -> None:
    """Insert a kernel row copied from an existing one, with new times (and name via new StringIds)."""
    cols = [r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")]
    row = dict(zip(cols, con.execute("SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid = ?",
                                     [template_rowid]).fetchone(), strict=True))
    row["start"], row["end"] = start, end
    if name is not None:
        sid = new_string(con, name)
        for c in ("shortName", "demangledName", "mangledName"):
            if c in row:
                row[c] = sid
    if correlation is not None:
        row["correlationId"] = correlation
    con.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})",  # noqa: S608 - constants and server-made names
                [row[c] for c in cols])
