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


def _reach_chunks(end: np.ndarray, n: int, mask: np.ndarray | None = None):
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
    for a, b, reach in _reach_chunks(end, len(start) - 1, mask):
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


def pairing(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """NVIDIA's gap pairing over intervals in start order (see ``intervals.pairing_gaps_sql``):
    an operation that starts after every earlier one has ended opens a gap from the latest end.
    Two chunked passes (count, then fill) so that only the gaps themselves take memory."""
    n = len(start) - 1
    if n < 1:
        return _EMPTY, _EMPTY
    counts = [int(np.count_nonzero(start[a + 1:b + 1] > reach)) for a, b, reach in _reach_chunks(end, n)]
    gs = np.empty(sum(counts), dtype=np.int64)
    ge = np.empty_like(gs)
    at = 0
    for (a, b, reach), k in zip(_reach_chunks(end, n), counts, strict=True):
        nxt = start[a + 1:b + 1]
        opens = nxt > reach
        gs[at:at + k], ge[at:at + k] = reach[opens], nxt[opens]
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


def unit_gaps(trace: Trace) -> list[UnitGaps]:
    """Every unit's idle gaps with NVIDIA's gpu_gaps semantics: the pairing over the unit's operations
    plus its process's profiler overhead, which counts as busy on each of the process's devices, clipped
    to the unit's span (first operation's start to last one's end) so that overhead before or after the
    GPU work never creates a gap of its own. Leading and trailing idle never appear."""
    overhead = _overhead(trace)
    out = []
    for u in unit_ops(trace):
        gs, ge = pairing(u.start, u.end)
        if u.pid in overhead and len(gs):
            gs, ge = subtract_busy(gs, ge, *overhead[u.pid])
        out.append(UnitGaps(u, gs, ge))
    return out


def merge_closed(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of closed intervals ``[start, end]`` (any order) as disjoint, non-touching closed intervals
    in time order; a zero-length interval stays a point unless another one covers it."""
    if not len(start):
        return _EMPTY, _EMPTY
    order = np.argsort(start, kind="stable")
    start, end = start[order], end[order]
    reach = np.maximum.accumulate(end)
    new = np.r_[True, start[1:] > reach[:-1]]  # touching intervals share a point: one piece
    first = np.flatnonzero(new)
    last = np.r_[first[1:], len(start)] - 1
    return start[first], reach[last]


def subtract_busy(gs: np.ndarray, ge: np.ndarray, bs: np.ndarray, be: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Gaps (open intervals ``(gs, ge)``, disjoint, in time order) minus busy closed intervals
    ``[bs, be]``: the pieces of each gap that no busy interval covers, in time order. The same gaps as
    NVIDIA's pairing over the operations and the busy intervals together (a busy point splits a gap in
    two, as a zero-length operation does), without sorting the operations again."""
    bs, be = merge_closed(bs, be)
    if not len(bs) or not len(gs):
        return gs, ge
    # The gaps each busy piece cuts: from the first ending after its start to the first starting at or
    # after its end (a search per busy piece; there are few).
    lo = np.searchsorted(ge, bs, side="right")
    hi = np.searchsorted(gs, be, side="left")
    n_cut = int(np.maximum(hi - lo, 0).sum())
    if not n_cut:
        return gs, ge
    if n_cut > len(gs) // 4:
        cut = np.arange(len(gs))
    else:
        cut = np.unique(np.concatenate([np.arange(a, b) for a, b in zip(lo, hi, strict=True) if b > a]))
    # Busy pieces j0 <= j < j1 cut gap i: the first ending after its start up to the first starting at
    # or after its end.
    j0 = np.searchsorted(be, gs[cut], side="right")
    c = np.searchsorted(bs, ge[cut], side="left") - j0
    cut, c0, c = cut[c > 0], j0[c > 0], c[c > 0]
    if len(cut) < len(gs) // 4:
        # Few gaps cut: the untouched stretches are copied as they are, with each cut gap's pieces
        # in its place.
        ps, pe = _pieces(gs[cut], ge[cut], c0, c, bs, be)
        owner = np.repeat(np.arange(len(cut)), c + 1)[pe > ps] if len(ps) else _EMPTY
        ps, pe = ps[pe > ps], pe[pe > ps]
        at = np.searchsorted(owner, np.arange(len(cut) + 1))
        bounds = np.r_[-1, cut, len(gs)]
        out_s, out_e = [], []
        for i in range(len(cut) + 1):
            out_s.append(gs[bounds[i] + 1:bounds[i + 1]])
            out_e.append(ge[bounds[i] + 1:bounds[i + 1]])
            if i < len(cut):
                out_s.append(ps[at[i]:at[i + 1]])
                out_e.append(pe[at[i]:at[i + 1]])
        return np.concatenate(out_s), np.concatenate(out_e)
    # Many gaps cut: every gap gets its output slots, one for a whole gap, c + 1 for a cut one.
    pieces = np.ones(len(gs), dtype=np.int64)
    pieces[cut] = c + 1
    first = np.cumsum(pieces) - pieces  # each gap's first output slot
    out_s = np.empty(int(pieces.sum()), dtype=np.int64)
    out_e = np.empty_like(out_s)
    whole = np.ones(len(gs), dtype=bool)
    whole[cut] = False
    out_s[first[whole]], out_e[first[whole]] = gs[whole], ge[whole]
    slot = np.repeat(first[cut], c + 1) + _within(c)
    out_s[slot], out_e[slot] = _pieces(gs[cut], ge[cut], c0, c, bs, be)
    keep = out_e > out_s
    return out_s[keep], out_e[keep]


def _within(c: np.ndarray) -> np.ndarray:
    """0, 1, ..., c[i] for each i, concatenated."""
    return np.arange(int((c + 1).sum())) - np.repeat(np.cumsum(c + 1) - (c + 1), c + 1)


def _pieces(gs: np.ndarray, ge: np.ndarray, j0: np.ndarray, c: np.ndarray, bs: np.ndarray,
            be: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The c + 1 candidate pieces of each gap cut by busy pieces j0 .. j0 + c - 1: (gs, bs[j0]),
    (be[j0], bs[j0 + 1]), ..., (be[j0 + c - 1], ge), in order; empty ones are left to the caller."""
    k = _within(c)
    j = np.repeat(j0, c + 1) + k  # busy piece that ends this piece (k < c); the one before starts it
    is_first, is_last = k == 0, k == np.repeat(c, c + 1)
    ps, pe = np.empty(len(k), dtype=np.int64), np.empty(len(k), dtype=np.int64)
    ps[is_first] = gs
    ps[~is_first] = be[j[~is_first] - 1]
    pe[is_last] = ge
    pe[~is_last] = bs[j[~is_last]]
    return ps, pe


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
