"""The headline facts of one ingested Nsight Compute report (the ``reports[]`` entry of the JSON contract)."""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from analysis.model.ncu_metrics import load_launches
from analysis.report_types import Device, ReportInfo
from analysis.result_parts import KernelTotal

TOP_KERNELS = 10


def ncu_report_info(trace: Any) -> ReportInfo:
    """``file``, ``tool``, ``tool_version``, host, pids, devices, ``counts`` and profiled GPU time of a report."""
    meta = trace.meta
    kernels, metrics = trace.scalar("SELECT count(*) FROM ncu_kernels"), trace.scalar("SELECT count(*) FROM ncu_metrics")
    rules = trace.scalar("SELECT count(*) FROM ncu_rule_results")
    pids = [r[0] for r in trace.sql("SELECT DISTINCT pid FROM ncu_kernels WHERE pid IS NOT NULL ORDER BY pid")]
    devices = [
        Device(id=r[0], name=r[1])
        for r in trace.sql(
            "SELECT device, max(device_name) FROM ncu_kernels WHERE device IS NOT NULL OR device_name IS NOT NULL "
            "GROUP BY device ORDER BY device NULLS LAST"
        )
    ]
    # Durations as the rules see them: the exported column, else gpu__time_duration, else cycles / clock.
    launches = load_launches(trace)
    timed: dict[str, list[float]] = defaultdict(list)
    for launch in launches:
        if launch.duration_ns is not None:
            timed[launch.name].append(launch.duration_ns)
    gpu_time = sum(sum(v) for v in timed.values()) if timed else None
    top = sorted(((n, len(v), sum(v), statistics.median(v)) for n, v in timed.items()),
                 key=lambda r: (-r[2], r[0]))[:TOP_KERNELS]
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
        # The headline of an ncu-only run: profiled kernel time is the sum of the durations known; launches
        # whose duration is unknown are counted, never taken as 0.
        "kernels_profiled": len(launches),
        "durations_unknown": sum(1 for launch in launches if launch.duration_ns is None),
        "span_ns": None,
        # Same shape as the nsys report's list, over profiled launches (ncu serializes them: no span).
        "top_kernels": [KernelTotal(name=n, count=c, total_ns=int(round(t)), median_ns=int(round(m))).to_json()
                        for n, c, t, m in top],
    }
