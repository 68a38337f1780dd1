"""GPU activity of a report as sorted NumPy arrays per unit: loaded and sorted once per open trace.

The breakdown's union lengths, NVIDIA's gap pairing, the launch-bound runs of short kernels and the
gap owner table all walk each unit's GPU operations in start order. Done as SQL, each of them sorted
every operation again (a window over 12M rows is a single partition that DuckDB runs mostly on one
thread); here the operations are fetched once, sorted once (``np.lexsort`` on data that is already
nearly in order) and every pass after that is a linear, vectorized scan.

A unit is ``(pid, device)`` as in ``analysis.model.intervals``. Zero-length operations are kept (they split a
gap as in nsys); profiler overhead is busy time for the gap pairing only. The corpus tests check the
gaps against a direct SQL implementation of NVIDIA's pairing on every export.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analysis.model.intervals import GPU_OPS_SQL
from analysis.model.trace import Trace

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
    """NVIDIA's gpu_gaps of one unit, in time order (profiler overhead counted as busy: ``busy_start`` and
    ``busy_end``, the process's overhead clipped to the unit's span)."""

    unit: UnitOps
    gap_start: np.ndarray
    gap_end: np.ndarray
    busy_start: np.ndarray = field(default_factory=lambda: _EMPTY)
    busy_end: np.ndarray = field(default_factory=lambda: _EMPTY)

    def idle_under_busy(self) -> tuple[np.ndarray, np.ndarray]:
        """The unit's idle that the gaps leave out: its operations' idle (the plain pairing, the breakdown's)
        under the profiler overhead, as sorted disjoint pieces. The plain pairing's idle is the complement of
        the operations' union over their span; the gaps are the complement of the union with the overhead
        too; so the difference is the overhead's union less the operations'. Per piece of the overhead's
        union, only the operations starting inside it are looked at: the running maximum of the ends of
        the operations before each says how far the device was already busy."""
        if not len(self.busy_start) or not len(self.unit):
            return _EMPTY, _EMPTY
        order = np.argsort(self.busy_start, kind="stable")
        bs, be = self.busy_start[order], self.busy_end[order]
        reach_b = np.maximum.accumulate(be)
        first = np.flatnonzero(np.r_[True, bs[1:] > reach_b[:-1]])
        lo, hi = bs[first], reach_b[np.r_[first[1:] - 1, len(bs) - 1]]  # the overhead's union
        start, end = self.unit.start, self.unit.end
        i0, i1 = np.searchsorted(start, lo, side="left"), np.searchsorted(start, hi, side="left")
        n = i1 - i0
        at = np.repeat(np.arange(len(lo)), n)
        op = i0[at] + np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)  # operations starting inside
        reach = _reach_before(end, np.r_[op, i1])  # busy up to here before each one, and before each end
        # Before each operation starting inside a piece: idle from where the device was busy to (or from the
        # piece's start) to its start; after the last one: to the piece's end.
        gs = np.r_[np.maximum(reach[:len(op)], lo[at]), np.maximum(reach[len(op):], lo)]
        ge = np.r_[start[op], hi]
        owner = np.r_[at, np.arange(len(lo))]
        keep = ge > gs
        gs, ge, owner = gs[keep], ge[keep], owner[keep]
        o = np.lexsort((gs, owner))
        return gs[o], ge[o]


def unit_ops(trace: Trace) -> list[UnitOps]:
    """Every unit's GPU operations (kernels, copies, memsets), sorted; cached on the trace."""
    cached = trace.memo.get("unit_ops")
    if cached is not None:
        return cached
    units = trace.sql(f"SELECT pid, device FROM ({GPU_OPS_SQL}) GROUP BY ALL ORDER BY ALL")  # noqa: S608 - constants
    out: list[UnitOps] = []
    if len(units) == 1:
        d = trace.arrays(f"SELECT start_ns, end_ns, cat FROM ({GPU_OPS_SQL})")  # noqa: S608 - constants
        order = np.lexsort((d["end_ns"], d["start_ns"]))
        out.append(UnitOps(units[0][0], units[0][1], d["start_ns"][order], d["end_ns"][order], d["cat"][order]))
    elif units:
        values = ", ".join(f"({i}, {_lit(p)}, {_lit(dev)})" for i, (p, dev) in enumerate(units))
        d = trace.arrays(f"""
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


# Long passes go in chunks of this many elements: the temporaries stay small and warm in memory
# (touching fresh pages costs more than the arithmetic on them) and peak memory stays bounded.
CHUNK = 1 << 20


def reach_chunks(end: np.ndarray, n: int, mask: np.ndarray | None = None):
    """Yield ``(a, b, reach)`` over ``end[:n]`` in chunks: ``reach`` is the running maximum of ``end``
    (of the elements ``mask`` keeps, when given) up to each element of ``[a, b)``, carried across chunks."""
    carry = np.iinfo(np.int64).min
    for a in range(0, n, CHUNK):
        b = min(a + CHUNK, n)
        chunk = end[a:b] if mask is None else np.where(mask[a:b], end[a:b], np.iinfo(np.int64).min)
        reach = np.maximum.accumulate(chunk)
        np.maximum(reach, carry, out=reach)
        carry = reach[-1]
        yield a, b, reach


def union_ns(start: np.ndarray, end: np.ndarray, mask: np.ndarray | None = None) -> int:
    """Length of the union of intervals given in start order (only those ``mask`` keeps, if given):
    span minus the pairing's gaps."""
    if mask is not None:
        keep = np.flatnonzero(mask)
        if not len(keep):
            return 0
        first, last = int(keep[0]), int(keep[-1])
        start, end, mask = start[first:last + 1], end[first:last + 1], mask[first:last + 1]
    if not len(start):
        return 0
    idle, reach_end = 0, int(start[0])
    for a, b, reach in reach_chunks(end, len(start) - 1, mask):
        gap = start[a + 1:b + 1] - reach
        if mask is not None:
            gap[~mask[a + 1:b + 1]] = 0
        np.maximum(gap, 0, out=gap)
        idle += int(gap.sum())
    last_end = end.max() if mask is None else end[mask].max()
    reach_end = max(reach_end, int(last_end))
    return reach_end - int(start[0]) - idle


def top_order(values: np.ndarray, tiebreak: np.ndarray, n: int) -> np.ndarray:
    """Positions of the ``n`` largest ``values``, largest first; the smallest ``tiebreak`` first among
    equal values (then the earliest position). Sorts only the candidates at or above the n-th largest."""
    if len(values) > n:
        cut = np.partition(values, len(values) - n)[len(values) - n]
        cand = np.flatnonzero(values >= cut)
    else:
        cand = np.arange(len(values))
    order = np.lexsort((cand, tiebreak[cand], -values[cand]))
    return cand[order[:n]]


def pairing(start: np.ndarray, end: np.ndarray, busy_start: np.ndarray = _EMPTY,
            busy_end: np.ndarray = _EMPTY) -> tuple[np.ndarray, np.ndarray]:
    """NVIDIA's gap pairing over intervals in start order (see ``intervals.pairing_gaps_sql``): an
    operation that starts after every earlier one has ended opens a gap from the latest end.

    ``busy_start``/``busy_end`` (any order; few, such as profiler overhead) are paired as operations
    too: each is merged into the chunk of operations it falls in, so only those chunks are sorted
    again. Two chunked passes (count, then fill) so that only the gaps themselves take memory.
    """
    order = np.argsort(busy_start, kind="stable")
    bs, be = busy_start[order], busy_end[order]
    # A busy interval goes into the chunk holding the operation it follows (the first chunk if none).
    home = np.maximum(np.searchsorted(start, bs, side="right") - 1, 0) // CHUNK
    edges = np.searchsorted(home, np.arange(0, len(start) // CHUNK + 2))

    def chunks():
        for k, a in enumerate(range(0, len(start), CHUNK)):
            s, e = start[a:a + CHUNK], end[a:a + CHUNK]
            if edges[k + 1] > edges[k]:
                s = np.concatenate((s, bs[edges[k]:edges[k + 1]]))
                e = np.concatenate((e, be[edges[k]:edges[k + 1]]))
                o = np.argsort(s, kind="stable")  # ties in any order give the same gaps
                s, e = s[o], e[o]
            yield s, e

    def gaps():
        carry = None  # latest end so far; None before the first operation (no leading gap)
        for s, e in chunks():
            prev = np.empty_like(e)
            np.maximum.accumulate(e[:-1], out=prev[1:])
            prev[0] = e[0] if carry is None else carry
            if carry is not None:
                np.maximum(prev, carry, out=prev)
            carry = max(int(prev[-1]), int(e[-1]))
            opens = s > prev
            yield prev, s, opens

    total = sum(int(np.count_nonzero(opens)) for _, _, opens in gaps())
    gs, ge = np.empty(total, dtype=np.int64), np.empty(total, dtype=np.int64)
    at = 0
    for prev, s, opens in gaps():
        k = int(np.count_nonzero(opens))
        gs[at:at + k], ge[at:at + k] = prev[opens], s[opens]
        at += k
    return gs, ge


def _overhead(trace: Trace) -> dict[int | None, tuple[np.ndarray, np.ndarray]]:
    if not trace.has_rows("overhead"):
        return {}
    d = trace.arrays("SELECT COALESCE(pid, -1) AS pid, start_ns, end_ns FROM overhead "
                      "WHERE start_ns IS NOT NULL AND end_ns >= start_ns")
    out = {}
    for pid in np.unique(d["pid"]):
        m = d["pid"] == pid
        out[None if pid == -1 else int(pid)] = (d["start_ns"][m], d["end_ns"][m])
    return out


def _reach_before(end: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Per position ``i`` of ``idx``: the latest end of the operations before ``i`` (``end[:i].max()``; the
    smallest int64 for ``i == 0``), for a few positions, without a running maximum over all operations: one
    maximum per block of operations between two positions asked, then a running maximum over the blocks."""
    out = np.full(len(idx), np.iinfo(np.int64).min, dtype=np.int64)
    pos = np.unique(idx[idx > 0])
    if not len(pos):
        return out
    best = np.maximum.accumulate(np.maximum.reduceat(end[:pos[-1]], np.r_[0, pos[:-1]]))
    asked = idx > 0
    out[asked] = best[np.searchsorted(pos, idx[asked])]
    return out


def unit_gaps(trace: Trace) -> list[UnitGaps]:
    """Every unit's idle gaps with NVIDIA's gpu_gaps semantics: the pairing over the unit's operations
    plus its process's profiler overhead, which counts as busy on each of the process's devices, clipped
    to the unit's span (first operation's start to last one's end) so that overhead before or after the
    GPU work never creates a gap of its own. Leading and trailing idle never appear. Cached on the trace (the
    gap owners, the idle claims and the rules reading the idle all start from it)."""
    if "unit_gaps" in trace.memo:
        return trace.memo["unit_gaps"]
    overhead = _overhead(trace)
    out = []
    for u in unit_ops(trace):
        bs, be = _EMPTY, _EMPTY
        if u.pid in overhead and len(u):
            u0, u1 = int(u.start[0]), int(u.end.max())
            os_, oe = overhead[u.pid]
            keep = (os_ < u1) & (oe > u0)
            bs, be = np.maximum(os_[keep], u0), np.minimum(oe[keep], u1)
        gs, ge = pairing(u.start, u.end, bs, be)
        out.append(UnitGaps(u, gs, ge, bs, be))
    trace.memo["unit_gaps"] = out
    return out


@dataclass(frozen=True)
class Runs:
    """Runs of short kernels of one unit: maximal stretches in device order with no long kernel."""

    run_id: np.ndarray
    run_start: np.ndarray
    run_end: np.ndarray
    run_kernels: np.ndarray
    kernel_ns: np.ndarray
