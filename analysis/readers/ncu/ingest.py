"""Ingest one Nsight Compute export (CSV, or .ncu-rep through an ``ncu`` binary) into its DuckDB file."""

from __future__ import annotations

import logging
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TypedDict

import duckdb
import pandas as pd

from analysis import fmt
from analysis.duck import publishing
from analysis.errors import TraceError
from analysis.limits import Limits, Progress
from analysis.readers.ncu.reader import NcuCsv
from analysis.readers.schema import NCU_TABLES, SCHEMA_VERSION, columns, ddl

logger = logging.getLogger(__name__)

NCU_REP_MAGIC = b"NVR\x00"  # first bytes of a binary Nsight Compute report
BATCH_ROWS = 50_000
_DTYPES = {"INTEGER": "Int64", "BIGINT": "Int64", "DOUBLE": "Float64"}


def ncu_rep_command(path: Path | str) -> str:
    """The export command a person can run where ncu is installed."""
    return f"ncu --import {path} --csv --page raw > {Path(str(path)).stem}.csv"


def _convert_rep(src: Path, workdir: Path, timeout_s: float) -> Path:
    """Convert a binary .ncu-rep to raw-page CSV with the ncu on PATH (the only way to read one)."""
    ncu = shutil.which("ncu")
    if ncu is None:
        raise TraceError("ncu_rep_needs_ncu", "this is a binary .ncu-rep report and no `ncu` is installed here; "
                         f"convert it with `{ncu_rep_command(src.name)}` and upload the CSV")
    out = workdir / "report.csv"
    try:
        with out.open("wb") as fh:
            # Argument list, no shell: the file name is never interpreted.
            proc = subprocess.run([ncu, "--import", str(src), "--csv", "--page", "raw"], stdout=fh,
                                  stderr=subprocess.PIPE, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise TraceError("timeout", f"`ncu --import` took longer than {fmt.exact(timeout_s)} s") from None
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", errors="replace").strip()[-300:]
        raise TraceError("corrupt", f"`ncu --import` could not read the report (exit {proc.returncode}): {err}")
    return out


def _frame(table: str, rows: list[tuple]) -> pd.DataFrame:
    cols = columns(NCU_TABLES, table)
    types = {}
    for raw in NCU_TABLES[table].splitlines():
        words = raw.split("--", 1)[0].replace(",", " ").split()
        for name, typ in zip(words[0::2], words[1::2], strict=False):
            types[name] = _DTYPES.get(typ.upper(), "object")
    data = list(zip(*rows, strict=True)) if rows else [() for _ in cols]
    return pd.DataFrame({c: pd.array(list(d), dtype=types.get(c, "object")) for c, d in zip(cols, data, strict=True)})


def _insert(con: duckdb.DuckDBPyConnection, table: str, rows: list[tuple]) -> None:
    if rows:
        frame = _frame(table, rows)  # noqa: F841 - read by DuckDB's replacement scan below
        con.execute(f"INSERT INTO {table} SELECT * FROM frame")  # noqa: S608 - fixed table names


class NcuIngestStats(TypedDict):
    """What an ncu ingest wrote (``ingest_ncu``): kernels, metric values, ncu rule results, the CSV's layout."""

    kernels: int
    metrics: int
    rule_results: int
    layout: str


def _write(src: Path, con: duckdb.DuckDBPyConnection, limits: Limits | None, progress: Progress | None) -> NcuIngestStats:
    for stmt in ddl(NCU_TABLES):
        con.execute(stmt)
    total = src.stat().st_size
    timeout_s = float(getattr(limits, "timeout_s", 3600.0))
    deadline = time.monotonic() + timeout_s
    batches: dict[str, list[tuple]] = {"metric": [], "rule": []}
    tables = {"metric": "ncu_metrics", "rule": "ncu_rule_results"}
    counts = {"metric": 0, "rule": 0}
    with src.open("rb") as fh:
        reader = NcuCsv(fh)
        for kind, row in reader.records():
            batch = batches[kind]
            batch.append(row)
            if len(batch) >= BATCH_ROWS:
                _insert(con, tables[kind], batch)
                counts[kind] += len(batch)
                batch.clear()
                if time.monotonic() > deadline:
                    raise TraceError("timeout", f"reading the CSV took longer than {fmt.exact(timeout_s)} s")
                if progress:
                    progress("ncu_metrics", fh.tell(), total)
        for kind, batch in batches.items():
            _insert(con, tables[kind], batch)
            counts[kind] += len(batch)
    if time.monotonic() > deadline:
        raise TraceError("timeout", f"reading the CSV took longer than {fmt.exact(timeout_s)} s")
    kernels = [(k.kernel_id, k.name, k.short_name, k.pid, k.process_name, k.host, k.device, k.cc, k.context,
                k.stream, *(k.grid or (None, None, None)), *(k.block or (None, None, None)), k.registers,
                k.shared_mem_bytes, k.duration_ns, k.device_name, k.block_size, k.grid_size)
               for k in sorted(reader.kernels.values(), key=lambda k: k.kernel_id)]
    _insert(con, "ncu_kernels", kernels)
    hosts = sorted({k.host for k in reader.kernels.values() if k.host})
    meta = {"tool": "ncu", "schema_version": str(SCHEMA_VERSION), "layout": reader.layout,
            "source_rows": str(reader.rows)}
    if hosts:
        meta["host"] = hosts[0]
    con.executemany("INSERT INTO meta VALUES (?, ?)", sorted(meta.items()))
    if progress:
        progress("ncu_metrics", total, total)
    return {"kernels": len(kernels), "metrics": counts["metric"], "rule_results": counts["rule"],
            "layout": reader.layout}


def ingest_ncu(src: Path, out: Path, *, limits: Limits | None = None, progress: Progress | None = None) -> NcuIngestStats:
    """Normalize an ncu CSV (or .ncu-rep) into ``out`` (DuckDB), published atomically; nothing left on error."""
    src, out = Path(src), Path(out)
    timeout_s = float(getattr(limits, "timeout_s", 3600.0))
    with tempfile.TemporaryDirectory(prefix="goodput-ncu-") as work:
        with src.open("rb") as fh:
            magic = fh.read(len(NCU_REP_MAGIC))
        csv_path = _convert_rep(src, Path(work), timeout_s) if magic == NCU_REP_MAGIC else src
        with publishing(out, threads=int(getattr(limits, "threads", 2))) as con:
            stats = _write(csv_path, con, limits, progress)
    logger.info("ingested ncu export", extra={"kernels": stats["kernels"], "metrics": stats["metrics"]})
    return stats
