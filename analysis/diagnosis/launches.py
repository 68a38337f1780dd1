"""Kernel launches by kind (stream or CUDA graph): the host call's cost and the latency to each kernel's start.

Each kernel is joined to the CUDA API call that launched it (a call whose name matches ``LAUNCH_RE``) by
(pid, correlation id): correlation ids are unique per process only. A launch is a graph launch when the call is ``cudaGraphLaunch``/``cuGraphLaunch``
or the kernel carries a non-zero ``graph_id`` (nsys 2025.5+ exports); otherwise a stream launch. The
figures follow nsys' ``cuda_kern_exec`` report: per launch call its duration (``call``, the host's cost
of one launch), and per kernel the latency from the call's start to the kernel's start (``latency``)
and its queue time, from the call's end to the kernel's start, zero when the kernel started first
(``queue``). Graph launches also give the GPU time of the work they ran (``work_ns``: whole replays where nsys traced
graphs whole) and the calls that capture, build and instantiate graphs (``GRAPH_SETUP_RE``: count and host time),
the set-up cost the replays pay back. Percentiles are ``quantile_disc``: the nearest rank, the value at
0-based rank max(1, ceil(q * n)) - 1 of the sorted values.
"""

# ruff: noqa: S608 - the only text spliced into the SQL is api_name_in's IN-list of quoted literals.

from __future__ import annotations

from analysis.model.cuda_api import api_name_in
from analysis.model.trace import Trace
from analysis.result_parts import Launches, LaunchKind

SKIPPED = "no CUDA API trace in the report: collect it with nsys profile --trace=cuda"

# Launch calls: every CUDA API whose name says it launches (cudaLaunchKernel, cuLaunchKernel(Ex),
# cudaLaunchKernelExC, cudaLaunchCooperativeKernel, cudaGraphLaunch, cuGraphLaunch ...). Filtering on the
# handful of such names first keeps the join to the kernels small (the other calls never launch a kernel).
LAUNCH_RE = r"^cu(da)?[A-Za-z]*Launch"

_JOINED = """
    WITH calls AS (
        SELECT pid, correlation_id, start_ns AS cs, end_ns AS ce,
               name IN ('cudaGraphLaunch', 'cuGraphLaunch') AS is_graph_call
        FROM cuda_api WHERE {launch} AND pid IS NOT NULL AND correlation_id IS NOT NULL),
    j AS (
        SELECT c.pid, c.correlation_id, c.cs, c.ce, k.start_ns AS ks,
               CASE WHEN c.is_graph_call OR COALESCE(k.graph_id, 0) <> 0 THEN 'graph' ELSE 'stream' END AS kind
        FROM kernels k JOIN calls c ON c.pid = k.pid AND c.correlation_id = k.correlation_id)"""

# Per kind, one pass: a stream launch call launches one kernel, so its kernels are its calls.
_BY_KIND = _JOINED + """
    SELECT kind, COUNT(*), quantile_disc(ce - cs, [0.5, 0.9]), quantile_disc(ks - cs, [0.5, 0.9]),
           quantile_disc(GREATEST(ks - ce, 0), [0.5, 0.9])
    FROM j GROUP BY kind ORDER BY kind"""

# A graph launch call launches many kernels: its call figures are per call; its work is the GPU time of the
# kernels (or whole-graph replays) it ran.
_GRAPH_CALLS = _JOINED.replace("k.start_ns AS ks,", "k.start_ns AS ks, k.end_ns - k.start_ns AS kd,") + """
    SELECT COUNT(*), quantile_disc(call_ns, [0.5, 0.9]), SUM(work) FROM (
        SELECT pid, correlation_id, ANY_VALUE(ce - cs) AS call_ns, SUM(kd) AS work FROM j WHERE kind = 'graph'
        GROUP BY ALL)"""
# The calls that capture or build a graph and instantiate it: what the replays pay back.
GRAPH_SETUP_RE = (r"^cu(da)?(StreamBeginCapture\w*|StreamEndCapture|GraphInstantiate\w*|GraphUpload|GraphExecUpdate\w*"
                  r"|GraphCreate|GraphClone|GraphAdd\w*Node\w*)$")


def launch_summary(trace: Trace) -> Launches:
    """Stream and graph launches (``analysis.result_parts.Launches``; a kind without launches is None, and
    ``reason`` says why none are ``available``). Cached on the trace (KRN001 reads it too)."""
    cached = trace.memo.get("launch_summary")
    if cached is not None:
        return cached
    kinds: dict[str, LaunchKind] = {}
    reason = None
    if not trace.has_rows("cuda_api"):
        reason = SKIPPED
    elif not trace.has_rows("kernels"):
        reason = "no kernels in the report"
    else:
        launch = api_name_in(trace, LAUNCH_RE)
        for kind, kernels, call, lat, queue in trace.sql(_BY_KIND.format(launch=launch)):
            launches, graph = kernels, {}
            if kind == "graph":
                launches, call, work = trace.sql(_GRAPH_CALLS.format(launch=launch))[0]
                n, ns = trace.sql(f"SELECT COUNT(*), COALESCE(SUM(end_ns - start_ns), 0) FROM cuda_api "
                                  f"WHERE {api_name_in(trace, GRAPH_SETUP_RE)}")[0]
                graph = {"work_ns": int(work or 0), "setup_calls": int(n), "setup_ns": int(ns)}
            kinds[kind] = LaunchKind(launches=int(launches), kernels=int(kernels),
                                     call_median_ns=int(call[0]), call_p90_ns=int(call[1]),
                                     latency_median_ns=int(lat[0]), latency_p90_ns=int(lat[1]),
                                     queue_median_ns=int(queue[0]), queue_p90_ns=int(queue[1]), **graph)
    out = Launches(available=reason is None, reason=reason, stream=kinds.get("stream"), graph=kinds.get("graph"))
    trace.memo["launch_summary"] = out
    return out
