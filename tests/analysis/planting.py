"""Test helpers: tiny normalized reports built from the schema DDL, and planted-defect corpus variants.

``normalized(path, kernels=[...], ...)`` writes a DuckDB file in the normalized schema from plain
dicts (missing columns are NULL), for engine-level tests. The ``plant_*`` functions copy a real corpus
export and modify it with plain ``sqlite3`` (the nsys layout), so the real ingest runs on it.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import duckdb

from analysis.api import ingest
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


# ----------------------------------------------------------------------------- raw nsys edits

def time_tables(con: sqlite3.Connection) -> list[str]:
    """Tables of the export with both ``start`` and ``end`` columns (every timed event table)."""
    out = []
    for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
        cols = {r[1] for r in con.execute(f'PRAGMA table_info("{name}")')}
        if {"start", "end"} <= cols:
            out.append(name)
    return out


def open_gap(path: Path, at: int, delta: int) -> None:
    """Everything (GPU and host) at or after ``at`` happens ``delta`` ns later; calls spanning ``at``
    last ``delta`` longer. Every existing gap keeps its length and cause; the one around ``at`` grows."""
    con = sqlite_rw(path)
    with con:
        for table in time_tables(con):
            con.execute(f'UPDATE "{table}" SET "end" = "end" + ? WHERE "end" >= ?', [delta, at])  # noqa: S608
            con.execute(f'UPDATE "{table}" SET start = start + ? WHERE start >= ?', [delta, at])  # noqa: S608
    con.close()


def clone_row(con: sqlite3.Connection, table: str, rowid: int, **changes: Any) -> int:
    """Insert a copy of one row with some columns changed; returns the new rowid."""
    cols = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
    row = dict(zip(cols, con.execute(f'SELECT * FROM "{table}" WHERE rowid = ?', [rowid]).fetchone(),  # noqa: S608
                   strict=True))
    row.update(changes)
    cur = con.execute(f'INSERT INTO "{table}" ({", ".join(chr(34) + c + chr(34) for c in cols)}) '  # noqa: S608
                      f'VALUES ({", ".join("?" for _ in cols)})', [row[c] for c in cols])
    return int(cur.lastrowid)


def raw_gpu_ops(con: sqlite3.Connection) -> list[tuple[int, int, int, int, str, int]]:
    """(pid, deviceId, start, end, table, rowid) of every GPU operation in the raw export."""
    out = []
    for table in GPU_TABLES:
        if has_table(con, table):
            out += [(r[0], r[1], r[2], r[3], table, r[4]) for r in con.execute(
                f'SELECT (globalPid >> 24) & 16777215, deviceId, start, "end", rowid FROM {table}')]  # noqa: S608
    return out


def raw_gaps(con: sqlite3.Connection) -> list[tuple[int, int, int, int]]:
    """NVIDIA's pairing on the raw export, written independently of Goodput: (pid, device, start, end).

    Profiler overhead of the process counts as busy, clipped to the device's span."""
    ops = raw_gpu_ops(con)
    units: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for pid, dev, s, e, _, _ in ops:
        units.setdefault((pid, dev), []).append((s, e))
    overhead = []
    if has_table(con, "PROFILER_OVERHEAD"):
        overhead = con.execute('SELECT (globalTid >> 24) & 16777215, start, "end" FROM PROFILER_OVERHEAD').fetchall()
    gaps = []
    for (pid, dev), ivs in units.items():
        lo, hi = min(s for s, _ in ivs), max(e for _, e in ivs)
        ivs = ivs + [(max(s, lo), min(e, hi)) for p, s, e in overhead if p == pid and s < hi and e > lo]
        starts, ends = sorted(s for s, _ in ivs), sorted(e for _, e in ivs)
        gaps += [(pid, dev, ends[i], starts[i + 1]) for i in range(len(ivs) - 1) if starts[i + 1] > ends[i]]
    return sorted(gaps)


def raw_api_names(con: sqlite3.Connection) -> list[tuple[int, int, int, str, int, int]]:
    """(rowid, start, end, name, pid, correlationId) of runtime/driver API rows, names resolved."""
    return con.execute("""SELECT r.rowid, r.start, r."end", s.value, (r.globalTid >> 24) & 16777215, r.correlationId
                          FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId""").fetchall()


_INGESTED: dict[Path, Path] = {}
_TMP: list[tempfile.TemporaryDirectory] = []


def ingested(src: Path) -> Path:
    """The normalized DuckDB file of a corpus export, ingested once per test process."""
    if src not in _INGESTED:
        if not _TMP:
            _TMP.append(tempfile.TemporaryDirectory(prefix="goodput-corpus-"))
        out = Path(_TMP[0].name) / f"{len(_INGESTED)}-{src.stem}.duckdb"
        ingest(src, out)
        _INGESTED[src] = out
    return _INGESTED[src]
