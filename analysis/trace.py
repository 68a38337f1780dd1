"""Read-only handles on ingested reports (one DuckDB file each) and on a run (several reports)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

# DuckDB settings of every analysis connection: analysis runs beside other workers, so it gets bounded
# threads and memory like the ingest (``analysis.api.Limits``); queries beyond the memory limit spill
# to ``<file>.tmp`` beside the DuckDB file. The arrays the rules keep in NumPy come on top (see
# benchmarks/analyze.py for the peak on a 10M-kernel export). The service sets the memory limit from
# GOODPUT_ANALYSIS_MEMORY_BYTES through ``analysis.api.analyze``.
DUCKDB_THREADS = 2
DUCKDB_MEMORY_BYTES = 1024**3


@dataclass
class Trace:
    """One ingested report, opened read-only. ``label`` names it in findings (usually the file name)."""

    path: Path
    label: str
    memory_bytes: int = DUCKDB_MEMORY_BYTES  # DuckDB's memory limit on this trace's connection
    _con: duckdb.DuckDBPyConnection | None = field(default=None, repr=False)
    # Derived data kept while the trace is open (e.g. analysis.activity's sorted arrays).
    memo: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def _memory_limit(self) -> str:
        return f"{max(1, int(self.memory_bytes) // 2**20)}MiB"

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            self._con = duckdb.connect(str(self.path), read_only=True, config={
                "threads": DUCKDB_THREADS, "memory_limit": self._memory_limit})
        return self._con

    def sql(self, query: str, params: dict[str, Any] | list[Any] | None = None) -> list[tuple]:
        """Run a query with bound parameters and return all rows."""
        return self.con.execute(query, params or []).fetchall()

    def arrays(self, query: str) -> dict[str, np.ndarray]:
        """Run a SELECT (no parameters: server-made text only) and return its columns as NumPy arrays.

        Goes through the relation API: on large results from joins and filters it is 2-3x faster than
        ``execute(...).fetchnumpy()`` here (DuckDB 1.5). Bound parameters on that path are much slower
        still, hence none. NULLs must be COALESCEd in the SQL: the masks of NULL cells are dropped here.
        """
        out = {k: np.asarray(v) for k, v in self.con.sql(query).fetchnumpy().items()}
        # DuckDB's allocator keeps the freed result buffers (hundreds of MB on big results) for reuse;
        # setting the memory limit again hands them back to the OS without evicting cached table data,
        # so that the NumPy work that follows does not stack on top of them.
        self.con.execute(f"SET memory_limit = '{self._memory_limit}'")
        return out

    def scalar(self, query: str, params: dict[str, Any] | list[Any] | None = None) -> Any:
        row = self.con.execute(query, params or []).fetchone()
        return None if row is None else row[0]

    @cached_property
    def meta(self) -> dict[str, str]:
        return dict(self.sql("SELECT key, value FROM meta"))

    @property
    def tool(self) -> str:
        return self.meta.get("tool", "nsys")

    @cached_property
    def tables(self) -> set[str]:
        return {r[0] for r in self.sql("SELECT table_name FROM duckdb_tables()")}

    def has_rows(self, table: str) -> bool:
        """True when the table exists and holds at least one row."""
        if table not in self.tables:
            return False
        return self.scalar(f'SELECT 1 FROM "{table}" LIMIT 1') is not None  # noqa: S608 - name checked above

    @property
    def rank(self) -> int | None:
        value = self.meta.get("rank")
        return None if value in (None, "") else int(value)

    @property
    def session_start_utc_ns(self) -> int | None:
        value = self.meta.get("session_start_utc_ns")
        return None if value in (None, "") else int(value)

    def close(self) -> None:
        self.memo.clear()
        if self._con is not None:
            self._con.close()
            self._con = None


@dataclass
class Run:
    """The reports of one profiled execution (one per rank, nsys and ncu mixed)."""

    traces: list[Trace]

    def of_tool(self, tool: str) -> list[Trace]:
        return [t for t in self.traces if t.tool == tool]

    def close(self) -> None:
        for t in self.traces:
            t.close()

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @classmethod
    def open(cls, paths: list[Path], labels: list[str] | None = None,
             memory_bytes: int = DUCKDB_MEMORY_BYTES) -> Run:
        """``memory_bytes``: DuckDB's memory limit on each report's connection."""
        labels = labels or [Path(p).name for p in paths]
        return cls([Trace(Path(p), label, memory_bytes) for p, label in zip(paths, labels, strict=True)])
