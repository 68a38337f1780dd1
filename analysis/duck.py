"""The one way the library opens DuckDB: threads and memory limit from the caller's limits, progress bar off.

DuckDB draws its progress bar on stdout for any query past 2 s (also when stdout is a pipe), which mixed
"100% ▕███▏" into `goodput analyze --format json` on a 10M-kernel export and would corrupt the ingest
child's JSON protocol; the bar is a connection-level setting (``connect``'s config refuses it), so it is set
here, once, for every connection.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb

# Every analysis query runs with this many threads unless the caller's limits say otherwise.
DUCKDB_THREADS = 2


def memory_limit(memory_bytes: int) -> str:
    """DuckDB's ``memory_limit`` setting for a budget in bytes (whole MiB, at least one)."""
    return f"{max(1, int(memory_bytes) // 2**20)}MiB"


def connect(path: str | Path | None = None, *, read_only: bool = False, memory_bytes: int | None = None,
            threads: int = DUCKDB_THREADS, **config: Any) -> duckdb.DuckDBPyConnection:
    """A connection to the DuckDB file ``path`` (None: in memory) with ``threads`` threads, a memory limit of
    ``memory_bytes`` (None: DuckDB's default, or ``memory_limit`` in ``config``), any other DuckDB settings
    in ``config``, and no progress bar."""
    settings: dict[str, Any] = {"threads": max(1, int(threads))}
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
