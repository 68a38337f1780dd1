"""All nsys reports of a run on one aligned clock: rank groups of lanes, downsampled windows, launch flows, collectives.

Reports are aligned as COMM002 aligns them: ``session_start_utc_ns + start_ns`` is wall-clock time, and
the run's clock starts at the earliest report's session start (a report without that start is drawn at
offset 0, and the response says the run is not aligned). A *group* is one profiled process of one
report (a rank); its lanes are its GPU streams, its CUDA API threads that launched GPU work, and its
NVTX threads. The lane catalogue comes from the whole report, so lanes and their heights stay put
whatever window is drawn; the boxes inside a window are merged per pixel column exactly as in
``analysis.views.timeline``.
"""

from __future__ import annotations

import ipaddress
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from analysis.model.trace import Trace
from analysis.views import run_overview
from analysis.views.payloads import Group, LaneInfo, RunWindow, WindowGroup
from analysis.views.run_overview import GPU_TABLES, lane_facts
from analysis.views.timeline import (
    COUNT,
    END,
    MAX_BUCKETS,
    MAX_NVTX_DEPTH,
    MIN_BUCKETS,
    START,
    box_table,
    extent,
)

NAME_CHARS = 160   # a box's name is for the tooltip; the kernel table has the full text
MAX_THREADS = 8    # reports queried side by side (DuckDB releases the GIL); each connection has its own threads

_GPU_ACTIVITY = """
    SELECT pid, device, stream, start_ns, end_ns, category AS cat, name FROM kernels
     WHERE end_ns >= $w0 AND start_ns <= $w1
    UNION ALL
    SELECT pid, device, stream, start_ns, end_ns, 'memcpy', 'Memcpy ' || coalesce(copy_kind, 'unknown') FROM memcpy
     WHERE end_ns >= $w0 AND start_ns <= $w1
    UNION ALL
    SELECT pid, device, stream, start_ns, end_ns, 'memset', 'Memset' FROM memset
     WHERE end_ns >= $w0 AND start_ns <= $w1
"""


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    """One pool for the process: starting threads per window cost more than a small window's queries on a
    loaded machine. Each job uses only its own report's connection, so concurrent windows never share one."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=MAX_THREADS, thread_name_prefix="run-timeline")
        return _POOL


@dataclass
class Part:
    """One nsys report of the run, as the page names it."""

    trace: Trace
    report_id: int
    rank: int | None = None
    host: str | None = None
    overview: Path | None = None   # the report's analysis.views.run_overview file, if built


def short_host(host: str | None) -> str | None:
    """``ault44.cscs.ch`` -> ``ault44``: the part of a host name people say. An IP address stays whole (its
    first number names nothing); a loopback address or ``localhost`` names no machine: None."""
    if not host:
        return None
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None if host.lower() == "localhost" else host.split(".")[0]
    return None if address.is_loopback else host


def offsets(parts: list[Part]) -> tuple[list[int], bool]:
    """Per part, the ns to add to its times to reach the run clock; and whether all parts are aligned."""
    starts = [p.trace.session_start_utc_ns for p in parts]
    clocks = [s for s in starts if s is not None]
    if len(parts) < 2 or len(clocks) < len(starts):
        return [0] * len(parts), len(parts) < 2
    origin = min(clocks)
    return [int(s) - origin for s in clocks], True


def group_label(rank: int | None, host: str | None, pid: int | None, devices: list[int], many_pids: bool) -> str:
    """``rank 3 · ault44 · GPU 0``; the pid only where the rank does not tell the processes apart."""
    parts = []
    if rank is not None:
        parts.append(f"rank {rank}")
    if host:
        parts.append(short_host(host) or "")
    if devices:
        parts.append("GPU " + ",".join(str(d) for d in devices))
    if pid is not None and (rank is None or many_pids):
        parts.append(f"pid {pid}")
    return " · ".join(p for p in parts if p) or "report"


def catalogue(part: Part, facts: dict[str, list[list]] | None = None) -> list[Group]:
    """The report's groups and lanes over the whole report (independent of any window); ``facts``: its
    ``lane_facts`` when kept (else read from the report)."""
    facts = facts if facts is not None else lane_facts(part.trace)
    gpu = [tuple(r) for r in facts["gpu"]]
    api = [tuple(r) for r in facts["api"]]
    nvtx = [tuple(r) for r in facts["nvtx"]]
    thread_names = {(p, tid): n for p, tid, n in facts["threads"] if n}
    pids = sorted({r[0] for r in gpu + api + nvtx}, key=lambda p: (p is None, p or 0))
    groups: list[Group] = []
    for pid in pids:
        streams = sorted({(d, s) for p, d, s in gpu if p == pid}, key=lambda x: (x[0] is None, x[0] or 0,
                                                                                 x[1] is None, x[1] or 0))
        devices = sorted({d for d, _ in streams if d is not None})
        lanes: list[LaneInfo] = [{"id": f"{part.report_id}:{pid}:gpu:{d}:{s}", "kind": "gpu", "device": d, "stream": s,
                  "label": f"GPU {'?' if d is None else d} · stream {'?' if s is None else s}"} for d, s in streams]
        for p, tid in sorted((r for r in api if r[0] == pid), key=lambda r: r[1] or 0):
            name = thread_names.get((p, tid))
            lanes.append({"id": f"{part.report_id}:{pid}:api:{tid}", "kind": "api", "tid": tid,
                          "label": f"CUDA API · tid {tid}" + (f" ({name})" if name else "")})
        for p, tid, depth in sorted((r for r in nvtx if r[0] == pid), key=lambda r: r[1] or 0):
            name = thread_names.get((p, tid))
            lanes.append({"id": f"{part.report_id}:{pid}:nvtx:{tid}", "kind": "nvtx", "tid": tid, "depth": int(depth),
                          "label": f"NVTX · tid {tid}" + (f" ({name})" if name else "")})
        groups.append({
            "id": f"{part.report_id}:{pid}", "report_id": part.report_id, "pid": pid, "rank": part.rank,
            "host": part.host, "devices": devices,
            "label": group_label(part.rank, part.host, pid, devices, len(pids) > 1), "lanes": lanes,
        })
    return groups


def _boxes(part: Part, params: dict[str, int], launchers: list[tuple]) -> dict[str, list[list]]:
    """Box rows of the window per lane id (report-local times, values in the order of
    ``analysis.views.timeline.BOX_FIELDS``); ``launchers``: the (pid, tid) API lanes."""
    t, rid = part.trace, part.report_id
    out: dict[str, list[list]] = {}
    b = run_overview.bucket("start_ns", "$w0", "$n", "$span", params["span"], params["n"])
    if any(t.has_rows(x) for x in GPU_TABLES):
        for pid, dev, st, cat, _b, s, e, n, busy, name in t.sql(
                f"""SELECT pid, device, stream, cat, {b} AS b, min(start_ns), max(end_ns), count(*),
                           sum(end_ns - start_ns), arg_max(name, end_ns - start_ns)
                      FROM ({_GPU_ACTIVITY}) GROUP BY ALL ORDER BY b""", params):  # noqa: S608 - fixed SQL
            out.setdefault(f"{rid}:{pid}:gpu:{dev}:{st}", []).append(
                [int(s), int(e), int(n), int(busy), cat, (name or "")[:NAME_CHARS]])
    if launchers:
        # The launching threads come from the catalogue (integers read from the file), not a subquery per window.
        pairs = ", ".join(f"({'NULL' if p is None else int(p)}, {int(tid)})" for p, tid in launchers)
        for pid, tid, _b, s, e, n, busy, name in t.sql(
                f"""SELECT pid, tid, {b} AS b, min(start_ns), max(end_ns), count(*), sum(end_ns - start_ns),
                           arg_max(name, end_ns - start_ns)
                      FROM cuda_api WHERE end_ns >= $w0 AND start_ns <= $w1 AND (pid, tid) IN ({pairs})
                     GROUP BY ALL ORDER BY b""", params):  # noqa: S608 - fixed SQL and integers
            out.setdefault(f"{rid}:{pid}:api:{tid}", []).append(
                [int(s), int(e), int(n), int(busy), "cuda_api", (name or "")[:NAME_CHARS]])
    if t.has_rows("nvtx"):
        for pid, tid, depth, _b, s, e, n, busy, text in t.sql(
                f"""SELECT pid, tid, least(coalesce(nesting, 0), {MAX_NVTX_DEPTH}) AS depth, {b} AS b,
                           min(start_ns), max(end_ns), count(*), sum(end_ns - start_ns),
                           arg_max(text, end_ns - start_ns)
                      FROM nvtx WHERE end_ns IS NOT NULL AND end_ns >= $w0 AND start_ns <= $w1
                     GROUP BY ALL ORDER BY depth, b""", params):  # noqa: S608 - fixed SQL
            out.setdefault(f"{rid}:{pid}:nvtx:{tid}", []).append(
                [int(s), int(e), int(n), int(busy), "nvtx", (text or "")[:NAME_CHARS], int(depth)])
    return out


def window(parts: list[Part], start_ns: int | None = None, end_ns: int | None = None, buckets: int = 1000,
           catalogues: list[list[Group]] | None = None,
           extents: list[tuple[int, int] | None] | None = None) -> RunWindow:
    """The run's groups and lanes between ``start_ns`` and ``end_ns`` of the run clock, downsampled.

    Each lane's ``boxes`` are ``{"fields": [...], "rows": [...]}`` as in ``analysis.views.timeline.window``
    (``start_ns, end_ns, count, busy_ns, category, name``, NVTX lanes add ``depth``), times on the run clock.
    ``catalogues`` and ``extents`` (per part) may be passed in from a cache; they only depend on the file.
    A part's ``overview`` file (``analysis.views.run_overview``), when set, answers the coarse windows.
    """
    offs, aligned = offsets(parts)
    catalogues = catalogues if catalogues is not None else [catalogue(p) for p in parts]
    extents = extents if extents is not None else [extent(p.trace) for p in parts]
    spans = [(e[0] + o, e[1] + o) for e, o in zip(extents, offs, strict=True) if e is not None]
    buckets = max(MIN_BUCKETS, min(MAX_BUCKETS, int(buckets)))
    # Each group's keys in the catalogue's order, then its offset (the JSON's key order).
    groups: list[WindowGroup] = [
        {**g, "offset_ns": o, "lanes": [{**lane, "boxes": box_table([], lane["kind"])} for lane in g["lanes"]]}
        for cat, o in zip(catalogues, offs, strict=True) for g in cat]
    groups.sort(key=lambda g: (g["rank"] is None, g["rank"] or 0, g["host"] or "", g["report_id"], g["pid"] or 0))
    if not spans:
        return {"extent": None, "start_ns": 0, "end_ns": 0, "buckets": buckets, "aligned": aligned,
                "groups": groups, "boxes": 0, "activities": 0}
    ext = (min(s for s, _ in spans), max(e for _, e in spans))
    w0 = ext[0] if start_ns is None else max(int(start_ns), ext[0])
    w1 = ext[1] if end_ns is None else min(int(end_ns), ext[1])
    w1 = max(w1, w0 + 1)
    jobs = []
    for part, off, e, cat in zip(parts, offs, extents, catalogues, strict=True):
        if e is None or e[1] + off < w0 or e[0] + off > w1:
            continue
        local = {"w0": w0 - off, "w1": w1 - off, "n": buckets, "span": w1 - w0}
        launchers = [(g["pid"], lane["tid"]) for g in cat for lane in g["lanes"] if lane["kind"] == "api"]
        level = run_overview.level_for(e, local["w0"], local["w1"], buckets)
        ov = (part.overview, level) if part.overview is not None and level is not None else None
        jobs.append((part, off, local, launchers, ov))

    def run(job: tuple) -> tuple[int, dict[str, list]]:
        part, off, local, launchers, ov = job
        if ov is not None:
            return off, run_overview.boxes(part.trace, ov[0], ov[1], {**local, "report_id": part.report_id},
                                           launchers)
        return off, _boxes(part, local, launchers)

    by_lane: dict[str, list] = {}
    results = _pool().map(run, jobs) if len(jobs) > 1 else map(run, jobs)
    for off, found in results:
        for lane_id, boxes in found.items():
            for box in boxes:
                box[START] += off
                box[END] += off
            by_lane[lane_id] = boxes
    count = activities = 0
    for g in groups:
        for lane in g["lanes"]:
            rows = lane["boxes"]["rows"] = by_lane.get(lane["id"], [])
            count += len(rows)
            activities += sum(b[COUNT] for b in rows)
    return {"extent": list(ext), "start_ns": w0, "end_ns": w1, "buckets": buckets, "aligned": aligned,
            "groups": groups, "boxes": count, "activities": activities}
