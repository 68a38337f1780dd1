"""A report's timeline overview: its GPU, CUDA API and NVTX activity pre-merged per lane into a fixed number of
fine time bins, written once to a Parquet file beside the report's DuckDB file.

Whole-run and zoomed-out windows of ``analysis.views.run_timeline`` then merge a few hundred thousand overview
rows into pixel columns instead of scanning every kernel (a six-rank run holds millions). A window uses the
overview only when one pixel column covers at least ``MIN_BINS_PER_PX`` fine bins: a fine bin is placed
whole in the column of its first start, so an activity can move by at most one fine bin (a quarter of a
pixel); counts, busy time, first starts and last ends stay exact. Closer zooms read the report as before.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from analysis.model.trace import Trace
from analysis.views.payloads import LaneFile
from analysis.views.timeline import MAX_NVTX_DEPTH, extent

# Fine bins over the report's extent, per level (coarse first). The finest level answers windows down to about
# 1 % of the report (at 1,400 columns); below that a window reads few enough rows of the report itself.
LEVELS = (8192, 32768, 131072, 524288)
MIN_BINS_PER_PX = 4    # a pixel column must cover this many fine bins of a level for that level to be used
ROW_GROUP_ROWS = 32768
VERSION = 4            # in the file name: a changed layout is rebuilt, never misread
NAME_CHARS = 160
COLUMNS = ("level", "kind", "pid", "device", "stream", "tid", "depth", "cat", "bin", "s", "e", "n", "busy", "top", "name")

_GPU = """
    SELECT pid, device, stream, start_ns, end_ns, category AS cat, name FROM kernels
    UNION ALL SELECT pid, device, stream, start_ns, end_ns, 'memcpy', 'Memcpy ' || coalesce(copy_kind, 'unknown')
      FROM memcpy
    UNION ALL SELECT pid, device, stream, start_ns, end_ns, 'memset', 'Memset' FROM memset
"""


def overview_path(trace_path: Path) -> Path:
    """Where the overview of the report at ``trace_path`` lives (same directory, so a purge removes both)."""
    return trace_path.with_name(f"{trace_path.stem}.overview-v{VERSION}.parquet")


LANES_VERSION = 1
GPU_TABLES = ("kernels", "memcpy", "memset")


def lanes_path(trace_path: Path) -> Path:
    """Where the report's lane catalogue facts and extent are kept (``lane_facts``)."""
    return trace_path.with_name(f"{trace_path.stem}.lanes-v{LANES_VERSION}.json")


def lane_facts(t: Trace) -> dict[str, list[list]]:
    """What the lane catalogue reads from a report (it depends only on the file, so it is kept beside it, see
    ``analysis.views.run_overview.prepare``): GPU (pid, device, stream), launching API threads (pid, tid), NVTX
    threads (pid, tid, depth) and thread names (pid, tid, name)."""
    gpu: list[tuple] = []
    for table in GPU_TABLES:
        if t.has_rows(table):
            # ordered: the kept facts must not depend on DuckDB's parallel scan order
            gpu += t.sql(f"SELECT DISTINCT pid, device, stream FROM {table} ORDER BY ALL")  # noqa: S608 - fixed names
    api: list[tuple] = []
    if t.has_rows("cuda_api") and t.has_rows("kernels"):
        # Only threads that launched GPU work: the rest of a process's CUDA calls are set-up noise.
        api = t.sql("""SELECT DISTINCT a.pid, a.tid FROM cuda_api a
                        WHERE (a.pid, a.tid) IN (SELECT DISTINCT pid, tid FROM kernels WHERE tid IS NOT NULL)
                        ORDER BY ALL""")
    nvtx: list[tuple] = []
    if t.has_rows("nvtx"):
        nvtx = t.sql(f"""SELECT pid, tid, least(max(coalesce(nesting, 0)), {MAX_NVTX_DEPTH}) + 1 FROM nvtx
                          WHERE end_ns IS NOT NULL GROUP BY pid, tid ORDER BY pid, tid""")  # noqa: S608 - a constant
    threads: list[tuple] = []
    if api or nvtx:
        wanted = {(r[0], r[1]) for r in api + nvtx}
        threads = [r for r in t.sql("SELECT pid, tid, name FROM threads") if r[2] and (r[0], r[1]) in wanted]
    return {"gpu": [list(r) for r in gpu], "api": [list(r) for r in api], "nvtx": [list(r) for r in nvtx],
            "threads": [list(r) for r in threads]}


def write_lanes(trace: Trace, out: Path) -> LaneFile:
    """Read the report's lane facts and extent once and publish them at ``out`` (temporary name, rename)."""
    ext = extent(trace)
    described: LaneFile = {"facts": lane_facts(trace), "extent": None if ext is None else [int(ext[0]), int(ext[1])]}
    tmp = out.with_name(f".{out.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(described))
    os.replace(tmp, out)
    return described


def read_lanes(trace_path: Path) -> tuple[dict[str, list[list]], tuple[int, int] | None] | None:
    """The kept lane facts and extent of the report at ``trace_path``, or None when none were written."""
    try:
        described = json.loads(lanes_path(trace_path).read_text())
        ext = described["extent"]
        return described["facts"], (None if ext is None else (int(ext[0]), int(ext[1])))
    except (OSError, ValueError, KeyError, TypeError):
        return None


# Switches for benchmarks/run_timeline_latency.py, which times windows with and without them interleaved.
BIGINT_BUCKETS = True
USED_LEVELS = len(LEVELS)


def bucket(column: str, w0: str, n: str, span: str, span_value: int, n_value: int) -> str:
    """The pixel column (or fine bin) of a row: ``(max(column, w0) - w0) * n // span``, exact integer floor
    division. In BIGINT when the largest product (``span * n``: the filters keep offsets within the span)
    cannot overflow, which is three times cheaper than HUGEINT; in HUGEINT otherwise (a span of weeks)."""
    offset = f"(greatest({column}, {w0}) - {w0})"
    if BIGINT_BUCKETS and int(span_value) * int(n_value) < 2**62:
        return f"least({offset} * {n} // {span}, {n} - 1)"
    return f"least(({offset}::HUGEINT * {n} // {span})::BIGINT, {n} - 1)"


def _bin(e0: int, span: int, bins: int) -> str:
    # Not clipped at e0 and in HUGEINT: CUDA API calls may start before the extent (negative bins of their own).
    return f"least(((start_ns - {int(e0)})::HUGEINT * {bins} // {max(1, int(span))})::BIGINT, {bins - 1})"


def build(trace: Trace, extent: tuple[int, int], out: Path) -> Path:
    """Write the overview of ``trace`` (report-local ``extent``) to ``out`` (temporary name, then rename)."""
    e0, span = extent[0], extent[1] - extent[0]
    selects = []
    for level, bins in enumerate(LEVELS):
        selects += _level_selects(trace, level, _bin(e0, span, bins))
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    if not selects:   # nothing to draw: an empty file with the same columns
        selects.append("SELECT 0 AS level, NULL::VARCHAR AS kind, NULL::BIGINT AS pid, NULL::BIGINT AS device, "
                       "NULL::BIGINT AS stream, NULL::BIGINT AS tid, 0 AS depth, NULL::VARCHAR AS cat, 0::BIGINT AS bin, "
                       "0::BIGINT AS s, 0::BIGINT AS e, 0::BIGINT AS n, 0::BIGINT AS busy, 0::BIGINT AS top, "
                       "NULL::VARCHAR AS name WHERE false")
    query = " UNION ALL ".join(selects)
    # Sorted by level and bin: Parquet row-group statistics then skip most of the file for one window.
    named = f"SELECT * FROM ({query}) AS t({', '.join(COLUMNS)}) ORDER BY level, bin"  # noqa: S608 - server-made
    # Small row groups: a zoomed window's level and time filters skip most of them (half the CPU of the default).
    trace.con.execute(f"COPY ({named}) TO '{_quoted(tmp)}' (FORMAT parquet, ROW_GROUP_SIZE {ROW_GROUP_ROWS})")
    os.replace(tmp, out)
    for stale in out.parent.glob(f"{out.name.split('.overview-v')[0]}.overview-v*.parquet"):
        if stale.name != out.name:   # an older layout's file, never read again
            stale.unlink(missing_ok=True)
    return out


def _level_selects(trace: Trace, level: int, b: str) -> list[str]:
    selects = []
    if all(t in trace.tables for t in ("kernels", "memcpy", "memset")):
        selects.append(f"""SELECT {level} AS level, 'gpu' AS kind, pid, device, stream, NULL::BIGINT AS tid, 0 AS depth, cat, {b} AS bin,
                                  min(start_ns) AS s, max(end_ns) AS e, count(*) AS n, sum(end_ns - start_ns) AS busy,
                                  max(end_ns - start_ns) AS top, arg_max(name, end_ns - start_ns)[:{NAME_CHARS}] AS name
                             FROM ({_GPU}) GROUP BY ALL""")  # noqa: S608 - integers and fixed names
    if "cuda_api" in trace.tables:
        selects.append(f"""SELECT {level}, 'api', pid, NULL::BIGINT, NULL::BIGINT, tid, 0, 'cuda_api', {b}, min(start_ns),
                                  max(end_ns), count(*), sum(end_ns - start_ns), max(end_ns - start_ns),
                                  arg_max(name, end_ns - start_ns)[:{NAME_CHARS}]
                             FROM cuda_api GROUP BY ALL""")  # noqa: S608 - integers and fixed names
    if "nvtx" in trace.tables:
        selects.append(f"""SELECT {level}, 'nvtx', pid, NULL::BIGINT, NULL::BIGINT, tid,
                                  least(coalesce(nesting, 0), {MAX_NVTX_DEPTH}), 'nvtx', {b}, min(start_ns),
                                  max(end_ns), count(*), sum(end_ns - start_ns), max(end_ns - start_ns),
                                  arg_max(text, end_ns - start_ns)[:{NAME_CHARS}]
                             FROM nvtx WHERE end_ns IS NOT NULL GROUP BY ALL""")  # noqa: S608 - integers
    return selects


def prepare(trace_path: Path) -> Path | None:
    """Build the overview and the lane catalogue (``lanes_path``) of the published report at ``trace_path``
    unless they exist (the ingest worker calls this right after publishing, so even the first view of a run
    reads them); None for a report with no activity."""
    out, lanes = overview_path(trace_path), lanes_path(trace_path)
    if out.is_file() and lanes.is_file():
        return out
    trace = Trace(trace_path, trace_path.name)
    try:
        ext = extent(trace)
        if not lanes.is_file():   # the lane catalogue too: a run page's first view reads neither from the report
            write_lanes(trace, lanes)
        if out.is_file():
            return out
        return build(trace, ext, out) if ext is not None else None
    finally:
        trace.close()


def _quoted(path: Path) -> str:
    return str(path).replace("'", "''")


def level_for(extent: tuple[int, int], w0: int, w1: int, buckets: int) -> int | None:
    """The coarsest level (fewest rows to merge) whose bins are fine enough for ``buckets`` columns over
    [w0, w1] (report-local), or None when the window is too fine for every level."""
    px = (w1 - w0) / max(1, buckets)
    for level, bins in enumerate(LEVELS[:USED_LEVELS]):
        if px >= MIN_BINS_PER_PX * max(1, extent[1] - extent[0]) / bins:
            return level
    return None


def boxes(trace: Trace, path: Path, level: int, params: dict[str, int],
          launchers: list[tuple]) -> dict[str, list[list]]:
    """The window's boxes per lane id from one level of the overview, shaped exactly like ``run_timeline._boxes``."""
    rid = params["report_id"]
    b = bucket("s", "$w0", "$n", "$span", params["span"], params["n"])
    pairs = {(p, t) for p, t in launchers}
    out: dict[str, list[list]] = {}
    rows = trace.sql(
        f"""SELECT kind, pid, device, stream, tid, depth, cat, {b} AS b, min(s), max(e), sum(n), sum(busy),
                   arg_max(name, top)
              FROM read_parquet('{_quoted(path)}')
             WHERE level = $level AND e >= $w0 AND s <= $w1
             GROUP BY ALL ORDER BY kind, depth, b""",  # noqa: S608 - a server-made path
        {**{k: params[k] for k in ("w0", "w1", "n", "span")}, "level": level})
    for kind, pid, dev, st, tid, depth, cat, _b, s, e, n, busy, name in rows:
        box = [int(s), int(e), int(n), int(busy), cat, name or ""]
        if kind == "gpu":
            out.setdefault(f"{rid}:{pid}:gpu:{dev}:{st}", []).append(box)
        elif kind == "api":
            if (pid, tid) in pairs:
                out.setdefault(f"{rid}:{pid}:api:{tid}", []).append(box)
        else:
            out.setdefault(f"{rid}:{pid}:nvtx:{tid}", []).append(box + [int(depth)])
    return out
