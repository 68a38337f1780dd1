"""Read-only handles on ingested reports (one DuckDB file each) and on a run (several reports)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from analysis.duck import DUCKDB_THREADS as DUCKDB_THREADS  # where callers and tests read it
from analysis.duck import connect, memory_limit

# DuckDB settings of every analysis connection: analysis runs beside other workers, so it gets bounded
# threads and memory like the ingest (``analysis.api.Limits``); queries beyond the memory limit spill
# to ``<file>.tmp`` beside the DuckDB file. The arrays the rules keep in NumPy come on top (see
# benchmarks/analyze.py for the peak on a 10M-kernel export). The service sets the memory limit from
# GOODPUT_ANALYSIS_MEMORY_BYTES through ``analysis.api.analyze``. 512 MiB: at 10M kernels the launches' join and
# quantiles filled 1 GiB (1.6 GiB resident with the arrays kept) and a scan keeps what it read cached up to the
# limit; at 512 MiB the whole analysis peaks at 1.3 GiB, every number the same (docs/speed.md).
DUCKDB_MEMORY_BYTES = 512 * 2**20
# ``Trace.arrays`` hands DuckDB's freed result buffers back to the OS after a result at least this big.
RELEASE_BYTES = 64 << 20
# DuckDB keeps every block of the file it has read cached up to its memory limit: 400 MiB of a 10M-kernel
# report's 565 MB file, under the NumPy arrays the passes keep beside it (another 700 MiB there). The blocks
# are dropped (``shed_cache``) only on a file at least this big: what the next query reads it then reads again
# (from the OS's page cache).
SHED_FILE_BYTES = 256 << 20
SHED_KEEP_BYTES = 16 << 20  # of cached blocks, what a shedding may leave
# Before a rule (``make_room``) the blocks are dropped only when the process's resident set plus DuckDB's memory
# limit (room for what the rule's queries may take; each rule of a 10M-kernel analysis rose at most 450 MiB
# above its start) exceeds this. Dropping them before every rule kept the peak there too, but the rules that
# read what the previous one had read read it again (docs/speed.md).
SHED_PEAK_BYTES = 1536 << 20
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
# A file smaller than this is queried with one DuckDB thread instead of ``DUCKDB_THREADS``. DuckDB splits a scan
# into row groups of 122,880 rows: a small report's tables hold one or a few, so a second thread has almost no
# work to take and each of the ~150 queries of an analysis pays for waking and joining it. On the 24 small
# corpus exports (up to 4.7 MB ingested) one thread took 12 % less wall time and 30 % less CPU for the
# analysis (medians, under SCHED_FIFO), every output identical; on exports replicated to 100k and 400k kernels
# (8 and 24 MiB files) the same wall time or 4 % less, and 17-20 % less CPU (docs/speed.md).
ONE_THREAD_FILE_BYTES = 32 << 20
# DuckDB's ``asof_loop_join_threshold`` on analysis connections (its default: 64; see ``Trace.con``).
ASOF_LOOP_JOIN_ROWS = 0

# Timed tables a window restricts (see ``Trace.window``); the others (meta, devices, threads...) are
# facts about the whole report and stay as they are.
WINDOWED_TABLES = ("kernels", "memcpy", "memset", "cuda_api", "sync", "nvtx", "osrt", "overhead", "nccl_calls",
                   "nic_metrics", "off_cpu")

# A quoted string (left as it is: "$x" inside one is text) or a named parameter.
_PARAM = re.compile(r"'(?:[^']|'')*'|\$([A-Za-z_][A-Za-z0-9_]*)")


def _literal(value: Any) -> str | None:
    """A typed SQL literal for a scalar parameter, the type DuckDB binds it as; None: bind it instead."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        for low, high, name in ((-(2**31), 2**31, "INTEGER"), (-(2**63), 2**63, "BIGINT"), (0, 2**64, "UBIGINT"),
                                (-(2**127), 2**127, "HUGEINT")):
            if low <= value < high:  # the type DuckDB's Python client binds the value as
                return f"({value}::{name})"
        return None
    if isinstance(value, float):
        return f"('{value!r}'::DOUBLE)"
    if isinstance(value, str) and "\x00" not in value:
        return "('" + value.replace("'", "''") + "'::VARCHAR)"
    if isinstance(value, list | tuple) and all(isinstance(v, str) and "\x00" not in v for v in value):
        return "([" + ", ".join("'" + v.replace("'", "''") + "'" for v in value) + "]::VARCHAR[])"
    return None


# A value a query binds: a scalar, or a list of them (``unnest($s::BIGINT[])``).
SqlValue = int | float | str | bool | None | Sequence[int] | Sequence[float] | Sequence[str]
SqlParams = Mapping[str, SqlValue] | Sequence[SqlValue] | None


def inline_params(query: str, params: SqlParams) -> tuple[str, SqlParams]:
    """Named scalar parameters written into the query as typed literals (strings quoted, so a value
    cannot change the statement), the rest left bound. Binding any parameter makes DuckDB's Python
    client import pandas when it is installed (0.5 s, more than a small report's whole analysis)."""
    if not params:
        return query, []
    if not isinstance(params, Mapping):
        return query, params
    literals: dict[str, str] = {}
    for k, v in params.items():
        lit = _literal(v)
        if lit is None:  # a value only binding can carry: bind them all
            return query, params
        literals[k] = lit
    return _PARAM.sub(lambda m: literals.get(m.group(1), m.group(0)) if m.group(1) else m.group(0), query), []


@dataclass
class Trace:
    """One ingested report, opened read-only. ``label`` names it in findings (usually the file name)."""

    path: Path
    label: str
    memory_bytes: int = DUCKDB_MEMORY_BYTES  # DuckDB's memory limit on this trace's connection
    _con: duckdb.DuckDBPyConnection | None = field(default=None, repr=False)
    _db: str = field(default="", repr=False)  # the database's name, quoted for SQL (set with a window's views)
    # Derived data kept while the trace is open (e.g. analysis.model.activity's sorted arrays), keyed by a name
    # or by a tuple of a name and the parameters it was computed with.
    memo: dict[str | tuple, Any] = field(default_factory=dict, repr=False)
    # (start_ns, end_ns): the trace shows only what happens in this window. Each timed table becomes a
    # temporary view of the rows overlapping it, their start and end clipped to it, so every rule and
    # summary runs on the window unchanged and durations inside it stay exact.
    window: tuple[int, int] | None = None

    @property
    def _memory_limit(self) -> str:
        return memory_limit(self.memory_bytes)

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            self._con = connect(self.path, read_only=True, memory_bytes=self.memory_bytes,
                                threads=1 if self._small_file else DUCKDB_THREADS)
            # DuckDB runs an ASOF join whose left side it estimates under 64 rows as a nested loop (each row
            # against every right row, then the nearest kept): the NVTX projection's two ASOF joins took 90 of
            # its 108 ms that way on a 1.3 MB export (786 ranges against 3,689 launches). The sort-merge ASOF
            # join gives the same rows (``ASOF_LOOP_JOIN_ROWS``: never the loop; docs/speed.md).
            self._con.execute(f"SET asof_loop_join_threshold = {ASOF_LOOP_JOIN_ROWS}")
            if self.window is not None:
                self._install_window(self._con)
        return self._con

    def _install_window(self, con: duckdb.DuckDBPyConnection) -> None:
        """Shadow each timed table with a temporary view restricted and clipped to the window.

        A row belongs to the window when it overlaps it, or (zero-length operations, NVTX marks) when it
        starts inside it; the view's name resolves before the file's table (temporary objects come first).
        A small file's (``ONE_THREAD_FILE_BYTES``) windowed rows are copied once into temporary tables of the
        same names instead: the ~150 statements of its analysis then each scan one small table, not the view's
        three branches (0.01-0.06 s of a 0.15-0.5 s analysis on the corpus); a large file's would not fit.
        A table without rows is left as it is (the window of nothing is nothing), and a small file's copy reads no
        longest duration first (only the view's third branch needs it, to reach the file's zone maps): on the
        small corpus exports 4-8 of the 11 tables are empty, and each statement costs about 0.4-1 ms.
        """
        assert self.window is not None  # called only for a windowed trace
        lo, hi = (int(v) for v in self.window)
        db = con.execute("SELECT current_database()").fetchall()[0][0].replace('"', '""')
        self._db = db  # ``stored`` names the tables behind the views
        # ``estimated_size`` is the stored row count: 0 only for a table without rows.
        present = dict(con.execute("SELECT table_name, estimated_size FROM duckdb_tables() "
                                   "WHERE NOT temporary AND schema_name = 'main'").fetchall())
        for table in WINDOWED_TABLES:
            if not present.get(table):
                continue
            clip = f"GREATEST(start_ns, {lo}) AS start_ns, LEAST(end_ns, {hi}) AS end_ns"
            clipped = f'SELECT * REPLACE ({clip}), rowid FROM "{db}".main."{table}" WHERE'  # noqa: S608 - integers, constants
            # Rows inside the window pass unchanged, so filters on their times still reach the file's zone maps;
            # only the few rows crossing an edge are clipped (the third branch: those crossing the end that start
            # inside the window). A row crossing the end starts at most the table's longest duration before it:
            # in a view that bound keeps the third branch to a narrow time range (the same rows).
            after = lo
            if not self._small_file:
                longest = int(con.execute(f'SELECT COALESCE(MAX(end_ns - start_ns), 0) FROM "{db}".main."{table}"')  # noqa: S608
                              .fetchall()[0][0])
                after = max(lo, hi - longest)
            con.execute(f"""
                CREATE TEMP {'TABLE' if self._small_file else 'VIEW'} "{table}" AS
                SELECT *, rowid FROM "{db}".main."{table}"
                WHERE start_ns >= {lo} AND start_ns < {hi} AND (end_ns <= {hi} OR end_ns IS NULL)
                UNION ALL {clipped} start_ns < {lo} AND end_ns > {lo}
                UNION ALL {clipped} start_ns >= {after} AND start_ns < {hi} AND end_ns > {hi}""")  # noqa: S608

    def windowed(self, start_ns: int, end_ns: int) -> Trace:
        """The same report seen through the window ``[start_ns, end_ns)`` (its own connection and memo)."""
        if end_ns < start_ns:
            raise ValueError(f"window ends before it starts: {start_ns} > {end_ns}")
        return Trace(self.path, self.label, self.memory_bytes, window=(int(start_ns), int(end_ns)))

    def stored(self, table: str, lo: int | None = None, hi: int | None = None) -> str:
        """The SQL name to read ``table`` by, bypassing the window's view where that changes nothing: for a query
        that keeps only the rows overlapping ``[lo, hi)`` and clips them to it itself, when that range lies
        inside the window (the view would repeat the filter and the clipping: its three branches cost about
        twice a plain scan, 0.5 CPU s per painting at 10M kernels). Without a range: the stored table, for
        facts about the whole report that a superset cannot change (the distinct names of a table)."""
        if self.window is None or table not in WINDOWED_TABLES:
            return f'"{table}"'
        if lo is not None and hi is not None and not (self.window[0] <= lo and hi <= self.window[1]):
            return f'"{table}"'
        _ = self.con  # installs the window's views, which records the database's name
        return f'"{self._db}".main."{table}"'

    def sql(self, query: str, params: SqlParams = None) -> list[tuple]:
        """Run a query with named ``$name`` parameters and return all rows."""
        query, params = inline_params(query, params)
        return self.con.execute(query, params).fetchall()

    def arrays(self, query: str) -> dict[str, np.ndarray]:
        """Run a SELECT (no parameters: server-made text only) and return its columns as NumPy arrays.

        Goes through the relation API: on large results from joins and filters it is 2-3x faster than
        ``execute(...).fetchnumpy()`` here (DuckDB 1.5). Bound parameters on that path are much slower
        still, hence none. NULLs must be COALESCEd in the SQL: the masks of NULL cells are dropped here.
        """
        out = {k: np.asarray(v) for k, v in self.con.sql(query).fetchnumpy().items()}
        # DuckDB's allocator keeps the freed result buffers (hundreds of MB on big results) for reuse;
        # setting the memory limit again hands them back to the OS without evicting cached table data,
        # so that the NumPy work that follows does not stack on top of them. Small results (the slices of
        # time the passes fetch one after another) keep theirs: the next slice reuses them instead of
        # faulting fresh pages in (a third of a slice loop's CPU at 10M kernels).
        # On a big file the cached blocks go too where the resident set needs the room (``make_room``): the
        # NumPy work on a big result is what raises the peak, and the blocks the query read wait beside it.
        if sum(v.nbytes for v in out.values()) >= RELEASE_BYTES:
            if self._short_of_room():
                self.shed_cache()
            else:
                self.con.execute(f"SET memory_limit = '{self._memory_limit}'")
        return out

    def scalar(self, query: str, params: SqlParams = None) -> Any:
        query, params = inline_params(query, params)
        row = self.con.execute(query, params).fetchone()
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
        # Remembered while the trace is open: the report is read-only, and the rules ask about the same
        # few tables dozens of times (a query each, through the window's views on a windowed trace).
        key = ("has_rows", table)
        if key not in self.memo:
            self.memo[key] = self.scalar(f'SELECT 1 FROM "{table}" LIMIT 1') is not None  # noqa: S608 - name checked above
        return bool(self.memo[key])

    @property
    def rank(self) -> int | None:
        value = self.meta.get("rank")
        return None if value in (None, "") else int(value)

    @property
    def session_start_utc_ns(self) -> int | None:
        value = self.meta.get("session_start_utc_ns")
        return None if value in (None, "") else int(value)

    def make_room(self) -> None:
        """Before a rule: ``shed_cache`` when the resident set leaves less than DuckDB's memory limit under
        ``SHED_PEAK_BYTES`` (or cannot be read); otherwise the cached blocks stay for the rule to reuse."""
        if self._con is not None and self._short_of_room():
            self.shed_cache()

    def _short_of_room(self) -> bool:
        """A big file whose process has less than DuckDB's memory limit left under ``SHED_PEAK_BYTES``."""
        if not self._big_file:
            return False
        resident = resident_bytes()
        return resident is None or resident + self.memory_bytes > SHED_PEAK_BYTES

    def shed_cache(self) -> None:
        """Drop DuckDB's cached blocks of the file (``SHED_FILE_BYTES``; a small file keeps them) and the
        allocator's freed buffers: a lower memory limit makes DuckDB evict what is not in use, then the limit
        is set back. Nothing read changes: only where the next query finds its blocks."""
        if self._con is None or not self._big_file:
            return
        kept = self._con.execute("SELECT COALESCE(SUM(memory_usage_bytes), 0) FROM duckdb_memory() "
                                 "WHERE tag <> 'BASE_TABLE'").fetchall()[0][0]
        try:
            self._con.execute(f"SET memory_limit = '{memory_limit(int(kept) + SHED_KEEP_BYTES)}'")
        except duckdb.Error:  # something else holds memory it cannot let go: keep the cache
            pass
        finally:
            self._con.execute(f"SET memory_limit = '{self._memory_limit}'")

    @cached_property
    def _big_file(self) -> bool:
        try:
            return self.path.stat().st_size >= SHED_FILE_BYTES
        except OSError:
            return False

    @cached_property
    def _small_file(self) -> bool:
        try:
            return self.path.stat().st_size < ONE_THREAD_FILE_BYTES
        except OSError:
            return False

    def close(self) -> None:
        self.memo.clear()
        if self._con is not None:
            self._con.close()
            self._con = None


def resident_bytes() -> int | None:
    """This process's resident set in bytes (Linux's ``/proc/self/statm``); None where it cannot be read."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE_BYTES
    except (OSError, ValueError, IndexError):
        return None


def clock_offsets(starts: list[int | None]) -> list[int] | None:
    """``Run.offsets`` from the reports' session starts (ns since 1970; None when unknown)."""
    if len(starts) <= 1:
        return [0] * len(starts)
    if any(s is None for s in starts):
        return None
    base = min(s for s in starts if s is not None)
    return [int(s) - base for s in starts if s is not None]


@dataclass
class Run:
    """The reports of one profiled execution (one per rank, nsys and ncu mixed).

    Cross-rank work goes through ``con``: one DuckDB connection, with the same thread and memory limits
    as every report's own connection, that has every report of the run attached read-only (``alias``),
    and through ``offsets``, the one definition of how the ranks' clocks are aligned.
    """

    traces: list[Trace]
    memory_bytes: int = DUCKDB_MEMORY_BYTES  # DuckDB's memory limit on the run's connection
    _con: duckdb.DuckDBPyConnection | None = field(default=None, repr=False)
    # The nsys reports' kernel groups (analysis.diagnosis.ncu.impact.NsysKernels) when the run holds only some
    # of its reports (analysis.run.runner analyzes report by report): what ncu links to instead of ``traces``.
    nsys_kernels: list[Any] | None = None

    def of_tool(self, tool: str) -> list[Trace]:
        return [t for t in self.traces if t.tool == tool]

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """An in-memory connection with every report attached read-only as ``r0``, ``r1`` ... (run order)."""
        if self._con is None:
            con = connect(memory_bytes=self.memory_bytes)
            try:
                for i, t in enumerate(self.traces):
                    path = str(t.path).replace("'", "''")  # server-made paths; quoted all the same
                    con.execute(f"ATTACH '{path}' AS r{i} (READ_ONLY)")
            except BaseException:
                con.close()
                raise
            self._con = con
        return self._con

    def alias(self, trace: Trace) -> str:
        """The schema name under which ``trace`` is attached to ``con``."""
        for i, t in enumerate(self.traces):
            if t is trace:
                return f"r{i}"
        raise ValueError(f"{trace.label} is not a report of this run")

    def offsets(self, traces: list[Trace]) -> list[int] | None:
        """Per trace, the ns to add to its session-relative times to put ``traces`` on one time base.

        The base is the earliest session start among them, so the offsets are the (small) differences of
        the ranks' wall-clock session starts and aligned times stay as small as the traces' own: absolute
        clocks (ns since 1970, ~1.7e18) never enter the arithmetic. One trace needs no alignment ([0]);
        None when several traces must be aligned and one lacks its session start.
        """
        return clock_offsets([t.session_start_utc_ns for t in traces])

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None
        for t in self.traces:
            t.close()

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @classmethod
    def open(cls, paths: list[Path], labels: list[str] | None = None,
             memory_bytes: int = DUCKDB_MEMORY_BYTES) -> Run:
        """``memory_bytes``: DuckDB's memory limit on each report's connection and on the run's."""
        labels = labels or [Path(p).name for p in paths]
        return cls([Trace(Path(p), label, memory_bytes) for p, label in zip(paths, labels, strict=True)],
                   memory_bytes)
