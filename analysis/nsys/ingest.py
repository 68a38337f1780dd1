"""Ingest one nsys SQLite export: validate it, bulk-copy it in a limited child process, publish atomically.

The DuckDB file is written under a temporary name beside ``out``, fsynced and renamed onto ``out``;
on any failure nothing is left at ``out`` and the temporary files are removed.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

from analysis.errors import TraceError
from analysis.nsys.guard import ExportInfo, validate
from analysis.nsys.normalize import statements
from analysis.nsys.spawn import IngestChild
from analysis.schema import SCHEMA_VERSION

if TYPE_CHECKING:
    from analysis.api import Limits, Progress

# ``Limits.memory_bytes`` is the child's memory budget. DuckDB's buffer pool gets this share of it; the
# rest covers allocator slack, strings in flight, code and stacks (10M-kernel benchmark: 1.6 GiB
# resident with a 1.2 GiB pool). A smaller pool made the (pid, correlationId) hash joins over 23M API
# calls spill to disk: the synchronization copy took 28 s instead of 15 s.
DUCKDB_SHARE_OF_CAP = 0.6
# RLIMIT_AS counts address space reserved but never touched (allocator extents, thread stacks): the same
# run peaked at 2.7 GiB virtual for 1.4 GiB resident. The cap is budget + this slack, a backstop
# against a runaway child rather than the budget itself.
ADDRESS_SLACK_BYTES = 2 * 1024**3
_SRC_TABLE = re.compile(r'src\."(\w+)"')


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
        **info.facts,
    }
    return {k: str(v) for k, v in rows.items() if v is not None}


def _cleanup(*paths: Path) -> None:
    for p in paths:
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)


def _fsync(path: Path, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _check_space(src_size: int, out_dir: Path) -> None:
    # The normalized file is smaller than the export (columnar, compressed); half of it plus slack is a
    # floor that catches a nearly full disk before a long copy, not a guarantee.
    need = src_size // 2 + 64 * 2**20
    free = shutil.disk_usage(out_dir).free
    if free < need:
        raise TraceError("no_space", f"only {free:,} bytes free in {out_dir}; about {need:,} are needed. "
                         "Free disk space and retry")


def start_child(out: Path, limits: Limits) -> IngestChild:
    """Start the bulk-copy child for ``out`` now, before validation; pass it to ``ingest_nsys(child=)``."""
    return IngestChild(Path(out), threads=limits.threads,
                       address_space_bytes=limits.memory_bytes + ADDRESS_SLACK_BYTES,
                       duckdb_memory_bytes=int(limits.memory_bytes * DUCKDB_SHARE_OF_CAP))


def _weights(info: ExportInfo, steps: list[tuple[str, str]]) -> list[int]:
    """Each step's share of the progress: the rows of the first export table its SQL reads (1 if none)."""
    out = []
    for _, sql in steps:
        hit = _SRC_TABLE.search(sql)
        out.append(max(1, info.rows.get(hit.group(1), 0)) if hit else 1)
    return out


def ingest_nsys(src: Path, out: Path, *, limits: Limits, progress: Progress | None = None,
                child: IngestChild | None = None) -> dict[str, int]:
    """Validate ``src`` and write its normalized DuckDB file to ``out``; returns row counts per table.

    ``child``: one from ``start_child(out, limits)`` started earlier (its start-up then overlaps the
    caller's work); by default one is started here. Either way it sees the export only after validation.
    """
    src, out = Path(src), Path(out)
    deadline = time.monotonic() + limits.timeout_s
    if child is not None and child.out != out:
        raise ValueError(f"the child was started for {child.out}, not {out}")
    if progress:
        progress("validate", 0, 1)
    try:
        info = validate(src, max_bytes=limits.max_bytes, timeout_s=limits.timeout_s)
        out.parent.mkdir(parents=True, exist_ok=True)
        _check_space(info.size, out.parent)
        steps = statements(info)
    except BaseException:
        if child is not None:
            child.discard()
        raise
    child = child or start_child(out, limits)
    tmp = child.tmp
    leftovers = child.leftovers()
    plan = {"src": str(src.resolve()), "meta": meta_rows(info), "statements": steps,
            "weights": _weights(info, steps)}
    try:
        result = child.run(plan, deadline, progress)
        _fsync(tmp)
        os.replace(tmp, out)
        _fsync(out.parent, directory=True)
    except OSError as exc:
        _cleanup(*leftovers)
        if exc.errno == 28:  # ENOSPC
            raise TraceError("no_space", "the disk filled up while writing the normalized report") from None
        raise
    except BaseException:
        _cleanup(*leftovers)
        raise
    _cleanup(*leftovers[1:])
    if progress:
        progress("done", 1, 1)
    return result["counts"]
