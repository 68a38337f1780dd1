"""Test helpers: tiny normalized reports built from the schema DDL, and planted-defect corpus variants.

``normalized(path, kernels=[...], ...)`` writes a DuckDB file in the normalized schema from plain
dicts (missing columns are NULL), for engine-level tests. The ``plant_*`` functions copy a real corpus
export and modify it with plain ``sqlite3`` (the nsys layout), so the real ingest runs on it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import duckdb

from analysis.api import ingest
from analysis.diagnosis.findings import Evidence, Finding
from analysis.diagnosis.rules.registry import finding_extras
from analysis.readers.schema import NSYS_TABLES, columns, ddl


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


def point_tables(con: sqlite3.Connection) -> list[str]:
    """Tables of the export with a ``start`` column and no ``end`` (point events: scheduler switches, CPU samples,
    page faults)."""
    out = []
    for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
        cols = {r[1] for r in con.execute(f'PRAGMA table_info("{name}")')}
        if "start" in cols and "end" not in cols:
            out.append(name)
    return out


def open_gap(path: Path, at: int, delta: int) -> None:
    """Everything (GPU and host, point events included) at or after ``at`` happens ``delta`` ns later; calls
    spanning ``at`` last ``delta`` longer (and a thread switched out across it stays out). Every existing gap
    keeps its length and cause; the one around ``at`` grows."""
    con = sqlite_rw(path)
    with con:
        for table in time_tables(con):
            con.execute(f'UPDATE "{table}" SET "end" = "end" + ? WHERE "end" >= ?', [delta, at])  # noqa: S608
            con.execute(f'UPDATE "{table}" SET start = start + ? WHERE start >= ?', [delta, at])  # noqa: S608
        for table in point_tables(con):
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


# One ingest per distinct export content and test session: the planted variants that leave an
# export as it was (``unchanged``, silent plants, the untouched peer of a run), identical plants and the
# corpus exports tests read as they are share it. Keyed by the bytes' SHA-256, never by the path alone (a
# plant rewrites a copy in place). Under pytest the files live in the session's tmp dir (see
# tests/analysis/conftest.py: one per xdist worker, so workers never share a file); else in a temporary dir.
_INGESTED: dict[str, Path] = {}                     # content digest -> ingested DuckDB file (read-only use)
_DIGESTS: dict[tuple, str] = {}                     # (path, size, mtime, ctime, inode) -> content digest
_CACHE_DIR: list[Path] = []
_TMP: list[tempfile.TemporaryDirectory] = []


def use_cache_dir(path: Path) -> None:
    """Keep this session's ingested files under ``path`` (pytest's tmp dir)."""
    _CACHE_DIR.append(path)


def _cache_dir() -> Path:
    if not _CACHE_DIR:
        _TMP.append(tempfile.TemporaryDirectory(prefix="goodput-corpus-"))
        _CACHE_DIR.append(Path(_TMP[0].name))
    return _CACHE_DIR[-1]


def content_digest(path: Path) -> str:
    """SHA-256 of the file's bytes (remembered while the file's size, times and inode stay the same)."""
    st = path.stat()
    sig = (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    if sig not in _DIGESTS:
        h = hashlib.sha256()
        with path.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
        _DIGESTS[sig] = h.hexdigest()
    return _DIGESTS[sig]


def ingested(src: Path) -> Path:
    """The normalized DuckDB file of an export, ingested once per test session for its content.

    Shared by every test that asks for the same bytes: read it, never write it (``ingest_copy`` gives a
    test a file of its own)."""
    key = content_digest(src)
    out = _INGESTED.get(key)
    if out is None or not out.exists():
        out = _cache_dir() / f"{len(_INGESTED)}-{src.stem}.duckdb"
        ingest(src, out)
        _INGESTED[key] = out
    return out


def ingest_copy(src: Path, out: Path) -> Path:
    """``ingest(src, out)``, copied from the session's ingest of the same bytes when there is one."""
    if any(src.with_name(src.name + side).exists() for side in ("-wal", "-journal")):
        ingest(src, out)  # uncommitted SQLite changes beside the file: its bytes are not its content
        return out
    shutil.copyfile(ingested(src), out)
    return out


def corpus_rows(short: str, sql: str) -> list[tuple]:
    """``sql`` on the corpus export ``short``, opened read-only: the direct query a test checks a number against."""
    from tests.conftest import corpus_file

    con = sqlite3.connect(f"file:{corpus_file(short)}?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def finding_of(rule_id: str, impact_ns: int, **keys: Any) -> Finding:
    """A finding of ``rule_id`` as a test plants it (what the verdict reads): ``keys`` are the finding's own fields
    (``phase``, ``title``, ``host_functions``, ``evidence`` as dicts ...) or its rule's extra fields. An extra field
    not given is None, as a finding's JSON without the key reads, or its default where it has one; a key that is
    neither raises."""
    extra_type = finding_extras().get(rule_id)
    own = {f.name: f for f in dataclasses.fields(extra_type)} if extra_type is not None else {}
    base = {k: v for k, v in keys.items() if k not in own}
    unknown = set(base) - {f.name for f in dataclasses.fields(Finding)}
    if unknown:
        raise TypeError(f"{rule_id}: neither the finding nor its extra has {sorted(unknown)}")
    extra = None if extra_type is None else extra_type(**{
        n: keys.get(n) for n, f in own.items()
        if n in keys or (f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)})
    base["evidence"] = tuple(Evidence(**e) for e in base.get("evidence", ()))
    return Finding(**{"rule_id": rule_id, "title": f"{rule_id} title", "message": "", "impact_ns": impact_ns,
                      "impact_pct": None, "advice": "", "extra": extra, **base})
