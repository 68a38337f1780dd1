"""Ingest one nsys SQLite export: validate it, bulk-copy it in a limited child process, publish atomically.

The DuckDB file is written under a temporary name beside ``out``, fsynced and renamed onto ``out``;
on any failure nothing is left at ``out`` and the temporary files are removed.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

from analysis import fmt
from analysis.duck import publish
from analysis.errors import TraceError
from analysis.limits import Limits, Progress
from analysis.readers.nsys.guard import ExportInfo, measure_table_bytes, validate
from analysis.readers.nsys.normalize import Step, statements, varchar_statements
from analysis.readers.nsys.scrub import ScrubChild
from analysis.readers.nsys.spawn import DUCKDB_SHARE_OF_CAP, IngestChild, start_child
from analysis.readers.schema import SCHEMA_VERSION

logger = logging.getLogger(__name__)
_SRC_TABLE = re.compile(r'src\."(\w+)"')
_READS = re.compile(r'\bsrcv?\."(\w+)"')

# An export smaller than this is copied with one DuckDB thread (the child was started with ``limits.threads``,
# before the export was known). The scanner splits a table into tasks of many pages: a small export's tables are
# one or two tasks each, and a second thread only adds its wake-ups. Measured (CPU of the child, wall of the
# ingest, medians): the 8 largest small corpus exports (1.8-2.6 MB) 0.19 s / 0.20 s with one thread against
# 0.23 s / 0.23 s with two; a 25 MB export (100k kernels) 0.70 / 0.78 s against 0.82 / 0.84 s; a 97 MB export
# (400k kernels) 2.3 / 2.7 s against 2.6 / 1.9 s, where two threads win the wall time (docs/speed.md).
ONE_THREAD_EXPORT_BYTES = 32 << 20


def meta_rows(info: ExportInfo) -> dict[str, str]:
    """The ``meta`` table: tool facts, time base and the allow-listed job facts (never the raw env)."""
    rows: dict[str, str | int | None] = {
        "tool": "nsys",
        "tool_version": info.meta.get("EXPORT_PRODUCT_VERSION"),
        "export_schema_version": info.meta.get("EXPORT_SCHEMA_VERSION"),
        "schema_version": SCHEMA_VERSION,
        "session_start_utc_ns": info.session_start_utc_ns,
        "time_offset_ns": info.time_offset_ns,
        "derived_from": info.meta.get("DERIVED_FROM"),
        "derived_window_ns": info.meta.get("DERIVED_WINDOW_NS"),
        # Parts of the export left unread, as JSON (table and column names are from the allow-list).
        "degraded": json.dumps(info.degraded) if info.degraded else None,
        **info.facts,
        **info.capture,
        **info.cpu_layout,
    }
    return {k: str(v) for k, v in rows.items() if v is not None}


def _cleanup(*paths: Path) -> None:
    for p in paths:
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)


# The normalized DuckDB file against the bytes of the tables it is copied from: 0.25 measured on a 1M-kernel
# export (columnar and compressed); twice that leaves room for exports that compress worse. DuckDB writes
# 256 KiB blocks per table and column group, so even a tiny export takes a few MiB (3.7 MiB at most in the
# corpus).
DUCKDB_SHARE_OF_TABLES = 0.5
DUCKDB_FLOOR_BYTES = 8 * 2**20


def space_needed(info: ExportInfo, keep: bool, table_bytes: int | None = None) -> int:
    """Bytes the ingest writes: the DuckDB file (estimated from the tables read) and the kept export.

    ``table_bytes``: an upper bound to use instead of the tables' measured bytes (the file's size)."""
    tables = measure_table_bytes(info) if table_bytes is None else table_bytes
    need = DUCKDB_FLOOR_BYTES + int(tables * DUCKDB_SHARE_OF_TABLES)
    return need + (2 * info.size if keep else 0)  # the edited copy and the rebuilt one, for a moment


def _check_space(info: ExportInfo, out_dir: Path, keep: bool) -> None:
    # A floor that catches a nearly full disk before a long copy, not a guarantee: ENOSPC later is typed too.
    free = shutil.disk_usage(out_dir).free
    if free >= space_needed(info, keep, table_bytes=info.size):
        return  # the tables read are part of the file: no need to measure them
    need = space_needed(info, keep)
    if free < need:
        raise TraceError("no_space", f"only {fmt.count(free)} bytes free in the data directory; about {fmt.count(need)} are needed "
                         "for this export. Free disk space and retry the report", {"free": free, "needed": need})


def reads(sql: str) -> list[str]:
    """The export tables a statement reads (``src."T"``, ``srcv."T"``): each must pass its check first."""
    return list(dict.fromkeys(_READS.findall(sql)))


def _weights(info: ExportInfo, steps: list[Step]) -> list[int] | None:
    """Each step's share of the progress: the rows of the first export table its SQL reads (1 if none); None
    while a table's row count is not known yet (it is taken right after the table's check)."""
    firsts = [hit.group(1) if (hit := _SRC_TABLE.search(step.sql)) else None for step in steps]
    if info.checks is not None and any(t is not None and t not in info.rows for t in firsts):
        return None
    return [max(1, info.rows.get(t, 0)) if t else 1 for t in firsts]


# Writes derived tables into the normalized file before it is published: (path, DuckDB memory bytes, deadline).
Derive = Callable[[Path, int, float], object]


def _derive(derive: Derive, tmp: Path, limits: Limits, deadline: float, progress: Progress | None) -> None:
    """Derived at ingest, before the file is published (the report's loop and every iteration's exact record,
    ``analysis.loops.steps.write_iterations``). Runs in this process on the normalized file the child wrote (the
    export itself is not read again). A failure here leaves the file without the derived table (as a schema
    version 2 file), never fails the ingest: the analysis then computes them."""
    if progress:
        progress("iterations", 0, 1)
    try:
        derive(tmp, int(limits.memory_bytes * DUCKDB_SHARE_OF_CAP), deadline)
    except TraceError:
        raise
    except Exception:  # derived data only: without the table the analysis computes the records itself
        logger.exception("finding the iterations at ingest failed; the analysis will compute them")


def _prepare(prepare: Callable[[], object]) -> None:
    """``prepare`` (the derive step's imports) in a thread of its own, while the child copies: off the ingest's
    serial tail (NumPy and the loop finder: 0.12-0.4 s at the derive step's start). A failure is left for the derive
    step itself to meet and log."""

    def run() -> None:
        try:
            prepare()
        except Exception:  # the derive step imports the same modules and logs what fails
            pass

    threading.Thread(target=run, name="ingest-prepare", daemon=True).start()


def _net(tmp: Path, limits: Limits) -> None:
    """Derived at ingest: NCCL's network transfers from its ``ncclNet*`` NVTX events (``analysis.readers.nsys.net``).
    The child writes them after the copy (plan ``net``); this runs only where it could not. A failure leaves
    the file without the table (the analysis then reads the NVTX events itself)."""
    from analysis.readers.nsys.net import write_net_file

    try:
        write_net_file(tmp, int(limits.memory_bytes * DUCKDB_SHARE_OF_CAP))
    except Exception:  # derived data only
        logger.exception("reading NCCL's network ranges at ingest failed; the analysis will read them itself")


def ingest_nsys(src: Path, out: Path, *, limits: Limits, progress: Progress | None = None,
                child: IngestChild | None = None, keep: Path | None = None,
                derive: Derive | None = None, prepare: Callable[[], object] | None = None) -> dict[str, int]:
    """Validate ``src`` and write its normalized DuckDB file to ``out``; returns row counts per table.

    ``derive``: writes derived tables into the file before it is published (the library's door passes
    the loop finder's ``write_iterations``: the readers know nothing of loops). ``prepare``: what ``derive`` will
    import, run in a background thread once the export is validated (it would delay the validation before that).

    With ``keep``, a copy of the export without the captured environment (``analysis.readers.nsys.scrub``) is
    written there too, alongside the copy and before ``out`` is published.

    ``child``: one from ``start_child(out, limits)`` started earlier (its start-up then overlaps the
    caller's work); by default one is started here, before validation, for the same reason (Python, DuckDB and
    the scanner: 0.09 s to ready, which otherwise came after validation). Either way it sees the export only after
    validation.
    """
    src, out = Path(src), Path(out)
    deadline = time.monotonic() + limits.timeout_s
    if child is not None and child.out != out:
        raise ValueError(f"the child was started for {child.out}, not {out}")
    child = child or start_child(out, limits)
    if progress:
        progress("validate", 0, 1)
    info = None
    try:
        # Returns with the bulk tables still being checked (guard.TableChecks): the child copies each one once
        # it has passed, and nothing is published before every table has.
        info = validate(src, max_bytes=limits.max_bytes, timeout_s=limits.timeout_s, pipelined=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        _check_space(info, out.parent, keep is not None)
        steps = statements(info)
    except BaseException:
        if info is not None and info.checks is not None:
            info.checks.close()
        child.discard()
        raise
    checks = info.checks
    assert checks is not None
    if progress:
        progress("validate", 1, 1)  # the child gets its plan now (the CLI imports the rules from here on)
    tmp = child.tmp
    leftovers = child.leftovers()
    varchar = varchar_statements(info)
    plan = {"src": str(src.resolve()), "meta": meta_rows(info), "statements": steps,
            "varchar_statements": varchar, "needs": [reads(step.sql) for step in steps],
            "varchar_needs": [reads(sql) for sql in varchar], "net": True}
    if info.size < ONE_THREAD_EXPORT_BYTES:
        plan["threads"] = 1
    # The kept copy is written by a process of its own beside the child's copy (``scrub.ScrubChild``), once every
    # table of the export has passed its check (SQLite rewrites the whole file).
    scrubs: list[ScrubChild] = []

    def checked() -> None:
        if keep is not None:
            scrubs.append(ScrubChild(src, keep, expected=info, deadline=deadline))

    scrubbing: ScrubChild | None = None
    if prepare is not None and derive is not None:
        _prepare(prepare)
    try:
        result = child.run(plan, deadline, progress, checks=checks, weights=lambda: _weights(info, steps),
                           checked=checked)
        scrubbing = scrubs[0] if scrubs else None
        if regrouped := result.get("regrouped"):
            logger.info("%s: a correlation id repeats among the CUDA API calls; %s joined their launching calls "
                        "through the grouped launch table", src.name, ", ".join(regrouped))
        if derive is not None:
            _derive(derive, tmp, limits, deadline, progress)
        if result.get("net") is None:
            _net(tmp, limits)
        if scrubbing is not None:
            scrubbing.wait()
        publish(tmp, out)
    except OSError as exc:
        checks.close()
        scrubbing = scrubbing or (scrubs[0] if scrubs else None)
        if scrubbing is not None:
            scrubbing.join()
        _cleanup(*leftovers)
        if exc.errno == 28:  # ENOSPC
            raise TraceError("no_space", "the disk filled up while writing the normalized report") from None
        raise
    except BaseException:
        checks.close()
        scrubbing = scrubbing or (scrubs[0] if scrubs else None)
        if scrubbing is not None:
            scrubbing.join()  # its own temporary files are gone once it returns
        _cleanup(*leftovers)
        raise
    checks.close()
    _cleanup(*leftovers[1:])
    if progress:
        progress("done", 1, 1)
    return result["counts"]
