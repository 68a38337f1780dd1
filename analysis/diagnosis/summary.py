"""A report's headline facts (the ``reports[]`` objects of the JSON contract), read from its DuckDB file.

Every number here is one direct aggregate over a normalized table, so it can be checked against a
query on the export itself.
"""

# ruff: noqa: S608 - table names below come from this module's constants, never from a trace.

from __future__ import annotations

import json
from typing import cast

from analysis.diagnosis.system_metrics import system_metrics
from analysis.model.trace import Trace
from analysis.readers import ToolKind
from analysis.report_types import CopyKind, Degraded, Device, ReportInfo
from analysis.result_parts import DominantKernel, TopKernel

COUNTED = ("kernels", "memcpy", "memset", "cuda_api", "nvtx")
GPU_ACTIVITY = ("kernels", "memcpy", "memset")
TOP_KERNELS = 10
# A kernel (by name) that takes at least this share of the report's kernel time dominates it: the one place
# where kernel-level work (ncu, a better library call, fusion) pays off most.
DOMINANT_PCT = 50.0


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except ValueError:
        return None


def _present(trace: Trace, tables: tuple[str, ...]) -> list[str]:
    return [t for t in tables if t in trace.tables]


def _pids(trace: Trace) -> list[int]:
    parts = [f'SELECT pid FROM "{t}"' for t in _present(trace, (*GPU_ACTIVITY, "cuda_api", "nvtx"))]
    if not parts:
        return []
    sql = "SELECT DISTINCT pid FROM (" + " UNION ALL ".join(parts) + ") WHERE pid IS NOT NULL ORDER BY 1"
    return [r[0] for r in trace.sql(sql)]


def _devices(trace: Trace) -> list[Device]:
    """Devices actually used by GPU activity (CUDA ordinal + GPU name), else every GPU the export lists."""
    listed = "devices" in trace.tables
    parts = [f'SELECT DISTINCT pid, device FROM "{t}"' for t in _present(trace, GPU_ACTIVITY)]
    rows: list[tuple] = []
    if parts:
        used = " UNION ".join(parts)
        if listed:
            # A row for the process wins over a process-independent (pid NULL) row for the same ordinal.
            name = ("(SELECT d.name FROM devices d WHERE d.device = u.device AND (d.pid = u.pid OR d.pid IS NULL) "
                    "ORDER BY d.pid IS NULL LIMIT 1)")
        else:
            name = "NULL"
        rows = trace.sql(f"SELECT DISTINCT u.device, {name} FROM ({used}) u "
                         "WHERE u.device IS NOT NULL ORDER BY 1, 2")
    if not rows and listed:
        rows = trace.sql("SELECT DISTINCT COALESCE(device, gpu_id), name FROM devices ORDER BY 1, 2")
    return [{"id": r[0], "name": r[1]} for r in rows]


def report_span_ns(trace: Trace) -> int:
    """``span_ns`` of the nsys report object: first start to last end of its GPU activity (0 without any)."""
    return _span(trace)


def _span(trace: Trace) -> int:
    parts = [f'SELECT min(start_ns) s, max(end_ns) e FROM "{t}"' for t in _present(trace, GPU_ACTIVITY)]
    if not parts:
        return 0
    value = trace.scalar("SELECT max(e) - min(s) FROM (" + " UNION ALL ".join(parts) + ")")
    return int(value or 0)


def nsys_report_info(trace: Trace) -> ReportInfo:
    """The JSON report object of one nsys report."""
    meta = trace.meta
    counts = {t: (trace.scalar(f'SELECT count(*) FROM "{t}"') if t in trace.tables else 0)
              for t in COUNTED}
    has_k, has_m = "kernels" in trace.tables, "memcpy" in trace.tables
    gpu_time = trace.scalar("SELECT COALESCE(sum(end_ns - start_ns), 0) FROM kernels") if has_k else 0
    mem_bytes = trace.scalar("SELECT COALESCE(sum(bytes), 0) FROM memcpy") if has_m else 0
    top = trace.sql(f"""
        SELECT COALESCE(name, short_name), count(*), sum(end_ns - start_ns),
               round(median(end_ns - start_ns))::BIGINT
        FROM kernels GROUP BY 1 ORDER BY 3 DESC, 1 LIMIT {TOP_KERNELS}""") if has_k else []
    copies = trace.sql("""
        SELECT copy_kind, count(*), COALESCE(sum(bytes), 0), sum(end_ns - start_ns)
        FROM memcpy GROUP BY 1 ORDER BY 3 DESC, 1""") if has_m else []
    info: ReportInfo = {
        "file": trace.label,
        "tool": "nsys",
        "tool_version": meta.get("tool_version"),
        "host": meta.get("host"),
        "rank": _int_or_none(meta.get("rank")),
        "local_rank": _int_or_none(meta.get("local_rank")),
        "world_size": _int_or_none(meta.get("world_size")),
        "job_id": meta.get("job_id"),
        "session_start_utc_ns": _int_or_none(meta.get("session_start_utc_ns")),
        "pids": _pids(trace),
        "devices": _devices(trace),
        "counts": counts,
        "gpu_time_ns": int(gpu_time),
        "memcpy_bytes": int(mem_bytes),
        "span_ns": _span(trace),
        "top_kernels": [TopKernel(name=n, count=c, total_ns=int(t), median_ns=int(m),
                                  share_pct=round(100.0 * int(t) / gpu_time, 3) if gpu_time else None).to_json()
                        for n, c, t, m in top],
        "dominant_kernel": None if (dom := _dominant(top, int(gpu_time))) is None else dom.to_json(),
        "memcpy_by_kind": [CopyKind(kind=k, count=c, bytes=int(b), total_ns=int(t)) for k, c, b, t in copies],
        "degraded": degraded(meta),
    }
    metrics = system_metrics(trace)
    if metrics is not None:  # only exports with GPU or NIC metrics or an OS runtime trace carry the key
        info["system_metrics"] = metrics.to_json()
    return info


def _dominant(top: list[tuple], kernel_ns: int) -> DominantKernel | None:
    """The top kernel when it takes at least ``DOMINANT_PCT`` of the kernel time, else None."""
    if not top or not kernel_ns:
        return None
    name, count, total, _ = top[0]
    share = 100.0 * int(total) / kernel_ns
    if share < DOMINANT_PCT:
        return None
    return DominantKernel(name=name, count=int(count), total_ns=int(total), share_pct=round(share, 3))


def degraded(meta: dict[str, str]) -> list[Degraded]:
    """The parts of the export ingest could not read, each ``{table, columns, effect}`` (empty: none)."""
    try:
        items = json.loads(meta.get("degraded") or "[]")
    except ValueError:
        return [{"table": None, "columns": [], "effect": "unreadable degradation record"}]
    # The records as ingest wrote them (``analysis.readers.nsys``: table, columns, effect).
    return cast("list[Degraded]", [i for i in items if isinstance(i, dict)] if isinstance(items, list) else [])


def report_info(trace: Trace) -> ReportInfo:
    """The JSON report object of one ingested report, whichever tool wrote it."""
    if trace.tool == ToolKind.NCU:
        from analysis.diagnosis.ncu_summary import ncu_report_info  # lazy: the ncu reader is optional here

        return ncu_report_info(trace)
    return nsys_report_info(trace)
