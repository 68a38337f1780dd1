"""The bulk copy, run as a separate process: a malformed export can only exhaust or crash this child.

Started by ``analysis.readers.nsys.spawn`` as ``python -m analysis.readers.nsys.child``, possibly before the export is
validated (its start-up then overlaps the parent's work). It reads two JSON lines on stdin. The first
(the setup: output file, limits) makes it cap its own address space (RLIMIT_AS) before DuckDB is
imported, open the temporary DuckDB file and load DuckDB's signed sqlite_scanner (by path; its signature
checked by DuckDB, or by an earlier load of the same file: ``scanner_verified``); none of that touches the
export. The second (the plan, sent only once the export passed
validation) makes it attach the export read-only, run the plan's statements and report each step as one
JSON line on stdout. End of input before the plan: it exits without reading anything.

The export's tables are still being checked when the plan comes (``guard.TableChecks``): the plan says which
tables each statement reads (``needs``), and a statement runs only once a ``{"go": [TABLE, ...]}`` line has
said that each of them passed its integrity check. End of input before that: it stops without reading them.

Imports only the standard library before the setup line, and DuckDB after: this module is the cost of
every ingest, so it stays small (``python -X importtime -m analysis.readers.nsys.child``).
"""

from __future__ import annotations

import json
import os
import resource
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # DuckDB is imported once the child has started (start-up time)
    import duckdb


def extension_path(duckdb_version: str) -> Path:
    """The signed sqlite_scanner binary shipped by the ``duckdb-extension-sqlite-scanner`` package."""
    from importlib.util import find_spec

    # find_spec, not import: the package's __init__ is all we need the location of.
    spec = find_spec("duckdb_extension_sqlite_scanner")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the duckdb-extension-sqlite-scanner package is not installed")
    base = Path(next(iter(spec.submodule_search_locations)))
    return base / "extensions" / f"v{duckdb_version}" / "sqlite_scanner.duckdb_extension"


# DuckDB checks the scanner's signature at every LOAD: a SHA-256 of its 34 MB and an RSA verification, 0.1 s of
# CPU, the largest part of the ingest child's start-up and so of every small `goodput analyze`. The check is
# done once: after a load with the check on, the file's identity (device, inode, size, modification and
# change times, which no write, rename or chmod leaves as they were) is recorded in a stamp file of this
# user; a later child that finds the same identity, before and after its load, loads that binary with the
# check off. Anything else (no stamp, another file, a stamp not owned by this user or writable by others,
# an unreadable stamp) loads with the check on, which refuses a binary DuckDB did not sign.
STAMP_NAME = "sqlite_scanner.verified.json"


def stamp_path() -> Path:
    """Where the scanner's verification is recorded: ``$XDG_CACHE_HOME/goodput`` (default ``~/.cache``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "goodput" / STAMP_NAME


def _identity(path: Path) -> dict:
    st = os.stat(path)
    return {"path": str(path), "dev": st.st_dev, "ino": st.st_ino, "size": st.st_size,
            "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns}


def scanner_verified(ext: Path) -> dict | None:
    """The identity of ``ext`` when a checked load recorded that same identity, else None."""
    try:
        stamp = stamp_path()
        fd = os.open(stamp, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            st = os.fstat(fd)
            if st.st_uid != os.getuid() or st.st_mode & 0o022 or st.st_size > 4096:
                return None
            recorded = json.loads(os.read(fd, 4096))
        finally:
            os.close(fd)
        now = _identity(ext)
    except (OSError, ValueError):
        return None
    return now if recorded == now else None


def _record_verified(ext: Path, identity: dict) -> None:
    """Record ``identity`` (taken before a checked load of ``ext`` that succeeded) when the file is unchanged;
    best effort: a cache that cannot be written only costs the next child the check."""
    from analysis.duck import publish

    stamp = stamp_path()
    tmp = stamp.with_name(f".{stamp.name}.{os.getpid()}.tmp")
    try:
        if _identity(ext) != identity:
            return
        stamp.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, json.dumps(identity).encode())
        finally:
            os.close(fd)
        publish(tmp, stamp)  # whole or not at all, as every file a reader writes
    except OSError:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass


def load_scanner(con, ext: Path, verified: dict | None) -> None:
    """LOAD the scanner ``ext`` on ``con`` (opened with unsigned loads allowed only when ``verified``)."""
    if verified is None:
        try:
            before = _identity(ext)
        except OSError:
            before = None
        con.execute("LOAD " + _quote(str(ext)))  # signature checked by DuckDB
        if before is not None:
            _record_verified(ext, before)
        return
    con.execute("LOAD " + _quote(str(ext)))
    try:
        after = _identity(ext)
    except OSError:
        after = None
    if after != verified:  # replaced while it loaded: this process stops, the next one checks it
        raise RuntimeError("the sqlite_scanner binary changed while it was loaded")


def _say(**msg: object) -> None:
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def open_output(setup: dict) -> duckdb.DuckDBPyConnection:
    """The temporary DuckDB file with our limits and the scanner loaded; the export is not touched yet."""
    import duckdb

    from analysis.duck import connect

    ext = extension_path(duckdb.__version__)
    verified = scanner_verified(ext)
    con = connect(setup["tmp"], threads=int(setup["threads"]), **{
        "memory_limit": f"{int(setup['duckdb_memory_bytes']) // 2**20}MB",
        "preserve_insertion_order": False,
        "autoinstall_known_extensions": False,
        "autoload_known_extensions": False,
        "temp_directory": setup["temp_directory"],
        # Hand freed memory back to the OS between statements, so peak RSS tracks the live working set.
        "allocator_flush_threshold": "64MB",
        "allocator_bulk_deallocation_flush_threshold": "128MB",
        # Only for the scanner binary whose signature an earlier load checked (``scanner_verified``).
        **({"allow_unsigned_extensions": True} if verified is not None else {}),
    })  # analysis.duck turns the progress bar off: stdout carries our JSON protocol, nothing else
    # Names repeat across millions of rows: dictionary compression fits them, and FSST's analysis pass was the
    # largest single cost of writing the string columns. A SET, not a connect option: DuckDB 1.5 takes that option
    # and ignores it (the setting stays empty), which left FSST on: 0.5 s of the 9.8 s of CPU of a 2M-kernel copy.
    con.execute("SET disabled_compression_methods = 'fsst'")
    load_scanner(con, ext, verified)
    from analysis.readers.schema import NSYS_TABLES, ddl

    # The empty tables now: the export is not needed for them, and this overlaps the parent's validation.
    con.execute("BEGIN")
    for stmt in ddl(NSYS_TABLES):
        con.execute(stmt)
    con.execute("COMMIT")
    return con


def _literal(text: str) -> str:
    # Hex, decoded by DuckDB: exact for any text (NUL included) and nothing in it is ever parsed as SQL.
    return f"decode(from_hex('{str(text).encode().hex()}'))"


def insert_meta(con, meta: dict) -> None:
    """The meta rows as literals: the first statement with bound parameters makes DuckDB's Python
    module import pandas (0.7 s here), a cost every ingest would pay for a handful of strings."""
    if meta:
        rows = ", ".join(f"({_literal(k)}, {_literal(v)})" for k, v in sorted(meta.items()))
        con.execute(f"INSERT INTO meta VALUES {rows}")  # noqa: S608 - hex literals only


class Stopped(Exception):
    """The parent closed the input before a table the next statement reads had passed its check."""


class Gate:
    """The tables that have passed their integrity check, as the parent's ``go`` lines say."""

    def __init__(self, plan: dict) -> None:
        self.gated = "needs" in plan
        self.passed: set[str] = set()

    def wait(self, tables: list[str]) -> None:
        """Return once every table of ``tables`` has passed; ``Stopped`` at end of input first."""
        if not self.gated:
            return
        while not self.passed.issuperset(tables):
            line = sys.stdin.readline()
            if not line:
                raise Stopped("the export's integrity check did not pass")
            msg = json.loads(line)
            self.passed.update(str(t) for t in msg.get("go") or ())


def run(con, plan: dict) -> list[str]:
    """Attach the validated export and run the plan's statements, each in a transaction of its own; returns the
    labels of the statements that fell back to their grouped join (``_exact``).

    The file is published only once every statement has run (``ingest.ingest_nsys``), so one transaction for the
    whole copy bought nothing; committing each statement lets the next one's plan see the rows of the temporary
    tables the earlier ones built. In one transaction they were uncommitted, estimated at 0 rows, so every launch
    join built its hash table on the launch table (one entry per API call): now a GPU table smaller than it is the
    side hashed (docs/speed.md, "seventh ingest round")."""
    from analysis.readers.schema import NSYS_TABLES

    gate = Gate(plan)
    insert_meta(con, plan["meta"])
    con.execute(f"ATTACH {_quote(plan['src'])} AS src (TYPE sqlite, READ_ONLY)")
    varchar = plan.get("varchar_statements") or []
    if varchar:
        # A second, separate view of the same export for the reads that need every column as text: an
        # attached SQLite database keeps the column types it first bound for the whole transaction.
        con.execute(f"ATTACH {_quote(plan['src'])} AS srcv (TYPE sqlite, READ_ONLY)")
    # From here on the process may touch no other file (the output and its spill directory aside).
    con.execute("SET enable_external_access = false")
    # The few reads that need every column as text (BLOBs in TEXT columns: NVTX binary payloads), before
    # the configuration is locked; the setting is restored before any other statement runs.
    if varchar:
        con.execute("SET sqlite_all_varchar = true")
        for sql, needs in zip(varchar, plan.get("varchar_needs") or [[]] * len(varchar), strict=True):
            gate.wait(needs)
            con.execute(sql)
        con.execute("SET sqlite_all_varchar = false")
    if plan.get("threads"):  # a small export: fewer threads than the child was started with
        con.execute(f"SET threads = {max(1, int(plan['threads']))}")
    con.execute("SET lock_configuration = true")
    steps = plan["statements"]
    needs = plan.get("needs") or [[]] * len(steps)
    # Progress by step: the parent weighs each step by the rows of the table it reads.
    regrouped = []
    for i, (step, need) in enumerate(zip(steps, needs, strict=True)):
        gate.wait(need)
        _say(stage=step[0], step=i)
        exact = step[2] if len(step) > 2 else None
        if exact is None:
            con.execute(step[1])
        elif not _exact(con, step[1], exact):
            regrouped.append(step[0])
    con.execute("DETACH src")
    if varchar:
        con.execute("DETACH srcv")
    counts = {name: con.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0]  # noqa: S608 - schema names
              for name in NSYS_TABLES}
    net = _net(con) if plan.get("net") else None
    _say(stage="write", step=len(steps))
    con.execute("CHECKPOINT")
    _say(ok=True, counts=counts, net=net, regrouped=regrouped)
    return regrouped


def _exact(con, sql: str, exact: dict) -> bool:
    """Run ``sql`` (an INSERT) in a transaction of its own and keep it when it wrote as many rows as ``exact['count']``
    says it read (``normalize.Step.exact``); else (or when the count fails) roll it back and run ``exact['fallback']``,
    which needs no count. False when it fell back."""
    con.execute("BEGIN")
    try:
        wrote = con.execute(sql).fetchone()[0]
    except BaseException:
        try:
            con.execute("ROLLBACK")
        except Exception:  # the statement's own error is the one to report
            pass
        raise
    try:
        read = con.execute(exact["count"]).fetchone()[0]
    except Exception:
        read = None
    if read is not None and int(wrote) == int(read):
        con.execute("COMMIT")
        return True
    con.execute("ROLLBACK")
    for fallback in exact["fallback"]:
        con.execute(fallback)
    return False


def _net(con) -> int | None:
    """``net_transfers``, derived from the copied NVTX table (``analysis.readers.nsys.net``) on this connection,
    in its own transaction: no second open and checkpoint of the file by the parent. None when it failed (the
    copy stands; the parent logs it and the analysis reads the NVTX events itself)."""
    from analysis.readers.nsys.net import write_net

    try:
        con.execute("BEGIN")
        n = write_net(con)
        con.execute("COMMIT")
        return n
    except Exception as exc:  # derived data only
        con.execute("ROLLBACK")
        sys.stderr.write(f"net_transfers: {type(exc).__name__}: {exc}"[:2000] + "\n")
        return None


def main() -> int:
    setup_line = sys.stdin.readline()
    if not setup_line:
        return 0
    setup = json.loads(setup_line)
    cap = int(setup["address_space_bytes"])
    if cap > 0:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    con = None
    try:
        con = open_output(setup)
        _say(ready=True)
        plan_line = sys.stdin.readline()
        if not plan_line:
            return 0  # the parent gave up (validation failed): nothing was read
        run(con, json.loads(plan_line))
    except MemoryError:
        _say(ok=False, kind="memory", error="out of memory")
        return 1
    except Stopped as exc:
        _say(ok=False, kind="stopped", error=str(exc))
        return 1
    except Exception as exc:
        _say(ok=False, kind=type(exc).__name__, error=str(exc)[:2000])
        return 1
    finally:
        if con is not None:
            con.close()
    return 0


if __name__ == "__main__":
    code = main()
    # The output is closed and the last line sent: the parent waits for this process's exit, which need not
    # tear the interpreter and DuckDB's module down first (15-20 ms of every ingest).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
