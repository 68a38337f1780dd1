"""Validation of an untrusted nsys export through a hardened, read-only SQLite connection (apsw).

This runs before anything else touches the file. It checks size, header and integrity, classifies
every object we will read by ``sqlite_schema.type`` (a view or trigger where a table is expected is
refused), discovers columns with ``pragma_table_info`` and checks their declared types, and reads the
small tables (export metadata, session start, allow-listed environment, enum tables) by explicit
column lists. The bulk copy (``analysis.readers.nsys.child``) may then read the verified table names only.

Integrity is checked one table at a time (``TableChecks``: SQLite's ``PRAGMA quick_check(TABLE)``), first
``sqlite_schema`` (with the freelist), then every table before anything reads it: the small tables before
validation reads them, the bulk tables in background threads while the copy runs, each one before the copy
may read it (docs/security.md, "Integrity, table by table").
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import apsw

from analysis import fmt
from analysis.errors import TraceError
from analysis.readers.nsys import enums
from analysis.readers.nsys.env import ALLOWED_KEYS, job_facts, parse_capture
from analysis.readers.nsys.source import (
    BULK_TABLES,
    INT,
    NSYS_MARKERS,
    NUMBER,
    REAL,
    REFINING_EFFECT,
    SOURCE_TABLES,
    affinity,
)

SQLITE_MAGIC = b"SQLite format 3\x00"
# Any single event timestamp above this is absolute UTC ns (1e17 ns is three years: no session is that long).
ABSOLUTE_NS = 10**17
# The declared affinities read for each expected type (SQLite's NUMERIC holds integers as well).
_ACCEPTED = {INT: (INT, "NUMERIC"), NUMBER: (INT, REAL, "NUMERIC")}
_SOURCE_FOLDED = frozenset(n.casefold() for n in SOURCE_TABLES)
ESSENTIAL = frozenset(("StringIds", *BULK_TABLES))  # unreadable -> unsupported_schema, not silently empty
# What the report lacks when an auxiliary table cannot be read.
AUX_EFFECT = {
    "TARGET_INFO_SESSION_START_TIME": "wall-clock start unknown, so this rank cannot be aligned with others",
    "TARGET_INFO_SYSTEM_ENV": "rank, world size, job id and host unknown",
    "TARGET_INFO_GPU": "GPU names and properties unknown",
    "TARGET_INFO_CUDA_GPU": "GPU names and properties unknown",
    "TARGET_INFO_CUDA_DEVICE": "device ordinals not mapped to GPUs",
    "ThreadNames": "thread names unknown",
    "COMPOSITE_EVENTS": "CPU samples not read (HOST002 cannot say where the host was)",
    "SAMPLING_CALLCHAINS": "functions of the CPU samples unknown",
    "PROCESSES": "process names unknown",
    "GPU_METRICS": "GPU metrics samples not read",
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE": "CUDA graph replays not read (their GPU time counts as idle)",
    "TARGET_INFO_GPU_METRICS": "GPU metrics names unknown",
    "NET_NIC_METRIC": "NIC metrics not read",
    "TARGET_INFO_NETWORK_METRICS": "NIC metric names unknown",
    "NIC_ID_MAP": "NIC names unknown",
    "TARGET_INFO_NIC_INFO": "NIC names unknown",
    "NVTX_PAYLOAD_SCHEMA_ENTRIES": "NCCL message sizes not read (COMM003 cannot compute collective bandwidth)",
    "META_DATA_EXPORT": "nsys version and time base read from the data instead",
    "EXPORT_META_DATA": "nsys version and time base read from the data instead",
    "META_DATA_CAPTURE": "captured process environment not used for rank and world size",
}
_META_KEYS = (
    "EXPORT_PRODUCT_VERSION", "EXPORT_SCHEMA_VERSION", "EXPORT_PARAM_TIME_NORMALIZE", "EXPORT_TIME_NORMALIZE",
    "EXPORT_CONFIG_TIME_SHIFT", "DERIVED_FROM", "DERIVED_WINDOW_NS",
)


@dataclass
class ExportInfo:
    """What validation learned; everything the bulk copy needs besides the file itself."""

    path: Path
    size: int
    tables: dict[str, list[str]] = field(default_factory=dict)   # verified table -> columns present
    meta: dict[str, str] = field(default_factory=dict)           # selected export metadata
    session_start_utc_ns: int | None = None
    time_offset_ns: int = 0              # subtract from every event time to get session-relative ns
    facts: dict[str, str | None] = field(default_factory=dict)   # rank, world_size, host ... (allow-listed)
    capture: dict[str, str] = field(default_factory=dict)         # the capture settings it records (CAPTURE_SETTINGS)
    cpu_layout: dict[str, str] = field(default_factory=dict)      # cpu_logical, cpu_sockets (``cpu_layout``)
    # Parts of the export that could not be read and what the report lacks for it ({table, columns, effect}).
    degraded: list[dict] = field(default_factory=list)
    decoders: dict[str, dict[int, str]] = field(default_factory=dict)
    # Bytes the verified tables occupy in the file (their b-tree pages); None until ``measure_table_bytes``
    # walks them, which only a disk too full for the file's own size needs.
    table_bytes: int | None = None
    rows: dict[str, int] = field(default_factory=dict)   # verified table -> max(rowid), for progress only
    # The per-table integrity checks (``TableChecks``); every read of a table waits for its check to pass.
    checks: TableChecks | None = field(default=None, repr=False, compare=False)

    @property
    def version(self) -> str:
        return self.meta.get("EXPORT_PRODUCT_VERSION") or "unrecorded (pre-2021.5)"


def _uri(path: Path) -> str:
    return "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro&immutable=1"


def harden(con: apsw.Connection, deadline: float) -> apsw.Connection:
    """``con`` with defensive mode on, views, triggers, untrusted schema functions and extension loading
    off, and a deadline checked every 10,000 steps (every connection to an uploaded export gets these)."""
    con.config(apsw.SQLITE_DBCONFIG_DEFENSIVE, 1)
    con.config(apsw.SQLITE_DBCONFIG_ENABLE_VIEW, 0)
    con.config(apsw.SQLITE_DBCONFIG_ENABLE_TRIGGER, 0)
    con.config(apsw.SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0)
    con.config(apsw.SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0)
    con.execute("PRAGMA trusted_schema=OFF")
    con.set_progress_handler(lambda: time.monotonic() > deadline, 10_000)
    return con


def open_hardened(path: Path, deadline: float) -> apsw.Connection:
    """A read-only connection with defensive mode on, views/triggers off and a deadline on every step."""
    return harden(apsw.Connection(_uri(path), flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI), deadline)


def _check_header(path: Path, size: int, max_bytes: int) -> None:
    if size == 0:
        raise TraceError("empty_file", "the file is empty (0 bytes); export the report again")
    if size > max_bytes:
        raise TraceError("too_large", f"the file is {fmt.count(size)} bytes; the limit is {fmt.count(max_bytes)} bytes. "
                         "Export a shorter time range (nsys export --times) or raise the limit")
    with path.open("rb") as fh:
        head = fh.read(100)
    if not head.startswith(SQLITE_MAGIC):
        raise TraceError("not_sqlite", "the file is not an SQLite database; upload the .sqlite file written "
                         "by `nsys export --type sqlite`")
    if len(head) < 100:
        raise TraceError("corrupt", "the file is shorter than an SQLite header; it was cut off in transfer")


def validate(path: Path, *, max_bytes: int, timeout_s: float, pipelined: bool = False) -> ExportInfo:
    """Validate an untrusted export and read its small tables. Raises ``TraceError``.

    With ``pipelined``, the tables validation does not read itself are still being checked when it returns:
    ``info.checks`` says when each one has passed, and the caller must ``close()`` it. Otherwise every table
    has passed its check on return."""
    path = Path(path)
    size = os.stat(path).st_size
    _check_header(path, size, max_bytes)
    deadline = time.monotonic() + timeout_s
    checks: TableChecks | None = None
    try:
        con = open_hardened(path, deadline)
        try:
            tables = _check_schema(con)
            checks = TableChecks(path, _check_order(tables), deadline, timeout_s)
            info = _validate(con, path, size, checks)
        finally:
            con.close()
        if not pipelined:
            checks.wait_all()
            checks.close()
            info.checks = None  # every table has passed
        return info
    except BaseException as exc:
        if checks is not None:
            checks.close()
        if isinstance(exc, apsw.Error):
            raise typed_error(exc, timeout_s) from None
        raise


def typed_error(exc: apsw.Error, timeout_s: float) -> TraceError:
    """The ``TraceError`` for an SQLite error met while validating or checking an export."""
    if isinstance(exc, apsw.InterruptError):
        return TraceError("timeout", f"validating the file took longer than {fmt.exact(timeout_s)} s; "
                          "export a shorter time range or raise the limit")
    if isinstance(exc, apsw.NotADBError):
        return TraceError("not_sqlite", "the file has an SQLite header but is not a readable database")
    if isinstance(exc, (apsw.CorruptError, apsw.FormatError, apsw.RangeError, apsw.IOError)):
        return TraceError("corrupt", f"SQLite cannot read the file ({type(exc).__name__}); it is damaged or "
                          "was cut off in transfer: export or copy it again")
    detail = " ".join(str(exc).split())[:200]
    return TraceError("corrupt", f"SQLite refused the file ({type(exc).__name__}: {detail}); export it again")


def check_table(con: apsw.Connection, name: str) -> None:
    """SQLite's ``quick_check`` of one table and its indexes (``sqlite_schema``: also the freelist); TraceError
    ``corrupt`` when it finds a problem. Its b-tree pages, overflow chains and records are checked as the whole-file
    check does; what the per-table form leaves out is pages used by no table and pages shared by two tables, which
    no read of this table touches (docs/security.md)."""
    ident = '"' + name.replace('"', '""') + '"'
    try:
        problems = [r[0] for r in con.execute(f"PRAGMA main.quick_check({ident})")]
    except (apsw.CorruptError, apsw.FormatError, apsw.RangeError) as exc:
        problems = [type(exc).__name__]  # a page it could not even read
    if problems != ["ok"]:
        found = " ".join("; ".join(map(str, problems[:5])).split())[:300]  # one line: it ends up on stderr
        raise TraceError("corrupt", f"SQLite's integrity check failed on table {name[:100]} ({found}); the file is "
                         "damaged: export or copy it again")


# The tables validation reads itself (checked before it reads them, in this order), then the bulk tables in the
# order the copy reads them (``normalize.statements``); the other tables of SOURCE_TABLES and then every other
# table follow. The order decides only how soon the copy may go on, never whether a table is checked.
_VALIDATION_READS = (
    "META_DATA_EXPORT", "EXPORT_META_DATA", "TARGET_INFO_SESSION_START_TIME", "TARGET_INFO_SYSTEM_ENV",
    "META_DATA_CAPTURE", "StringIds",
)
_COPY_ORDER = (
    "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET", "NVTX_EVENTS",
)


def _check_schema(con: apsw.Connection) -> dict[str, str]:
    """Check ``sqlite_schema`` (and with it the freelist) and SQLite's own tables, which SQLite reads by itself
    when it loads a schema (``sqlite_stat1``, ``sqlite_stat4``); every table of the file: name -> kind."""
    check_table(con, "sqlite_schema")
    tables: dict[str, str] = {}
    for name, sql in con.execute("SELECT name, sql FROM sqlite_schema WHERE type = 'table'"):
        if isinstance(name, str):
            tables.setdefault(name, "virtual" if str(sql or "").upper().startswith("CREATE VIRTUAL") else "table")
    for name, kind in tables.items():
        if kind == "table" and name.lower().startswith("sqlite_"):
            check_table(con, name)
    return tables


def _check_order(tables: dict[str, str]) -> list[str]:
    """Every ordinary table not checked yet, in the order it is needed. Virtual tables are never read, and
    their module's own check would run their code: their shadow tables are ordinary tables and are checked."""
    rest = [n for n, k in tables.items() if k == "table" and not n.lower().startswith("sqlite_")]
    first = [n for n in (*_VALIDATION_READS, *enums.enum_tables().values(), *_COPY_ORDER, *SOURCE_TABLES)
             if n in rest]
    return list(dict.fromkeys(first + rest))


class TableChecks:
    """``check_table`` for each of ``order``, in background threads, each with its own hardened connection (the
    check releases the GIL). ``wait(name)`` returns once that table has passed and raises the first failure of any
    table; with each check, a source table's row estimate is recorded in ``rows``."""

    THREADS = 2

    def __init__(self, path: Path, order: list[str], deadline: float, timeout_s: float) -> None:
        self.order = list(order)
        self.rows: dict[str, int] = {}
        self._path, self._deadline, self._timeout_s = path, deadline, timeout_s
        self._next = 0
        self._passed: set[str] = set()
        self._error: TraceError | None = None
        self._cancelled = False
        self._cond = threading.Condition()
        self._threads = [threading.Thread(target=self._work, name=f"table-check-{i}", daemon=True)
                         for i in range(min(self.THREADS, max(1, len(self.order))))]
        for t in self._threads:
            t.start()

    def _work(self) -> None:
        con = None
        try:
            con = open_hardened(self._path, self._deadline)
            con.set_progress_handler(lambda: self._cancelled or time.monotonic() > self._deadline, 10_000)
            while True:
                with self._cond:
                    if self._cancelled or self._error is not None or self._next >= len(self.order):
                        return
                    name = self.order[self._next]
                    self._next += 1
                check_table(con, name)
                if name in SOURCE_TABLES:
                    self.rows[name] = _row_estimate(con, name)
                with self._cond:
                    self._passed.add(name)
                    self._cond.notify_all()
        except TraceError as exc:
            self._fail(exc)
        except apsw.Error as exc:
            self._fail(typed_error(exc, self._timeout_s))
        except BaseException as exc:  # any failure fails the ingest, in the caller's thread
            self._fail(TraceError("internal", f"checking the file failed ({type(exc).__name__}: {exc})"[:300]))
        finally:
            if con is not None:
                con.close()

    def _fail(self, exc: TraceError) -> None:
        with self._cond:
            if self._error is None and not self._cancelled:
                self._error = exc
            self._cond.notify_all()

    def _wait_for(self, done: Callable[[], bool]) -> None:
        with self._cond:
            while True:
                if self._error is not None:
                    raise self._error
                if done():
                    return
                if self._cancelled:
                    raise TraceError("internal", "the integrity checks were stopped")
                self._cond.wait(timeout=1.0)
                if time.monotonic() > self._deadline + 5 and not done():
                    raise typed_error(apsw.InterruptError(), self._timeout_s)

    def wait(self, name: str) -> None:
        """Return once ``name`` has passed its check; TraceError if any check failed."""
        if name not in self.order:
            raise ValueError(f"{name} is not among the tables checked")
        self._wait_for(lambda: name in self._passed)

    def wait_all(self) -> None:
        self._wait_for(lambda: len(self._passed) == len(self.order))

    def passed(self, name: str) -> bool:
        with self._cond:
            return name in self._passed

    @property
    def progress(self) -> tuple[int, int]:
        """(tables passed, tables to check)."""
        return len(self._passed), len(self.order)

    def close(self) -> None:
        """Stop the checks still running (their connections are interrupted) and wait for the threads."""
        with self._cond:
            self._cancelled = True
            self._cond.notify_all()
        for t in self._threads:
            t.join()


def _unsafe(what: str) -> None:
    raise TraceError("unsafe_schema", f"{what}; a real nsys export never has one. The file was altered after "
                     "export: export it again from the .nsys-rep report")


def _validate(con: apsw.Connection, path: Path, size: int, checks: TableChecks) -> ExportInfo:
    kinds: dict[str, str] = {}
    for kind, name, on, sql in con.execute("SELECT type, name, tbl_name, sql FROM sqlite_schema"):
        if not isinstance(name, str):
            continue
        kinds.setdefault(name, kind)
        # SQLite resolves names case-insensitively, so must we: a view 'stringids' would answer for StringIds.
        if name.casefold() in _SOURCE_FOLDED and (kind != "table" or name not in SOURCE_TABLES):
            if kind == "table":
                continue  # same letters, other case: not a name we read (DuckDB is told the exact name)
            _unsafe(f"'{name}' is a {kind}, not a table")
        if name in SOURCE_TABLES and kind != "table":
            _unsafe(f"'{name}' is a {kind}, not a table")
        if kind == "table" and name in SOURCE_TABLES and str(sql or "").upper().startswith("CREATE VIRTUAL"):
            _unsafe(f"'{name}' is a virtual table")
        if kind == "trigger" and str(on).casefold() in _SOURCE_FOLDED:
            _unsafe(f"table '{on}' carries a trigger")
    tables = {n for n, k in kinds.items() if k == "table"}
    if "StringIds" not in tables or not tables.intersection(NSYS_MARKERS):
        raise TraceError("not_nsys_export", "an SQLite database without the tables of an Nsight Systems export "
                         "(StringIds, CUPTI_ACTIVITY_KIND_*, NVTX_EVENTS ...); export the report with "
                         "`nsys export --type sqlite`")
    info = ExportInfo(path=path, size=size, checks=checks)
    info.rows = checks.rows  # filled as each source table passes its check (for progress only)
    info.meta = _read_meta(con, tables, checks)
    for name, spec in SOURCE_TABLES.items():
        if name not in tables:
            continue
        xinfo = list(con.execute("SELECT name, type, hidden FROM pragma_table_xinfo(?)", (name,)))
        if any(hidden in (2, 3) for _, _, hidden in xinfo):
            # Generated columns run expressions from the file's own schema on every read.
            _unsafe(f"table '{name}' has generated columns")
        declared = {col: typ for col, typ, hidden in xinfo if hidden == 0}
        # A column of another type than nsys writes is never read (it would reach typed SQL): as if missing.
        wrong = [c for c, t in spec.columns.items()
                 if c in declared and affinity(declared[c]) not in _ACCEPTED.get(t, (t,))]
        missing = [c for c in spec.required if c not in declared]
        core_missing = [c for c in spec.core if c not in declared]
        core_wrong = [c for c in spec.core if c in wrong]
        if core_missing or core_wrong:
            what = (f"lacks column(s) {', '.join(core_missing)}" if core_missing
                    else f"has unexpected type(s) for {', '.join(core_wrong)}")
            if name not in ESSENTIAL:
                # An auxiliary table another tool rewrote: do without it, and say so.
                info.degraded.append({"table": name, "columns": core_missing or core_wrong,
                                      "effect": f"not read ({what}): {AUX_EFFECT.get(name, 'its facts are unknown')}"})
                continue
            raise TraceError("unsupported_schema", f"table {name} {what} (nsys {info.version}, export schema "
                             f"{info.meta.get('EXPORT_SCHEMA_VERSION', 'unrecorded')}); this version of "
                             "Goodput cannot read it", {"version": info.version, "table": name,
                                                        "columns": core_missing or core_wrong})
        lost = [c for c in spec.columns if c in missing or c in wrong]
        if lost:
            info.degraded.append({"table": name, "columns": lost, "effect": "; ".join(
                dict.fromkeys(REFINING_EFFECT.get(c, f"{c} unknown") for c in lost))})
        info.tables[name] = [c for c in spec.columns if c in declared and c not in wrong]
    _read_small(con, info)
    return info


def measure_table_bytes(info: ExportInfo, timeout_s: float = 600.0) -> int:
    """``info.table_bytes``, measured on a hardened connection the first time it is asked for.

    Not part of ``validate``: SQLite's dbstat reads every page of those tables (0.23 s of CPU and, on a cold
    cache, 1.8 s at 2M kernels), and the space check needs it only when the file's size does not fit."""
    if info.table_bytes is None:
        if info.checks is not None:
            info.checks.wait_all()  # dbstat reads every page of those tables
        try:
            con = open_hardened(info.path, time.monotonic() + timeout_s)
            try:
                info.table_bytes = _table_bytes(con, list(info.tables))
            finally:
                con.close()
        except apsw.Error as exc:  # the file passed validation: it changed since, or the deadline passed
            raise TraceError("corrupt", f"SQLite cannot read the file any more ({type(exc).__name__}); "
                             "export or copy it again") from None
    return info.table_bytes


def _table_bytes(con: apsw.Connection, names: list[str]) -> int:
    """The pages the tables we read occupy (SQLite's dbstat, one row per b-tree): what ingest copies."""
    if not names:
        return 0
    marks = ",".join("?" * len(names))
    sql = f"SELECT sum(pgsize) FROM dbstat WHERE aggregate = 1 AND name IN ({marks})"  # noqa: S608 - marks only
    row = con.execute(sql, names).fetchone()
    return int(row[0] or 0) if row else 0


def _waiter(info: ExportInfo) -> Callable[[str], None]:
    """``info.checks.wait``: returns once the table has passed its integrity check (no-op without checks)."""
    return info.checks.wait if info.checks is not None else (lambda name: None)


def _row_estimate(con: apsw.Connection, name: str) -> int:
    """max(rowid) walks one b-tree edge, not the table: the progress bar's row estimate (0 if unknown)."""
    try:
        row = con.execute(f'SELECT max(rowid) FROM "{name}"').fetchone()  # noqa: S608 - verified name
    except apsw.SQLError:  # a WITHOUT ROWID table: no estimate, and no reason to refuse the file here
        return 0
    return int(row[0]) if row and isinstance(row[0], int) else 0


def _read_meta(con: apsw.Connection, tables: set[str], checks: TableChecks) -> dict[str, str]:
    out: dict[str, str] = {}
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if table in tables:
            checks.wait(table)
            cols = {r[0] for r in con.execute("SELECT name FROM pragma_table_info(?)", (table,))}
            if {"name", "value"} <= cols:
                marks = ",".join("?" * len(_META_KEYS))
                sql = f'SELECT name, value FROM "{table}" WHERE name IN ({marks})'  # noqa: S608 - fixed names
                for name, value in con.execute(sql, _META_KEYS):
                    if isinstance(name, str) and value is not None:
                        out.setdefault(name, str(value)[:200])
    return out


MAX_CPU_INFO_BYTES = 1 << 20  # a real CpuInfo is ~60 bytes per logical CPU


def cpu_layout(cpu_info: str | None) -> dict[str, str]:
    """The host's CPU layout as nsys records it (``TARGET_INFO_SYSTEM_ENV`` ``CpuInfo``: per logical CPU its
    ``cpuid`` and ``socket``; nothing says which logical CPUs share a core): ``cpu_logical`` (how many) and
    ``cpu_sockets`` (runs ``first-last:socket``, comma-separated); empty when absent or malformed."""
    if not cpu_info or len(cpu_info) > MAX_CPU_INFO_BYTES:
        return {}
    try:
        items = json.loads(cpu_info).get("items")
        pairs = sorted({(int(i["cpuid"]), int(i["socket"])) for i in items})
    except (ValueError, TypeError, KeyError, AttributeError):
        return {}
    if not pairs or len({c for c, _ in pairs}) != len(pairs) or any(c < 0 or s < 0 for c, s in pairs):
        return {}
    runs: list[list[int]] = []
    for c, sock in pairs:
        if runs and runs[-1][1] == c - 1 and runs[-1][2] == sock:
            runs[-1][1] = c
        else:
            runs.append([c, c, sock])
    return {"cpu_logical": str(len(pairs)), "cpu_sockets": ",".join(f"{a}-{b}:{k}" for a, b, k in runs)}


def _read_small(con: apsw.Connection, info: ExportInfo) -> None:
    t = info.tables
    wait = _waiter(info)
    if "TARGET_INFO_SESSION_START_TIME" in t:
        wait("TARGET_INFO_SESSION_START_TIME")
        row = con.execute('SELECT "utcEpochNs" FROM "TARGET_INFO_SESSION_START_TIME" LIMIT 1').fetchone()
        if row and isinstance(row[0], int) and row[0] > 0:
            info.session_start_utc_ns = row[0]
    env = host = cpu_info = None
    if "TARGET_INFO_SYSTEM_ENV" in t:
        wait("TARGET_INFO_SYSTEM_ENV")
        for name, value in con.execute('SELECT "name", "value" FROM "TARGET_INFO_SYSTEM_ENV" '
                                       "WHERE name IN ('DeviceEnvironment', 'Hostname', 'CpuInfo') ORDER BY rowid"):
            if name == "DeviceEnvironment" and env is None and isinstance(value, str):
                env = value
            elif name == "Hostname" and host is None and isinstance(value, str):
                host = value
            elif name == "CpuInfo" and cpu_info is None and isinstance(value, str):
                cpu_info = value
    info.cpu_layout = cpu_layout(cpu_info)
    if "META_DATA_CAPTURE" in t:
        wait("META_DATA_CAPTURE")
    if "StringIds" in t:
        wait("StringIds")
    info.facts = job_facts(env, host, _captured_processes(con, t), _env_blocks(con, t))
    info.capture = _capture_settings(con, t)
    enum_rows: dict[str, list[tuple[int, str]]] = {}
    for table in enums.enum_tables().values():
        if table in t:
            wait(table)
            enum_rows[table] = [(i, n) for i, n in con.execute(f'SELECT "id", "name" FROM "{table}"')  # noqa: S608
                                if isinstance(i, int) and isinstance(n, str)]
    info.decoders = enums.decoders(enum_rows)
    info.time_offset_ns = _time_offset(con, info)


# Bounds on what is read of the two other places the environment lives (a real export has a few hundred
# captured variables and a few dozen environment blocks).
MAX_CAPTURE_ROWS = 100_000
MAX_ENV_BLOCKS = 1_000
MAX_ENV_BLOCK_BYTES = 1 << 20


def _captured_processes(con: apsw.Connection, info_tables: dict[str, list[str]]) -> list[dict[str, str]]:
    """The allow-listed variables of each process in ``META_DATA_CAPTURE`` (``PROCESS_<n>:ENVIRONMENT_VARIABLE``)."""
    if "META_DATA_CAPTURE" not in info_tables:
        return []
    # LIKE prefilters on the allowed keys (case-insensitively); parse_capture keeps exact keys only.
    keys = sorted(ALLOWED_KEYS)
    likes = " OR ".join("value LIKE ?" for _ in keys)
    per: dict[str, list[str]] = {}
    sql = (f'SELECT "name", "value" FROM "META_DATA_CAPTURE" WHERE name LIKE \'PROCESS%:ENVIRONMENT_VARIABLE\' '  # noqa: S608 - fixed text
           f"AND ({likes}) LIMIT {MAX_CAPTURE_ROWS}")
    for name, value in con.execute(sql, [k + "=%" for k in keys]):
        if isinstance(name, str) and isinstance(value, str):
            per.setdefault(name, []).append(value)
    return [parse_capture(v) for v in per.values()]


# The capture settings the export records (nsys 2023.3+, ``META_DATA_CAPTURE``) that say which host data was asked
# for: OS runtime calls (``--trace=osrt``: an ``OSRuntime`` capture event type) and CPU sampling (``--sample=cpu``:
# IP/backtrace samples collected). Only these fixed names are read, never the environment beside them.
CAPTURE_SETTINGS = {"capture_osrt": ("CAPTURE_EVENT_TYPE", "OSRuntime"),
                    "capture_sample_cpu": ("LINUX_PERF_OPTIONS:COLLECT_IP_BACKTRACE_SAMPLES", "true")}


def _capture_settings(con: apsw.Connection, info_tables: dict[str, list[str]]) -> dict[str, str]:
    """``capture_osrt`` / ``capture_sample_cpu``: ``true`` or ``false`` as the export's capture settings record them;
    absent when it records no settings (older exports: the tables say what was collected)."""
    if "META_DATA_CAPTURE" not in info_tables:
        return {}
    names = sorted({name for name, _ in CAPTURE_SETTINGS.values()})
    rows = [(n, v) for n, v in con.execute(
        f'SELECT "name", "value" FROM "META_DATA_CAPTURE" WHERE "name" IN ({", ".join("?" for _ in names)}) '  # noqa: S608
        "LIMIT 1000", names) if isinstance(n, str) and isinstance(v, str)]
    if not rows:
        return {}
    return {key: str(any(n == name and v == value for n, v in rows)).lower()
            for key, (name, value) in CAPTURE_SETTINGS.items()}


def _env_blocks(con: apsw.Connection, info_tables: dict[str, list[str]]) -> list[str]:
    """NUL-joined ``K=V`` environment blocks of the traced processes, from ``StringIds``."""
    if "StringIds" not in info_tables:
        return []
    sql = ('SELECT "value" FROM "StringIds" WHERE instr(CAST("value" AS BLOB), x\'00\') > 0 '  # noqa: S608 - ints
           f'AND length(CAST("value" AS BLOB)) <= {MAX_ENV_BLOCK_BYTES} LIMIT {MAX_ENV_BLOCKS}')
    rows = con.execute(sql)
    return [v for (v,) in rows if isinstance(v, str)]


def _first_start(con: apsw.Connection, info: ExportInfo) -> int | None:
    """The first stored event start of the main activity tables (rowid order: no scan, no sort)."""
    probes = (("CUPTI_ACTIVITY_KIND_KERNEL", ""), ("CUPTI_ACTIVITY_KIND_RUNTIME", ""),
              ("CUPTI_ACTIVITY_KIND_MEMCPY", ""), ("NVTX_EVENTS", " WHERE eventType <> 75"))
    for table, where in probes:
        if table in info.tables:
            _waiter(info)(table)
            row = con.execute(f'SELECT "start" FROM "{table}"{where} LIMIT 1').fetchone()  # noqa: S608
            if row and isinstance(row[0], int):
                return row[0]
    return None


def _time_offset(con: apsw.Connection, info: ExportInfo) -> int:
    """What to subtract so that times are ns from session start: exports made with time normalisation
    (``EXPORT_PARAM_TIME_NORMALIZE=true``) store absolute UTC ns, shifted by ``EXPORT_CONFIG_TIME_SHIFT``."""
    flag = (info.meta.get("EXPORT_PARAM_TIME_NORMALIZE") or info.meta.get("EXPORT_TIME_NORMALIZE") or "").lower()
    shift = info.meta.get("EXPORT_CONFIG_TIME_SHIFT", "")
    start = info.session_start_utc_ns
    if flag == "true":
        if shift.isdigit() and int(shift) > 0:
            return int(shift)
        if start:
            return start
    first = _first_start(con, info)
    if first is not None and first > ABSOLUTE_NS:
        # Absolute clock without the flag (tools that edit exports drop metadata): anchor on the session
        # start when it precedes the events, else on the first event.
        return start if start and start <= first else first
    return 0
