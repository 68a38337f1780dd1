"""The headline facts of one ingested Nsight Compute report (the ``reports[]`` entry of the JSON contract)."""

from __future__ import annotations

from typing import Any

TOP_KERNELS = 10


def ncu_report_info(trace: Any) -> dict[str, Any]:
    """``file``, ``tool``, ``tool_version``, host, pids, devices, ``counts`` and profiled GPU time of a report."""
    meta = trace.meta
    kernels, metrics = trace.scalar("SELECT count(*) FROM ncu_kernels"), trace.scalar("SELECT count(*) FROM ncu_metrics")
    rules = trace.scalar("SELECT count(*) FROM ncu_rule_results")
    pids = [r[0] for r in trace.sql("SELECT DISTINCT pid FROM ncu_kernels WHERE pid IS NOT NULL ORDER BY pid")]
    devices = [
        {"id": r[0], "name": r[1]}
        for r in trace.sql(
            "SELECT device, max(device_name) FROM ncu_kernels WHERE device IS NOT NULL OR device_name IS NOT NULL "
            "GROUP BY device ORDER BY device NULLS LAST"
        )
    ]
    gpu_time = trace.scalar("SELECT sum(duration_ns) FROM ncu_kernels")
    top = trace.sql(
        "SELECT name, count(*), sum(duration_ns), median(duration_ns) FROM ncu_kernels "
        "WHERE duration_ns IS NOT NULL GROUP BY 1 ORDER BY 3 DESC, 1 LIMIT ?", [TOP_KERNELS]
    )
    hosts = [r[0] for r in trace.sql("SELECT DISTINCT host FROM ncu_kernels WHERE host IS NOT NULL ORDER BY host")]
    return {
        "file": trace.label,
        "tool": "ncu",
        "tool_version": meta.get("tool_version"),
        "schema_version": int(meta["schema_version"]) if meta.get("schema_version") else None,
        "layout": meta.get("layout"),
        "host": hosts[0] if hosts else None,
        "rank": trace.rank,
        "local_rank": None,
        "world_size": None,
        "job_id": None,
        "session_start_utc_ns": None,
        "pids": pids,
        "devices": devices,
        "counts": {"kernels": int(kernels), "metrics": int(metrics), "rule_results": int(rules)},
        "gpu_time_ns": None if gpu_time is None else int(round(gpu_time)),
        "span_ns": None,
        # Same shape as the nsys report's list, over profiled launches (ncu serializes them: no span).
        "top_kernels": [{"name": n, "count": c, "total_ns": int(round(t)), "median_ns": int(round(m))}
                        for n, c, t, m in top],
    }
