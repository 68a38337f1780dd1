"""GPU activity of a report as sorted NumPy arrays per unit: loaded and sorted once per open trace.

The breakdown's union lengths, NVIDIA's gap pairing, the launch-bound runs of short kernels and the
gap owner table all walk each unit's GPU operations in start order. Done as SQL, each of them sorted
every operation again (a window over 12M rows is a single partition that DuckDB runs mostly on one
thread); here the operations are fetched once, sorted once (``np.lexsort`` on data that is already
nearly in order) and every pass after that is a linear, vectorized scan.

A unit is ``(pid, device)`` as in ``analysis.intervals``. Zero-length operations are kept (they split a
gap as in nsys); profiler overhead is busy time for the gap pairing only. The corpus tests check the
gaps against a direct SQL implementation of NVIDIA's pairing on every export.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.intervals import GPU_OPS_SQL, NCCL
from analysis.trace import Trace

_EMPTY = np.empty(0, dtype=np.int64)


@dataclass(frozen=True)
class UnitOps:
    """One unit's GPU operations sorted by (start, end): int64 ``start``/``end``, uint8 ``cat`` codes."""

    pid: int | None
    device: int | None
    start: np.ndarray
    end: np.ndarray
    cat: np.ndarray

    def __len__(self) -> int:
        return len(self.start)


@dataclass(frozen=True)
class UnitGaps:
    """NVIDIA's gpu_gaps of one unit, in time order (profiler overhead counted as busy)."""

    unit: UnitOps
    gap_start: np.ndarray
    gap_end: np.ndarray


def _fetch(trace: Trace, sql: str, params: dict | None = None) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in trace.con.execute(sql, params or {}).fetchnumpy().items()}


def unit_ops(trace: Trace) -> list[UnitOps]:
    """Every unit's GPU operations (kernels, copies, memsets), sorted; cached on the trace."""
    cached = trace.memo.get("unit_ops")
    if cached is not None:
        return cached
    units = trace.sql(f"SELECT pid, device FROM ({GPU_OPS_SQL}) GROUP BY ALL ORDER BY ALL")  # noqa: S608 - constants
    out: list[UnitOps] = []
    if len(units) == 1:
        d = _fetch(trace, f"SELECT start_ns, end_ns, cat FROM ({GPU_OPS_SQL})")  # noqa: S608 - constants
        order = np.lexsort((d["end_ns"], d["start_ns"]))
        out.append(UnitOps(units[0][0], units[0][1], d["start_ns"][order], d["end_ns"][order], d["cat"][order]))
    elif units:
        values = ", ".join(f"({i}, {_lit(p)}, {_lit(dev)})" for i, (p, dev) in enumerate(units))
        d = _fetch(trace, f"""
            SELECT u.i::INTEGER AS unit, o.start_ns, o.end_ns, o.cat FROM ({GPU_OPS_SQL}) o
            JOIN (VALUES {values}) u(i, pid, device)
              ON u.pid IS NOT DISTINCT FROM o.pid AND u.device IS NOT DISTINCT FROM o.device""")  # noqa: S608 - integers
        order = np.lexsort((d["end_ns"], d["start_ns"]))
        order = order[np.argsort(d["unit"][order], kind="stable")]
        unit, start, end, cat = d["unit"][order], d["start_ns"][order], d["end_ns"][order], d["cat"][order]
        del d, order
        bounds = np.searchsorted(unit, np.arange(len(units) + 1))
        for i, (pid, dev) in enumerate(units):
            a, b = bounds[i], bounds[i + 1]
            # Copies, so that each unit's arrays own their memory and the big ones can be freed.
            out.append(UnitOps(pid, dev, start[a:b].copy(), end[a:b].copy(), cat[a:b].copy()))
    trace.memo["unit_ops"] = out
    return out


def _lit(v: int | None) -> str:
    return "NULL" if v is None else str(int(v))


def union_ns(start: np.ndarray, end: np.ndarray) -> int:
    """Length of the union of intervals given in start order: span minus the pairing's gaps."""
    if not len(start):
        return 0
    reach = np.maximum.accumulate(end)
    idle = int(np.maximum(start[1:] - reach[:-1], 0).sum())
    return int(reach[-1] - start[0]) - idle


def pairing(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """NVIDIA's gap pairing over intervals in start order (see ``intervals.pairing_gaps_sql``):
    an operation that starts after every earlier one has ended opens a gap from the latest end."""
    if len(start) < 2:
        return _EMPTY, _EMPTY
    reach = np.maximum.accumulate(end[:-1])
    nxt = start[1:]
    opens = nxt > reach
    return reach[opens], nxt[opens]


def _overhead(trace: Trace) -> dict[int | None, tuple[np.ndarray, np.ndarray]]:
    if not trace.has_rows("overhead"):
        return {}
    d = _fetch(trace, "SELECT COALESCE(pid, -1) AS pid, start_ns, end_ns FROM overhead "
                      "WHERE start_ns IS NOT NULL AND end_ns >= start_ns")
    out = {}
    for pid in np.unique(d["pid"]):
        m = d["pid"] == pid
        out[None if pid == -1 else int(pid)] = (d["start_ns"][m], d["end_ns"][m])
    return out


def unit_gaps(trace: Trace) -> list[UnitGaps]:
    """Every unit's idle gaps with NVIDIA's gpu_gaps semantics: the pairing over the unit's operations
    plus its process's profiler overhead, which counts as busy on each of the process's devices, clipped
    to the unit's span (first operation's start to last one's end) so that overhead before or after the
    GPU work never creates a gap of its own. Leading and trailing idle never appear."""
    overhead = _overhead(trace)
    out = []
    for u in unit_ops(trace):
        start, end = u.start, u.end
        if u.pid in overhead and len(u):
            # Profiler overhead of the process is busy on each of its devices, clipped to the unit's span.
            u0, u1 = int(start[0]), int(end.max())
            os_, oe = overhead[u.pid]
            keep = (os_ < u1) & (oe > u0)
            if keep.any():
                start = np.concatenate((start, np.maximum(os_[keep], u0)))
                end = np.concatenate((end, np.minimum(oe[keep], u1)))
                order = np.argsort(start, kind="stable")  # ties in any order give the same gaps
                start, end = start[order], end[order]
        gs, ge = pairing(start, end)
        out.append(UnitGaps(u, gs, ge))
    return out


@dataclass(frozen=True)
class Runs:
    """Runs of short kernels of one unit: maximal stretches in device order with no long kernel."""

    run_id: np.ndarray
    run_start: np.ndarray
    run_end: np.ndarray
    run_kernels: np.ndarray
    kernel_ns: np.ndarray


def short_kernel_runs(u: UnitOps, short_ns: int, min_run: int, id_base: int = 0) -> Runs:
    """The unit's runs of at least ``min_run`` consecutive kernels (compute or NCCL) each shorter than
    ``short_ns``; ids are ``id_base`` + the count of long kernels before the run (unique per unit)."""
    k = u.cat <= NCCL
    ks, ke = u.start[k], u.end[k]
    dur = ke - ks
    short = dur < short_ns
    if not short.any():
        return Runs(_EMPTY, _EMPTY, _EMPTY, _EMPTY, _EMPTY)
    rid = np.cumsum(~short)[short]  # long kernels before each short one: equal within a run
    ss, se, sd = ks[short], ke[short], dur[short]
    first = np.flatnonzero(np.r_[True, rid[1:] != rid[:-1]])
    counts = np.diff(np.r_[first, len(rid)])
    keep = counts >= min_run
    first, counts = first[keep], counts[keep]
    if not len(first):
        return Runs(_EMPTY, _EMPTY, _EMPTY, _EMPTY, _EMPTY)
    # Segment reductions over [first, first + count): reduceat over interleaved (first, end) indices
    # reduces each run at the even positions; a sentinel element keeps the last end index in range.
    idx = np.empty(2 * len(first), dtype=np.int64)
    idx[0::2], idx[1::2] = first, first + counts
    run_end = np.maximum.reduceat(np.r_[se, 0], idx)[0::2]
    kernel_ns = np.add.reduceat(np.r_[sd, 0], idx)[0::2]
    return Runs(rid[first] + id_base, ss[first], run_end, counts, kernel_ns)
