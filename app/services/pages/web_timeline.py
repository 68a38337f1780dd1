"""The run page's multi-rank timeline: the run's ingested nsys reports opened as ``analysis.views.run_timeline`` parts.

A report's lane catalogue and extent depend only on its DuckDB file, which is immutable once published:
the ingest writes them beside it (``analysis.views.run_overview.lanes_path``), and they are kept here per file
path and mtime (bounded), so every zoom step only runs the window queries. The read-only
connections stay open between requests too (per serving thread, a bounded LRU): opening six files and reading their catalogues again took longer than a zoom step's queries.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from analysis import api
from app.models import Report
from app.services.reads.run_repo import get_run
from app.services.reads.summaries import run_results
from app.services.storage import data_path
from app.settings import Settings

_CACHE_SIZE = 256
_cache: OrderedDict[str, tuple[list[api.Group], tuple[int, int] | None]] = OrderedDict()
_cache_lock = threading.Lock()
_OPEN_SIZE = 8    # open connections kept per serving thread (a six-rank run fits)
_local = threading.local()   # per thread, so no thread ever closes or uses another thread's connection


def _trace(path: str, label: str) -> api.Trace:
    """A kept read-only Trace of ``path`` for this thread (dropped with the thread)."""
    kept: OrderedDict[str, api.Trace] | None = getattr(_local, "traces", None)
    if kept is None:
        kept = _local.traces = OrderedDict()
    trace = kept.pop(path, None)
    if trace is None:
        # The default configuration on purpose: DuckDB shares one database instance per file within a
        # process and refuses a second connection with another configuration (the tables/compare routes
        # open the same files with the default); the instance's buffer pool is shared, not per connection.
        trace = api.open_report(Path(path), label)
    kept[path] = trace
    while len(kept) > _OPEN_SIZE:
        kept.popitem(last=False)[1].close()
    return trace


def _described(part: api.Part, path: str) -> tuple[list[api.Group], tuple[int, int] | None]:
    """The report's lane catalogue and extent: from this process's cache (keyed by path and mtime), else from
    the lanes file the ingest wrote beside the report, else read from the report once and that file written
    (a report ingested before the file existed)."""
    try:
        key = f"{path}@{Path(path).stat().st_mtime_ns}"
    except OSError:
        key = path
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit
    hit = api.lanes_described(part, Path(path))   # outside the lock: it reads files
    with _cache_lock:
        _cache[key] = hit
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return hit


_build_lock = threading.Lock()
USE_OVERVIEW = True   # benchmarks/run_timeline_latency.py turns it off to time the same run without overviews


def _overview(part: api.Part, path: Path, ext: tuple[int, int] | None) -> Path | None:
    """The report's overview file, built on first use (once per report: the DuckDB file never changes).

    Published by rename, so a concurrent reader in another process sees the whole file or none; here one
    thread builds while the others wait, rather than several scanning the same report."""
    if ext is None or not USE_OVERVIEW:
        return None
    out = api.overview_path(path)
    if out.is_file():
        return out
    with _build_lock:
        if not out.is_file():
            try:
                api.build_overview(part.trace, ext, out)
            except OSError:   # a read-only data dir: windows are still answered from the report itself
                return None
    return out


@contextmanager
def run_parts(session: Session, settings: Settings, run_id: int):
    """Yield (parts, catalogues, extents) for the run's ingested nsys reports (kept open, see above)."""
    get_run(session, run_id)
    reports = list(session.scalars(
        sa.select(Report).where(Report.run_id == run_id, Report.kind == api.ToolKind.NSYS.value, Report.trace_path.is_not(None))
        .order_by(Report.rank, Report.id)))
    parts = []
    for r in reports:
        path = data_path(settings, r.trace_path or "")
        if r.trace_path and path.is_file():
            parts.append((api.run_part(_trace(str(path), r.name), r.id, r.rank, r.host or (r.info or {}).get("host")),
                          str(path)))
    described = [_described(p, key) for p, key in parts]
    for (p, key), (_cat, ext) in zip(parts, described, strict=True):
        p.overview = _overview(p, Path(key), ext)
    yield [p for p, _ in parts], [d[0] for d in described], [d[1] for d in described]


def _on_clock(item: dict[str, Any], off: int) -> dict[str, Any] | None:
    s, e = item.get("start_ns"), item.get("end_ns")
    if not isinstance(s, int) or not isinstance(e, int):
        return None
    return {**item, "start_ns": s + off, "end_ns": e + off}


def run_phases(session: Session, run_id: int, groups: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per nsys report of the run, its analysis phases (startup, warmup, steady, teardown or whole) and the
    analysis window its rules used, from the last analysis, moved onto the timeline's run clock with the
    report's offset. Empty before the first analysis."""
    offs = {g["report_id"]: int(g.get("offset_ns") or 0) for g in groups}
    results = run_results(session, run_id)
    out = []
    for report_id, stored in results.reports.items():
        summary = stored.summary
        if report_id not in offs or summary is None:
            continue
        off = offs[report_id]
        phases = [p for p in (_on_clock(x.to_json(), off) for x in summary.phases or ()) if p]
        window = None if summary.window is None else summary.window.to_json()
        if window is not None:   # no bounds: the whole report (what the rules then read)
            window = _on_clock(window, off) or {**window, "start_ns": None, "end_ns": None}
        loops_found = () if summary.iterations is None else summary.iterations.loops
        loops = [lp for lp in (_on_clock(x.to_json(), off) for x in loops_found) if lp]
        out.append({"report_id": report_id,
                    "phases": [{k: p.get(k) for k in ("name", "start_ns", "end_ns", "reason")} for p in phases],
                    # the loops the analysis found (several one after another, or the one), marked on the timeline
                    "loops": [{k: lp.get(k) for k in ("index", "start_ns", "end_ns", "count", "main")} for lp in loops],
                    "window": None if window is None else {k: window.get(k) for k in
                                                           ("spec", "phase", "start_ns", "end_ns", "reason")}})
    return out
