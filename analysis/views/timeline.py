"""A downsampled time window of one ingested nsys report: lanes per device/stream and NVTX thread.

The browser never receives the whole trace. The window ``[start_ns, end_ns]`` is cut into ``buckets``
equal slices (one per pixel column of the drawing); within a lane, all activities of one category that
start in the same slice are merged into one box that spans them and carries how many activities it
stands for and how much busy time they add up to. A lane therefore holds at most
``buckets x categories`` boxes whatever the report's size, and every count and busy time it carries is
the exact aggregate of the rows it replaces.
"""

from __future__ import annotations

from typing import Any

from analysis.model.trace import Trace
from analysis.views.payloads import BoxTable, KernelInstances, Lane, Window

MIN_BUCKETS, MAX_BUCKETS = 16, 4000

# A lane's boxes travel as ``{"fields": [...], "rows": [[...], ...]}``: one row per box holding its values in
# the order of ``fields`` (the names once per lane rather than once per box: the payload stays as small and
# as fast to build and draw as plain arrays). NVTX lanes add each box's nesting depth.
BOX_FIELDS = ("start_ns", "end_ns", "count", "busy_ns", "category", "name")
NVTX_BOX_FIELDS = (*BOX_FIELDS, "depth")
START, END, COUNT = (BOX_FIELDS.index(f) for f in ("start_ns", "end_ns", "count"))
NAME_CHARS = 400   # enough for any readable kernel name; the kernel table has the full text
MAX_NVTX_DEPTH = 8

# GPU activity of one report as (device, stream, start, end, category, name) rows.
_GPU_ACTIVITY = """
    SELECT device, stream, start_ns, end_ns, category AS cat, name FROM kernels
     WHERE end_ns >= $w0 AND start_ns <= $w1
    UNION ALL
    SELECT device, stream, start_ns, end_ns, 'memcpy', 'Memcpy ' || coalesce(copy_kind, 'unknown') FROM memcpy
     WHERE end_ns >= $w0 AND start_ns <= $w1
    UNION ALL
    SELECT device, stream, start_ns, end_ns, 'memset', 'Memset' FROM memset
     WHERE end_ns >= $w0 AND start_ns <= $w1
"""


def box_table(rows: list[list[Any]], kind: str) -> BoxTable:
    """A lane's boxes in the wire layout (see ``BOX_FIELDS``); ``kind`` is the lane's."""
    return {"fields": list(NVTX_BOX_FIELDS if kind == "nvtx" else BOX_FIELDS), "rows": rows}


def extent(trace: Trace) -> tuple[int, int] | None:
    """First start and last end over GPU activity and NVTX ranges, or None for an empty report."""
    parts = [
        f"SELECT min(start_ns) AS s, max(end_ns) AS e FROM {table}"  # noqa: S608 - fixed table names
        for table in ("kernels", "memcpy", "memset", "nvtx")
        if table in trace.tables
    ]
    if not parts:
        return None
    row = trace.sql(f"SELECT min(s), max(e) FROM ({' UNION ALL '.join(parts)})")[0]  # noqa: S608
    if row[0] is None or row[1] is None:
        return None
    return int(row[0]), int(row[1])


def _bucket_expr() -> str:
    # Slice index of a row's (clipped) start; the last slice also takes the row that starts exactly at w1.
    # Exact integer floor division in HUGEINT: the offset times the bucket count cannot overflow whatever
    # the window (a float quotient could also round across a slice edge).
    return "least(((greatest(start_ns, $w0) - $w0)::HUGEINT * $n // $span)::BIGINT, $n - 1)"


def _gpu_lanes(trace: Trace, params: dict[str, int]) -> list[Lane]:
    if not any(trace.has_rows(t) for t in ("kernels", "memcpy", "memset")):
        return []
    rows = trace.sql(
        f"""
        SELECT device, stream, cat, {_bucket_expr()} AS b,
               min(start_ns), max(end_ns), count(*), sum(end_ns - start_ns),
               arg_max(name, end_ns - start_ns)
          FROM ({_GPU_ACTIVITY})
         GROUP BY ALL
         ORDER BY device NULLS LAST, stream NULLS LAST, b, cat
        """,  # noqa: S608 - only fixed SQL fragments are interpolated
        params,
    )
    lanes: dict[tuple, Lane] = {}
    for device, stream, cat, _b, start, end, count, busy, name in rows:
        key = (device, stream)
        lane = lanes.get(key)
        if lane is None:
            dev = "?" if device is None else device
            st = "?" if stream is None else stream
            lane = lanes[key] = {
                "id": f"gpu:{dev}:{st}", "kind": "gpu", "device": device, "stream": stream,
                "label": f"GPU {dev} · stream {st}", "boxes": box_table([], "gpu"),
            }
        lane["boxes"]["rows"].append([int(start), int(end), int(count), int(busy), cat, (name or "")[:NAME_CHARS]])
    return list(lanes.values())


def _nvtx_lanes(trace: Trace, params: dict[str, int]) -> list[Lane]:
    if not trace.has_rows("nvtx"):
        return []
    rows = trace.sql(
        f"""
        SELECT pid, tid, least(coalesce(nesting, 0), {MAX_NVTX_DEPTH}) AS depth, {_bucket_expr()} AS b,
               min(start_ns), max(end_ns), count(*), sum(end_ns - start_ns),
               arg_max(text, end_ns - start_ns)
          FROM nvtx
         WHERE end_ns IS NOT NULL AND end_ns >= $w0 AND start_ns <= $w1
         GROUP BY ALL
         ORDER BY pid NULLS LAST, tid NULLS LAST, depth, b
        """,  # noqa: S608 - only fixed SQL fragments are interpolated
        params,
    )
    names = {}
    if trace.has_rows("threads"):
        names = {(p, t): n for p, t, n in trace.sql("SELECT pid, tid, name FROM threads")}
    lanes: dict[tuple, Lane] = {}
    for pid, tid, depth, _b, start, end, count, busy, text in rows:
        key = (pid, tid)
        lane = lanes.get(key)
        if lane is None:
            thread = names.get(key)
            label = f"NVTX · pid {pid} tid {tid}" + (f" ({thread})" if thread else "")
            lane = lanes[key] = {
                "id": f"nvtx:{pid}:{tid}", "kind": "nvtx", "pid": pid, "tid": tid, "label": label,
                "depth": 0, "boxes": box_table([], "nvtx"),
            }
        lane["depth"] = max(lane.get("depth", 0), int(depth) + 1)
        lane["boxes"]["rows"].append([int(start), int(end), int(count), int(busy), "nvtx", (text or "")[:NAME_CHARS],
                              int(depth)])
    return list(lanes.values())


def window(trace: Trace, start_ns: int | None = None, end_ns: int | None = None,
           buckets: int = 1000) -> Window:
    """The report's lanes between ``start_ns`` and ``end_ns`` (default: the whole report), downsampled.

    Each lane's ``boxes`` are ``{"fields": [...], "rows": [...]}`` (``box_table``) with the fields
    ``start_ns, end_ns, count, busy_ns, category, name`` (NVTX boxes add their ``depth``); ``count > 1``
    means the box merges that many activities of the lane that start in one slice, and ``name`` is then
    the longest one's.
    """
    ext = extent(trace)
    buckets = max(MIN_BUCKETS, min(MAX_BUCKETS, int(buckets)))
    if ext is None:
        return {"extent": None, "start_ns": 0, "end_ns": 0, "buckets": buckets, "lanes": []}
    w0 = ext[0] if start_ns is None else max(int(start_ns), ext[0])
    w1 = ext[1] if end_ns is None else min(int(end_ns), ext[1])
    if w1 <= w0:
        w1 = w0 + 1
    params = {"w0": w0, "w1": w1, "n": buckets, "span": w1 - w0}
    lanes = _gpu_lanes(trace, params) + _nvtx_lanes(trace, params)
    activities = sum(box[COUNT] for lane in lanes for box in lane["boxes"]["rows"])
    return {
        "extent": [ext[0], ext[1]],
        "start_ns": w0,
        "end_ns": w1,
        "buckets": buckets,
        "lanes": lanes,
        "boxes": sum(len(lane["boxes"]["rows"]) for lane in lanes),
        "activities": activities,
    }


def kernel_instances(trace: Trace, name: str, limit: int = 5) -> KernelInstances:
    """Where a kernel (by demangled, short or mangled name) ran in this report: count, total and first runs.

    Used to take an Nsight Compute finding about a kernel to that kernel's time on the nsys timeline.
    """
    if not trace.has_rows("kernels"):
        return {"count": 0, "total_ns": 0, "first": []}
    # Schema 6 stores each mangled name once (mangled_names); earlier files store it in every row.
    mangled = ("mangled_id IN (SELECT id FROM mangled_names WHERE name = $n)" if "mangled_names" in trace.tables
               else "mangled_name = $n")
    cond = f"name = $n OR short_name = $n OR {mangled}"
    count, total = trace.sql(
        f"SELECT count(*), coalesce(sum(end_ns - start_ns), 0) FROM kernels WHERE {cond}",  # noqa: S608
        {"n": name},
    )[0]
    first = trace.sql(
        f"SELECT start_ns, end_ns, device, stream FROM kernels WHERE {cond} ORDER BY start_ns LIMIT $lim",  # noqa: S608
        {"n": name, "lim": int(limit)},
    )
    return {
        "count": int(count), "total_ns": int(total),
        "first": [{"start_ns": s, "end_ns": e, "device": d, "stream": st} for s, e, d, st in first],
    }
