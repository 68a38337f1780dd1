"""The repeating unit of a GPU's work without NVTX: the period of its sequence of kernel and copy names.

A training or inference loop launches the same sequence of operations every iteration. Each operation
of a (pid, device) unit gets a code (a hash of its kernel name, or ``memcpy <kind>`` / ``memset``), in
start order. A code that occurs once per iteration recurs at a nearly constant distance (in operations):
the iteration's length, give or take the odd extra operation (a logging kernel, a copy every N steps).
So, on a sample of the sequence:

* every code that occurs at least ``MIN_ITERATIONS`` times gets the median distance between its
  consecutive occurrences and its *regularity*: the share of those distances within ``TOLERANCE`` of
  the median (at least one operation either way);
* a code is a candidate when it is regular (``MIN_REGULARITY``) and its occurrences cover at least
  half of the sample (count x median);
* each candidate period ``p`` gets its *match*: the share of positions ``i`` of the sample with
  ``code[i] == code[i + p]``; the period is the shortest within ``TIE`` of the best match (a code
  that occurs once every 10 iterations matches as well, but is 10 times longer; a code that occurs
  once per layer matches worse, since the layers of a step are followed by the optimizer and the
  next step's input), and needs a match of at least ``MIN_MATCH``. Its code, the *anchor*, opens
  every iteration.

The anchor's iterations are then cut into loops (``pattern_loops``, ``analysis.loops.signatures``): a second loop
of other kernels, or of the same kernels at another pace, after the first; the work before, between and
after them is searched for loops of other periods too (``period_in``, from ``analysis.loops.phases``).

Cost: one pass to hash and fetch a bounded sample (``SAMPLE`` operations from the middle of the
unit's span, where the steady loop is), a sort of the sample, then one filtered scan for the anchor's
occurrences over the whole trace and one binary search per operation to count them per iteration. Linear in
the number of operations plus n log n on the sample.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.model.trace import Trace

MIN_ITERATIONS = 3
TOLERANCE = 0.1
TIE = 0.02
MIN_REGULARITY = 0.8
MIN_COVERAGE = 0.5
MIN_MATCH = 0.5
SAMPLE = 1 << 18

# One code per operation: kernels by name, copies by kind, memsets alike. Unified-memory migrations are
# left out: the driver moves pages on faults, the program does not launch them, so they keep no cadence.
# The stream is kept for signatures (``analysis.loops.signatures``): work dealt over distinct streams is a pipeline.
OPS_CODES_SQL = """
    SELECT pid, device, start_ns, end_ns, hash(COALESCE(name, short_name, '?')) AS code, stream FROM kernels
    WHERE start_ns IS NOT NULL AND end_ns >= start_ns
    UNION ALL SELECT pid, device, start_ns, end_ns, hash('memcpy ' || COALESCE(copy_kind, '?')), stream FROM memcpy
    WHERE start_ns IS NOT NULL AND end_ns >= start_ns AND COALESCE(copy_kind, '') NOT LIKE 'UVM%'
    UNION ALL SELECT pid, device, start_ns, end_ns, hash('memset'), stream FROM memset
    WHERE start_ns IS NOT NULL AND end_ns >= start_ns
"""
# An operation's code on its stream, for signatures.
SIG = "(hash(code, COALESCE(stream, -1)) & 4294967295)::UINTEGER AS code"

# The same operations without the codes (counting and timing need no hash).
OPS_SQL = """
    SELECT pid, device, start_ns, end_ns FROM kernels WHERE start_ns IS NOT NULL AND end_ns >= start_ns
    UNION ALL SELECT pid, device, start_ns, end_ns FROM memcpy
    WHERE start_ns IS NOT NULL AND end_ns >= start_ns AND COALESCE(copy_kind, '') NOT LIKE 'UVM%'
    UNION ALL SELECT pid, device, start_ns, end_ns FROM memset WHERE start_ns IS NOT NULL AND end_ns >= start_ns
"""


@dataclass(frozen=True)
class Period:
    """A unit's repeating unit: ``length`` operations, opened by the operation with code ``anchor``."""

    pid: int | None
    device: int | None
    length: int
    ops: int               # the unit's operations in the whole trace
    anchor: int            # the code (hash) of the operation that opens each iteration
    regularity: float      # share of the anchor's distances within the tolerance
    match: float           # share of positions i with code[i] == code[i + length] in the sample


def find_period(codes: np.ndarray) -> tuple[int, int, float, float] | None:
    """(length, anchor code, regularity, match) of a code sequence, or None (see the module docstring)."""
    m = len(codes)
    if m < MIN_ITERATIONS:
        return None
    uniq, inv = np.unique(codes, return_inverse=True)
    order = np.argsort(inv, kind="stable")          # positions grouped by code, in time order
    sym = inv[order]
    first = np.flatnonzero(np.r_[True, sym[1:] != sym[:-1]])
    counts = np.diff(np.r_[first, m])
    dist = np.diff(order)
    cands: list[tuple[float, int, int]] = []  # (regularity, period, code index)
    for k in np.flatnonzero(counts >= MIN_ITERATIONS):
        d = dist[first[k]:first[k] + counts[k] - 1]
        med = int(np.median(d))
        if med < 1 or counts[k] * med < MIN_COVERAGE * m:
            continue
        # Insertions lengthen a distance, they never shorten it.
        reg = float(np.mean((d >= med) & (d <= med + max(1, int(TOLERANCE * med)))))
        if reg >= MIN_REGULARITY:
            cands.append((reg, med, int(k)))
    if not cands:
        return None
    # Each candidate period is checked on the whole sample: the share of positions whose code comes back
    # one period later. Insertions cost the true period little; a shorter, wrong one (a layer of the step,
    # a code that happens to recur) fails at every place where the step differs from it.
    match = {p: float(np.mean(codes[:-p] == codes[p:])) for p in {c[1] for c in cands} if p < m}
    if not match:
        return None
    top = max(match.values())
    length = min(p for p, v in match.items() if v >= top - TIE)
    if match[length] < MIN_MATCH:
        return None
    reg, _, code_index = max((c for c in cands if c[1] == length), key=lambda c: (c[0], -int(order[first[c[2]]])))
    return length, int(uniq[code_index]), reg, match[length]


def _units(trace: Trace) -> list[tuple[int | None, int | None, int, int, int]]:
    """(pid, device, ops, first start, last start) of each unit, most operations first; kept in the trace's memo
    (the period and the nested-loop finder both ask, on a read-only report)."""
    if "units" not in trace.memo:
        trace.memo["units"] = trace.sql(f"""SELECT pid, device, COUNT(*), MIN(start_ns), MAX(start_ns) FROM ({OPS_SQL})
                                            GROUP BY ALL ORDER BY 3 DESC, 1, 2""")  # noqa: S608 - constants
    return list(trace.memo["units"])


def _cond(pid: int | None, device: int | None) -> str:
    p = "pid IS NULL" if pid is None else f"pid = {int(pid)}"
    d = "device IS NULL" if device is None else f"device = {int(device)}"
    return f"{p} AND {d}"


def _sample(trace: Trace, pid: int | None, device: int | None, n: int, t0: int, t1: int,
            extra: str = "") -> np.ndarray:
    """Codes of the unit in start order: all of them, or about ``SAMPLE`` from the middle of its span
    (``extra``: a further predicate, a time range)."""
    where = _cond(pid, device) + extra
    if n > 2 * SAMPLE and t1 > t0:
        half = max(1, int((t1 - t0) * SAMPLE / n / 2))
        mid = (t0 + t1) // 2
        where += f" AND start_ns >= {mid - half} AND start_ns < {mid + half}"
    d = trace.arrays(f"SELECT code FROM ({OPS_CODES_SQL}) WHERE {where} ORDER BY start_ns, end_ns")  # noqa: S608
    return d["code"]


def _span(lo: int | None, hi: int | None) -> str:
    return (f" AND start_ns >= {int(lo)}" if lo is not None else "") + (f" AND start_ns < {int(hi)}" if hi is not None else "")


def unit_period(trace: Trace) -> Period | None:
    """The period of the unit with the most operations that has one (several units: each is tried in
    order of size, the first with a period wins)."""
    for pid, device, n, t0, t1 in _units(trace)[:8]:
        if n < MIN_ITERATIONS:
            break
        found = find_period(_sample(trace, pid, device, int(n), int(t0), int(t1)))
        if found is not None:
            return Period(pid, device, found[0], int(n), found[1], found[2], found[3])
    return None


def period_in(trace: Trace, pid: int | None, device: int | None, lo: int, hi: int) -> Period | None:
    """The period of one unit's operations that start in ``[lo, hi)`` (another loop before or after the
    main one), or None."""
    row = trace.sql(f"SELECT COUNT(*), MIN(start_ns), MAX(start_ns) FROM ({OPS_SQL}) "  # noqa: S608 - integers
                    f"WHERE {_cond(pid, device)}{_span(lo, hi)}")[0]
    n = int(row[0])
    if n < 2 * MIN_ITERATIONS:
        return None
    found = find_period(_sample(trace, pid, device, n, int(row[1]), int(row[2]), _span(lo, hi)))
    return None if found is None else Period(pid, device, found[0], n, found[1], found[2], found[3])


def pattern_loops(trace: Trace, period: Period, lo: int | None = None,
                  hi: int | None = None) -> list[list[tuple[int, int, int, int]]]:
    """The loops of a period over the whole trace (or its operations starting in ``[lo, hi)``): per loop,
    (start_ns, end_ns, operations, operation time) of each iteration, loops in time order.

    Iterations open at the anchor's occurrences; an iteration ends at the last end of the operations
    before the next one. A stretch of consecutive iterations whose operation counts lie within the
    tolerance of the period holds loops (start-up and teardown work falls outside it), cut where the
    iterations' signature changes for good (``analysis.loops.signatures.segments``: a second loop with the same
    number of operations but other kernels). Of the stretches that repeat one signature, the longest
    is kept (a loop broken by an odd iteration is the same loop). The loops together must hold
    ``MIN_COVERAGE`` of the operations: a short repeating burst is not the program's loop.

    An iteration starts where the repetition starts (``_lead``): the anchor is any operation that occurs
    once per iteration, often in its middle (a time step's reduction, the kernel between a step's copies);
    the operations before the loop's first anchor that come back before its second one are the first
    iteration's too, so every anchor moves back by that many operations. N steps are then N iterations:
    the first one is not cut in two, and the last one is whole instead of too short to count.
    """
    where = _cond(period.pid, period.device) + _span(lo, hi)
    ops = trace.arrays(f"SELECT start_ns, end_ns, code = {int(period.anchor)} AS is_anchor, {SIG} "  # noqa: S608 - integers
                       f"FROM ({OPS_CODES_SQL}) WHERE {where}")
    anchors = np.sort(ops["start_ns"][ops["is_anchor"]])
    found = _loops_at(ops, anchors, period.length)
    if found is None:
        return []
    lead = _lead(ops, anchors, found[0])
    if lead:
        # Every anchor moves back ``lead`` operations in start order (one sort of the start times, only for
        # such loops).
        starts = np.sort(ops["start_ns"])
        pos = np.searchsorted(starts, anchors, side="left")
        again = _loops_at(ops, starts[pos[pos >= lead] - lead], period.length)
        if again is not None:
            found = again
    return found[1]


def _before(ops: dict[str, np.ndarray], t: int, n: int) -> np.ndarray:
    """The codes of the last ``n`` operations starting before ``t``, latest first."""
    idx = np.flatnonzero(ops["start_ns"] < t)
    if len(idx) > n:
        idx = idx[np.argpartition(ops["start_ns"][idx], len(idx) - n)[len(idx) - n:]]
    return ops["code"][idx[np.argsort(-ops["start_ns"][idx], kind="stable")]]


def _lead(ops: dict[str, np.ndarray], anchors: np.ndarray, kept: list[tuple[int, int]]) -> int:
    """How many operations before each anchor open its iteration: for the first anchor of each loop, the
    operations before it that equal, one by one backwards, those before the next anchor; the fewest over
    the loops. A loop whose repetition runs back a whole iteration or more continues an earlier one (the
    same work at another pace) and says nothing; none: 0."""
    leads = []
    for i0, i1 in kept:
        if i1 - i0 < 2:
            continue
        a, b = int(anchors[i0]), int(anchors[i0 + 1])
        n = int(np.count_nonzero((ops["start_ns"] >= a) & (ops["start_ns"] < b)))
        x, y = _before(ops, a, n), _before(ops, b, n)
        k = min(len(x), len(y))
        m = int(np.argmin(np.r_[x[:k] == y[:k], False]))
        if m < n:
            leads.append(m)
    return min(leads) if leads else 0


def _loops_at(ops: dict[str, np.ndarray], anchors: np.ndarray,
              length: int) -> tuple[list[tuple[int, int]], list[list[tuple[int, int, int, int]]]] | None:
    """The loops when iterations open at the times ``anchors`` (sorted): the kept stretches as ``[i0, i1)``
    ranges of ``anchors`` and each loop's iterations; None when there are none (see ``pattern_loops``)."""
    from analysis.loops.signatures import level_cuts, min_repeats, segments, signatures

    need = min_repeats(length)
    if len(anchors) < need:
        return None
    # Each operation belongs to the iteration of the last anchor at or before its start (NumPy: one
    # binary search per operation instead of a join).
    at = np.searchsorted(anchors, ops["start_ns"], side="right") - 1
    # The last anchor's iteration holds its first ``length`` operations; the work after them (results
    # copied back, teardown) is no iteration's.
    tail = np.flatnonzero(at == len(anchors) - 1)
    if len(tail) > length:
        at[tail[np.argsort(ops["start_ns"][tail], kind="stable")[length:]]] = -1
    # The operations of some iteration, selected once (12M operations at 10M kernels: each full-size copy is tens of
    # milliseconds of the ingest's serial tail); none to select when every operation is in one.
    ok = at >= 0
    if ok.all():
        held, start, end, code = at, ops["start_ns"], ops["end_ns"], ops["code"]
    else:
        held, start, end, code = at[ok], ops["start_ns"][ok], ops["end_ns"][ok], ops["code"][ok]
    n_ops = np.bincount(held, minlength=len(anchors))
    last = np.full(len(anchors), np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(last, held, end)
    sigs = signatures(held, code, len(anchors))
    op_ns = np.bincount(held, weights=(end - start).astype(np.float64), minlength=len(anchors))
    del start, end, code
    tol = max(1, int(TOLERANCE * length))
    good = np.abs(n_ops - length) <= tol
    # A warm-up iteration has the loop's operations too (their times differ, not their count).
    edges = np.flatnonzero(np.diff(np.r_[False, good, False].astype(np.int8)))
    best: dict[int, tuple[int, int]] = {}
    for a, b in zip(edges[::2], edges[1::2], strict=True):
        for i0, i1 in segments(sigs[a:b], need):
            i0, i1 = int(a + i0), int(a + i1)
            vals, counts = np.unique(sigs[i0:i1], return_counts=True)
            key = int(vals[np.argmax(counts)])
            # A loop starts and ends with iterations of its own: the last anchor before the next loop opens
            # an "iteration" holding that loop's first operations (a warm-up iteration has the loop's own).
            while i1 - i0 > need and int(sigs[i1 - 1]) != key:
                i1 -= 1
            while i1 - i0 > need and int(sigs[i0]) != key:
                i0 += 1
            if key not in best or i1 - i0 > best[key][1] - best[key][0]:
                best[key] = (i0, i1)
    # The same work at another pace, one after the other: a loop of its own (``analysis.loops.signatures.level_cuts``).
    kept = []
    for i0, i1 in sorted(best.values()):
        d = np.r_[np.diff(anchors[i0:i1]), last[i1 - 1] - anchors[i1 - 1]]
        cuts = [i0, *(i0 + c for c in level_cuts(d, need)), i1]
        kept += list(zip(cuts[:-1], cuts[1:], strict=True))
    if not kept or sum(int(n_ops[i0:i1].sum()) for i0, i1 in kept) < MIN_COVERAGE * len(at):
        return None
    out = []
    for i0, i1 in kept:
        its = [(int(anchors[i]), int(last[i]), int(n_ops[i]), int(op_ns[i])) for i in range(i0, i1)]
        # The last iteration runs until the next anchor, which may be far (another loop, the end): it ends
        # with its first ``length`` operations, not with whatever work comes before that anchor.
        mine = np.flatnonzero(at == i1 - 1)
        if len(mine) > length:
            first = mine[np.argsort(ops["start_ns"][mine], kind="stable")[:length]]
            its[-1] = (its[-1][0], int(ops["end_ns"][first].max()), int(length),
                       int((ops["end_ns"][first] - ops["start_ns"][first]).sum()))
        out.append(its)
    return kept, out


# A host-paced loop without a repeating kernel sequence: the blocking syncs of the process that launches
# the most GPU work cut its GPU work into iterations (one sync per frame, request or step).
SYNC_REGULARITY = 0.5  # the iterations' times: median absolute deviation at most this share of the median


def sync_iterations(trace: Trace, sync_names_sql: str) -> list[tuple[int, int, int]]:
    """Iterations of a host-paced loop: (start_ns, end_ns, operations) of the GPU work between consecutive
    blocking syncs (``sync_names_sql``: a predicate on ``cuda_api.name``) of the busiest process.

    An iteration starts with the first GPU operation after a sync returns and ends with the last one
    before the next sync returns; stretches without GPU work are not iterations. Accepted when at least
    ``MIN_ITERATIONS`` iterations hold at least ``MIN_COVERAGE`` of the process's operations and their
    times are regular (``SYNC_REGULARITY``).
    """
    if sync_names_sql == "FALSE":
        return []
    top = trace.sql(f"SELECT pid, COUNT(*) FROM ({OPS_SQL}) WHERE pid IS NOT NULL GROUP BY pid ORDER BY 2 DESC LIMIT 1")  # noqa: S608
    if not top:
        return []
    pid, n = int(top[0][0]), int(top[0][1])
    ends = np.sort(trace.arrays(f"SELECT end_ns FROM cuda_api WHERE pid = {pid} AND {sync_names_sql} "  # noqa: S608
                                "AND end_ns IS NOT NULL")["end_ns"])
    if len(ends) < MIN_ITERATIONS:
        return []
    ops = trace.arrays(f"SELECT start_ns, end_ns, {SIG} FROM ({OPS_CODES_SQL}) WHERE pid = {pid}")  # noqa: S608 - integers
    i = np.searchsorted(ends, ops["start_ns"], side="right")   # ops after the i-th sync return, before the next
    counts = np.bincount(i, minlength=len(ends) + 1)
    first = np.full(len(ends) + 1, np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full(len(ends) + 1, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(first, i, ops["start_ns"])
    np.maximum.at(last, i, ops["end_ns"])
    # The work before the first sync is start-up, after the last one teardown: only between syncs.
    keep = np.flatnonzero(counts[1:-1] > 0) + 1
    if len(keep) < MIN_ITERATIONS or counts[keep].sum() < MIN_COVERAGE * n:
        return []
    # The same work between syncs, again and again: a one-shot program that syncs after each of its
    # distinct steps (a forward pass's layers, a few library calls) has no loop.
    from analysis.loops.signatures import repeats_one, signatures

    if not repeats_one(signatures(i, ops["code"], len(ends) + 1)[keep], float(np.median(counts[keep]))):
        return []
    starts = first[keep]
    d = np.diff(starts)
    med = float(np.median(d)) if len(d) else 0.0
    if med <= 0 or float(np.median(np.abs(d - med))) > SYNC_REGULARITY * med:
        return []
    return [(int(first[k]), int(last[k]), int(counts[k])) for k in keep]
