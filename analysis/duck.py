"""The one way the library opens DuckDB (threads and memory limit from the caller's limits, progress bar off), and
the one way a reader publishes the normalized file it wrote (temporary name beside it, fsync, atomic rename).

DuckDB draws its progress bar on stdout for any query past 2 s (also when stdout is a pipe), which mixed
"100% ▕███▏" into `goodput analyze --format json` on a 10M-kernel export and would corrupt the ingest
child's JSON protocol; the bar is a connection-level setting (``connect``'s config refuses it), so it is set
here, once, for every connection.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import duckdb

# Every analysis query runs with this many threads unless the caller's limits say otherwise.
DUCKDB_THREADS = 2


def memory_limit(memory_bytes: int) -> str:
    """DuckDB's ``memory_limit`` setting for a budget in bytes (whole MiB, at least one)."""
    return f"{max(1, int(memory_bytes) // 2**20)}MiB"


# A DuckDB setting's value, as ``duckdb.connect(config=...)`` takes it.
DuckSetting = str | bool | int | float | list[str]


def connect(path: str | Path | None = None, *, read_only: bool = False, memory_bytes: int | None = None,
            threads: int = DUCKDB_THREADS, **config: DuckSetting) -> duckdb.DuckDBPyConnection:
    """A connection to the DuckDB file ``path`` (None: in memory) with ``threads`` threads, a memory limit of
    ``memory_bytes`` (None: DuckDB's default, or ``memory_limit`` in ``config``), any other DuckDB settings
    in ``config``, and no progress bar."""
    settings: dict[str, DuckSetting] = {"threads": max(1, int(threads))}
    if memory_bytes is not None:
        settings["memory_limit"] = memory_limit(memory_bytes)
    settings.update(config)
    con = duckdb.connect(":memory:" if path is None else str(path), read_only=read_only, config=settings)
    try:
        con.execute("SET enable_progress_bar = false")
    except BaseException:
        con.close()
        raise
    return con


def cursor(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """A new connection to ``con``'s database (DuckDB's "cursor": the database's threads and memory limit, its own
    temporary objects and session settings), with no progress bar, like ``connect``'s."""
    cur = con.cursor()
    try:
        cur.execute("SET enable_progress_bar = false")
    except BaseException:
        cur.close()
        raise
    return cur


def fsync_path(path: Path, *, directory: bool = False) -> None:
    """Flush ``path`` to disk: a file's bytes, or a directory's entries (after a rename in it)."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(tmp: Path, out: Path) -> None:
    """Make the complete, closed file ``tmp`` appear at ``out`` at once and durably: fsync it, rename it onto
    ``out`` (``os.replace``, atomic on one filesystem), fsync the directory. Readers see the old ``out`` or the
    whole new one, never a part, also after a crash."""
    fsync_path(tmp)
    os.replace(tmp, out)
    fsync_path(out.parent, directory=True)


@contextlib.contextmanager
def publishing(out: Path, *, threads: int = DUCKDB_THREADS) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection to a new DuckDB file written under a temporary name beside ``out`` (``.<name>.<hex>.tmp``,
    the name reconcile sweeps after a killed attempt). When the block ends normally the file is checkpointed,
    closed and published onto ``out`` (``publish``); on any error it and its WAL are removed and ``out`` is
    left as it was."""
    tmp = out.with_name(f".{out.name}.{uuid.uuid4().hex}.tmp")
    try:
        con = connect(tmp, threads=threads)
        try:
            yield con
            con.execute("CHECKPOINT")
        finally:
            con.close()
        publish(tmp, out)
    except BaseException:
        for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
        raise
