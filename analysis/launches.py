"""Kernel launches by kind (stream or CUDA graph): the host call's cost and the latency to each kernel's start.

Each kernel is joined to the CUDA API call that launched it by (pid, correlation id): correlation ids are
unique per process only. A launch is a graph launch when the call is ``cudaGraphLaunch``/``cuGraphLaunch``
or the kernel carries a non-zero ``graph_id`` (nsys 2025.5+ exports); otherwise a stream launch. The
figures follow nsys' ``cuda_kern_exec`` report: per launch call its duration (``call``, the host's cost
of one launch), and per kernel the latency from the call's start to the kernel's start (``latency``)
and its queue time, from the call's end to the kernel's start, zero when the kernel started first
(``queue``). Percentiles are ``quantile_disc``: the nearest rank, the value at
0-based rank max(1, ceil(q * n)) - 1 of the sorted values.
"""

from __future__ import annotations

from typing import Any

from analysis.trace import Trace

GRAPH_LAUNCH_CALLS = ("cudaGraphLaunch", "cuGraphLaunch")
SKIPPED = "no CUDA API trace in the report: collect it with nsys profile --trace=cuda"

_SQL = """
    WITH calls AS (
        SELECT pid, correlation_id, MIN(start_ns) AS cs, MAX(end_ns) AS ce,
               BOOL_OR(name IN ('cudaGraphLaunch', 'cuGraphLaunch')) AS is_graph_call
        FROM cuda_api WHERE pid IS NOT NULL AND correlation_id IS NOT NULL
        GROUP BY pid, correlation_id),
    k AS (
        SELECT c.pid, c.correlation_id, c.cs, c.ce, k.start_ns AS ks,
               CASE WHEN c.is_graph_call OR COALESCE(k.graph_id, 0) <> 0 THEN 'graph' ELSE 'stream' END AS kind
        FROM kernels k JOIN calls c ON c.pid = k.pid AND c.correlation_id = k.correlation_id),
    per_call AS (
        SELECT kind, pid, correlation_id, ANY_VALUE(ce - cs) AS call_ns, COUNT(*) AS n
        FROM k GROUP BY ALL),
    lat AS (
        SELECT kind, COUNT(*) AS kernels,
               quantile_disc(ks - cs, 0.5) AS lat50, quantile_disc(ks - cs, 0.9) AS lat90,
               quantile_disc(GREATEST(ks - ce, 0), 0.5) AS q50, quantile_disc(GREATEST(ks - ce, 0), 0.9) AS q90
        FROM k GROUP BY kind),
    cost AS (
        SELECT kind, COUNT(*) AS launches, quantile_disc(call_ns, 0.5) AS c50, quantile_disc(call_ns, 0.9) AS c90
        FROM per_call GROUP BY kind)
    SELECT lat.kind, cost.launches, lat.kernels, cost.c50, cost.c90, lat.lat50, lat.lat90, lat.q50, lat.q90
    FROM lat JOIN cost USING (kind) ORDER BY lat.kind"""


def launch_summary(trace: Trace) -> dict[str, Any]:
    """``{"available", "reason", "stream": {...}|None, "graph": {...}|None}``; each kind has ``launches``
    (calls), ``kernels``, ``call_median_ns``/``call_p90_ns``, ``latency_median_ns``/``latency_p90_ns`` and
    ``queue_median_ns``/``queue_p90_ns``. Cached on the trace (KRN001 reads it too)."""
    cached = trace.memo.get("launch_summary")
    if cached is not None:
        return cached
    out: dict[str, Any] = {"available": False, "reason": None, "stream": None, "graph": None}
    if not trace.has_rows("cuda_api"):
        out["reason"] = SKIPPED
    elif not trace.has_rows("kernels"):
        out["reason"] = "no kernels in the report"
    else:
        out["available"] = True
        for kind, launches, kernels, c50, c90, l50, l90, q50, q90 in trace.sql(_SQL):
            out[kind] = {"launches": int(launches), "kernels": int(kernels),
                         "call_median_ns": int(c50), "call_p90_ns": int(c90),
                         "latency_median_ns": int(l50), "latency_p90_ns": int(l90),
                         "queue_median_ns": int(q50), "queue_p90_ns": int(q90)}
    trace.memo["launch_summary"] = out
    return out
