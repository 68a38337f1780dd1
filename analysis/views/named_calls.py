"""Where the calls a finding names held the GPU idle: the time ranges behind a finding whose evidence is totals
per name.

Rules that claim the idle a host activity held (MEM006 allocations, HOST001 OS calls and off-CPU time, HOST003
communication, HOST004 compilation, SYNC001 syncs, MEM002 copies that held the host) report, per name, the idle
inside those calls summed over the window: no evidence row has a time. The evidence they own is the idle of a
device while its launching threads were inside those calls (``analysis.diagnosis.idle_anatomy``'s speakers).
This view finds it: in the window, the calls of those names (CUDA API and OS runtime calls by name, NVTX ranges
by text, off-CPU stretches by the name the idle anatomy gives them) of each device's launching threads, and the
device's idle gaps (``unit_gaps``: NVIDIA's pairing) inside each call; the calls with the most idle inside first.
A call nested in another of the names (an NVTX range around an API call) is listed with its own idle, and an
idle instant the idle anatomy gives to a more specific activity (off-CPU time inside a compilation range is
HOST004's) is still inside the call that covers it: the rows' idle adds up to the finding's impact only where
no other activity covers its calls (HOST003 and MEM006 on saxpy-mpi, tested), and is never a total to quote.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from analysis.diagnosis.idle_anatomy import speakers
from analysis.diagnosis.idle_classes import OFF_CPU_NAME_SQL
from analysis.model.activity import unit_gaps
from analysis.model.trace import Trace
from analysis.views.payloads import NamedCalls

# (table, the expression that names a row as the idle anatomy names it, extra condition)
_SOURCES: tuple[tuple[str, str, str], ...] = (
    ("cuda_api", "name", "TRUE"),
    ("osrt", "name", "TRUE"),
    ("nvtx", "text", "kind <> 'mark'"),
    ("off_cpu", OFF_CPU_NAME_SQL, "TRUE"),
)
MAX_NAMES = 50


def _idle_inside(gs: np.ndarray, ge: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per interval ``[lo[i], hi[i])``, the time of the disjoint sorted gaps ``gs``/``ge`` inside it."""
    if not len(gs) or not len(lo):
        return np.zeros(len(lo), dtype=np.int64)
    cum = np.r_[0, np.cumsum(ge - gs)]

    def before(t: np.ndarray) -> np.ndarray:
        j = np.searchsorted(gs, t, side="right") - 1
        k = np.maximum(j, 0)
        out = cum[k] + np.clip(np.minimum(t, ge[k]) - gs[k], 0, None)
        return np.where(j < 0, 0, out)

    return before(hi) - before(lo)


def named_calls(trace: Trace, names: Sequence[str], limit: int = 20) -> NamedCalls:
    """The calls named ``names`` of the (windowed) ``trace``'s launching threads inside which a device they
    launch on was idle: ``count`` (such calls), ``longest`` (the ``limit`` with the most idle inside, then the
    earliest: ``{name, start_ns, end_ns, idle_ns, pid, tid, device}``, clipped to the window)."""
    wanted = sorted({str(n) for n in names if n})[:MAX_NAMES]
    parts = [f"SELECT {expr} AS name, start_ns, end_ns, pid, tid FROM {table} "  # noqa: S608 - constants
             f"WHERE {cond} AND end_ns > start_ns AND pid IS NOT NULL"
             for table, expr, cond in _SOURCES if trace.has_rows(table)]
    empty: NamedCalls = {"count": 0, "longest": []}
    if not wanted or not parts:
        return empty
    calls = trace.sql(f"""SELECT name, start_ns, end_ns, pid, tid FROM ({" UNION ALL ".join(parts)})
                          WHERE name IN (SELECT unnest($names))""", {"names": wanted})  # noqa: S608 - constants
    if not calls:
        return empty
    name = np.array([c[0] for c in calls], dtype=object)
    start = np.array([c[1] for c in calls], dtype=np.int64)
    end = np.array([c[2] for c in calls], dtype=np.int64)
    pid = np.array([c[3] for c in calls], dtype=np.int64)
    tid = np.array([-1 if c[4] is None else c[4] for c in calls], dtype=np.int64)
    if trace.window is not None:
        start, end = np.maximum(start, trace.window[0]), np.minimum(end, trace.window[1])
    talk = speakers(trace)
    rows: list[tuple[int, int, int, int, int, int, int | None]] = []  # (-idle, start, i, end, pid, tid, device)
    for ug in unit_gaps(trace):
        p, dev = ug.unit.pid, ug.unit.device
        if p is None or not len(ug.gap_start):
            continue
        tids = talk.get((int(p), dev))
        mine = (pid == int(p)) & (end > start)
        if tids:  # the launching threads; any thread of the process where the export does not say
            mine &= np.isin(tid, np.array(tids, dtype=np.int64))
        idx = np.flatnonzero(mine)
        idle = _idle_inside(ug.gap_start, ug.gap_end, start[idx], end[idx])
        for i, ns in zip(idx[idle > 0].tolist(), idle[idle > 0].tolist(), strict=True):
            rows.append((-int(ns), int(start[i]), i, int(end[i]), int(p), int(tid[i]), dev))
    rows.sort()
    return {"count": len(rows),
            "longest": [{"name": str(name[i]), "start_ns": s, "end_ns": e, "idle_ns": -neg, "pid": p,
                         "tid": None if t < 0 else t, "device": dev}
                        for neg, s, i, e, p, t, dev in rows[:limit]]}
