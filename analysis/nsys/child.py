"""The bulk copy, run as a separate process: a malformed export can only exhaust or crash this child.

Started by ``analysis.nsys.ingest`` as ``python -m analysis.nsys.child``. It caps its own address space
(RLIMIT_AS) before DuckDB is imported, reads one JSON plan on stdin, attaches the already validated
export read-only with DuckDB's signed sqlite_scanner (loaded by path, signature checks on), runs the
plan's statements into the temporary DuckDB file and reports each step as one JSON line on stdout.
"""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path


def extension_path(duckdb_version: str) -> Path:
    """The signed sqlite_scanner binary shipped by the ``duckdb-extension-sqlite-scanner`` package."""
    import duckdb_extension_sqlite_scanner as pkg

    return Path(pkg.__file__).parent / "extensions" / f"v{duckdb_version}" / "sqlite_scanner.duckdb_extension"


def _say(**msg: object) -> None:
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def run(plan: dict) -> None:
    import duckdb

    from analysis.schema import NSYS_TABLES, ddl

    con = duckdb.connect(plan["tmp"], config={
        "threads": int(plan["threads"]),
        "memory_limit": f"{int(plan['duckdb_memory_bytes']) // 2**20}MB",
        "preserve_insertion_order": False,
        "autoinstall_known_extensions": False,
        "autoload_known_extensions": False,
        "temp_directory": plan["temp_directory"],
        # Names repeat across millions of rows: dictionary compression fits them, and FSST's analysis
        # pass was the largest single cost of writing the string columns.
        "disabled_compression_methods": "fsst",
        # Hand freed memory back to the OS between statements, so peak RSS tracks the live working set.
        "allocator_flush_threshold": "64MB",
        "allocator_bulk_deallocation_flush_threshold": "128MB",
    })
    try:
        con.execute("SET enable_progress_bar = false")  # stdout carries our JSON protocol, nothing else
        con.execute("LOAD " + _quote(str(extension_path(duckdb.__version__))))
        con.execute(f"ATTACH {_quote(plan['src'])} AS src (TYPE sqlite, READ_ONLY)")
        # From here on the process may touch no other file (the output and its spill directory aside).
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
        con.execute("BEGIN")
        for stmt in ddl(NSYS_TABLES):
            con.execute(stmt)
        con.executemany("INSERT INTO meta VALUES (?, ?)", sorted(plan["meta"].items()))
        steps = plan["statements"]
        for i, (label, sql) in enumerate(steps):
            _say(stage=label, done=i, total=len(steps))
            con.execute(sql)
        con.execute("COMMIT")
        con.execute("DETACH src")
        counts = {name: con.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0]  # noqa: S608 - schema names
                  for name in NSYS_TABLES}
        con.execute("CHECKPOINT")
    finally:
        con.close()
    _say(ok=True, counts=counts)


def main() -> int:
    plan = json.loads(sys.stdin.read())
    cap = int(plan["address_space_bytes"])
    if cap > 0:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    try:
        run(plan)
    except MemoryError:
        _say(ok=False, kind="memory", error="out of memory")
        return 1
    except Exception as exc:
        _say(ok=False, kind=type(exc).__name__, error=str(exc)[:2000])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
