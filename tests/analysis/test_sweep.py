"""The compiled sweep under the idle painting: exact records on a hand-made case, its room bound under random
paintings with many bins and names, and its argument checks (the C walk trusts its indices, so a bad one
must be refused before it). The owner table's compiled passes (``reach``, ``last_le``, ``call_at``,
``classify``, ``region_sum``, ``distinct_sorted``, ``lookup``, ``short_runs``) against their NumPy or plain
Python definitions on random input, near 2^62 and below zero
too."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.diagnosis import sweep as sweep_lib
from analysis.diagnosis.sweep import (
    call_at,
    classify,
    distinct_sorted,
    lookup,
    reach,
    record_rows,
    region_sum,
    short_runs,
    sweep,
)

NCAT, NONE = 4, 3


def _run(parts, intervals, cuts=(), take=None, long_=None, counted=None):
    bins = max(1, len(cuts))
    fs = np.array([p[0] for p in parts], dtype=np.int64)
    fe = np.array([p[1] for p in parts], dtype=np.int64)
    fpiece = np.arange(len(parts), dtype=np.int64)
    iv = sorted(intervals, key=lambda x: x[0])
    s = np.array([x[0] for x in iv], dtype=np.int64)
    e = np.array([x[1] for x in iv], dtype=np.int64)
    cat = np.array([x[2] for x in iv], dtype=np.uint8)
    slot = np.array([x[3] for x in iv], dtype=np.int64)
    ns = np.zeros((bins, NCAT), dtype=np.int64)
    taken = np.zeros(len(parts), dtype=np.int64)
    long_ns = np.zeros(NCAT, dtype=np.int64)
    done = np.zeros(len(iv), dtype=np.bool_) if counted is None else counted
    rec = sweep(fs, fe, np.array(cuts, dtype=np.int64), fpiece, s, e, cat, slot, int(slot.max(initial=-1)) + 1, NONE, take, long_, done, ns,
                taken, long_ns)
    return ns, taken, long_ns, sorted(map(tuple, rec.tolist())), done


@pytest.mark.parametrize("t0", [0, 2**62 - 60, -(2**62)])
def test_hand_made_painting(t0: int) -> None:
    """Idle [0, 100) in bins [0, 50) and [50, 100). A category-1 call [10, 70) (slot 0) lies under a category-0
    call [20, 30) (slot 1); a second category-1 call [40, 90) reaching further takes over its name at 40. The
    same on absolute clocks near 2^62 and below zero."""
    parts = [(t0, t0 + 50), (t0 + 50, t0 + 100)]
    iv = [(t0 + a, t0 + z, c, k) for a, z, c, k in [(10, 70, 1, 0), (20, 30, 0, 1), (40, 90, 1, 2)]]
    ns, _, _, rec, done = _run(parts, iv, cuts=(t0, t0 + 50))
    assert ns[0].tolist() == [10, 30, 0, 10]  # [20,30) cat 0; [10,20)+[30,50) cat 1; [0,10) none
    assert ns[1].tolist() == [0, 40, 0, 10]  # [50,90) cat 1; [90,100) none
    # (bin, slot, ns, calls): slot 0 paints [10,20)+[30,40); slot 2 paints [40,50) in bin 0 (its call) and
    # [50,90) in bin 1 (no second call).
    assert rec == [(0, 0, 20, 1), (0, 1, 10, 1), (0, 2, 10, 1), (1, 2, 40, 0)]
    assert done.all()


def test_claims_and_long_pieces() -> None:
    """Claimed time goes to its piece; a long piece's unclaimed time goes to its category."""
    take = np.zeros((1, NCAT), dtype=np.bool_)
    take[0, 0] = True
    long_ = np.array([False, True])
    ns, taken, long_ns, _, _ = _run([(0, 10), (20, 40)], [(5, 25, 0, 0), (25, 35, 1, 1)], take=take,
                                    long_=long_)
    assert ns[0].tolist() == [10, 10, 0, 10]
    assert taken.tolist() == [5, 5]
    assert long_ns.tolist() == [0, 10, 0, 5]


def test_counted_interval_paints_without_a_call() -> None:
    """An interval already counted (an earlier slice painted it) adds its time but not a call."""
    counted = np.array([True, False])
    _, _, _, rec, _ = _run([(0, 10)], [(0, 5, 1, 0), (5, 10, 1, 1)], counted=counted)
    assert rec == [(0, 0, 5, 0), (0, 1, 5, 1)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 200), st.integers(1, 30)), min_size=1, max_size=20),
       st.lists(st.tuples(st.integers(0, 230), st.integers(1, 40), st.integers(0, NCAT - 2), st.integers(0, 30)),
                max_size=40),
       st.lists(st.integers(0, 400), max_size=12, unique=True))
def test_records_fit_and_add_up(gaps, covers, cuts):
    """With many bins and names the records fit their room (``record_rows``), sum to the painted time that is
    not ``none`` per bin, and count each interval that painted once."""
    pts, t = [], 0
    for gap, length in gaps:  # disjoint parts
        pts.append((t + gap, t + gap + length))
        t += gap + length
    cuts = sorted(cuts)
    # Parts never cross a cut (the caller cuts them): split them here.
    parts = []
    for a, z in pts:
        for c in [x for x in cuts if a < x < z]:
            parts.append((a, c))
            a = c
        parts.append((a, z))
    bins = max(1, len(cuts))
    iv = [(a, a + d, c, k) for a, d, c, k in covers]
    ns, _, _, rec, done = _run(parts, iv, cuts=cuts)
    assert len(rec) <= record_rows(len(parts), len(iv), bins, 31)
    want = np.zeros(bins, dtype=np.int64)
    for a, z in parts:
        want[max(0, int(np.searchsorted(cuts, a, side="right")) - 1) if cuts else 0] += z - a
    assert ns.sum(axis=1).tolist() == want.tolist()
    for b in range(bins):
        assert sum(r[2] for r in rec if r[0] == b) == int(ns[b, :NONE].sum())
    assert sum(r[3] for r in rec) == int(done.sum())
    assert int(ns.sum()) == sum(z - a for a, z in pts)


@pytest.mark.parametrize("change", ["slot", "cat", "cuts", "piece", "length"])
def test_bad_indices_are_refused(change: str) -> None:
    """An index out of range raises before the C walk runs (it would write out of bounds)."""
    fs, fe = np.array([0], dtype=np.int64), np.array([10], dtype=np.int64)
    cuts, fpiece = np.array([0], dtype=np.int64), np.array([0], dtype=np.int64)
    s, e = np.array([0], dtype=np.int64), np.array([5], dtype=np.int64)
    cat, slot = np.array([0], dtype=np.uint8), np.array([0], dtype=np.int64)
    take = np.zeros((1, NCAT), dtype=np.bool_)
    if change == "slot":
        slot = np.array([1], dtype=np.int64)
    elif change == "cat":
        cat = np.array([NCAT], dtype=np.uint8)
    elif change == "cuts":  # more cuts than bins
        cuts = np.array([0, 5], dtype=np.int64)
    elif change == "piece":
        fpiece = np.array([1], dtype=np.int64)
    else:
        e = np.array([5, 6], dtype=np.int64)
    with pytest.raises(ValueError):
        sweep(fs, fe, cuts, fpiece, s, e, cat, slot, 1, NONE, take, None, np.zeros(1, dtype=np.bool_),
              np.zeros((1, NCAT), dtype=np.int64), np.zeros(1, dtype=np.int64), np.zeros(NCAT, dtype=np.int64))


_clock = st.sampled_from([0, 2**62 - 1000, -(2**62)])


def last_le(a: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The compiled pass ``call_at`` walks its queries with (``goodput_last_le``), called on its own: per query the
    position of the last element of ascending ``a`` at or before it, or -1."""
    a, t = sweep_lib._i64(a), sweep_lib._i64(t)
    out = np.empty(len(t), dtype=np.int64)
    i64 = sweep_lib._I64
    sweep_lib._library().goodput_last_le(len(a), sweep_lib._ptr(a, i64), len(t), sweep_lib._ptr(t, i64),
                                         sweep_lib._ptr(out, i64))
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 15)), max_size=40),
       st.lists(st.integers(-5, 60), max_size=40), st.booleans(), _clock)
def test_owner_passes_match_numpy(calls, queries, ascending, t0):
    """``reach`` is the running maximum of the ends and the last call reaching it; ``last_le`` is
    ``searchsorted(side="right") - 1`` for queries in any order; ``call_at`` is the call reaching furthest
    among those started by then, when it still runs; on any clock."""
    calls = sorted(calls, key=lambda c: c[0])
    start = np.array([t0 + s for s, _ in calls], dtype=np.int64)
    end = np.array([t0 + s + d for s, d in calls], dtype=np.int64)
    t = np.array([t0 + q for q in (sorted(queries) if ascending else queries)], dtype=np.int64)
    got = reach(start, end.copy())
    assert got is not None
    want_reach = np.maximum.accumulate(end) if len(end) else end
    want_owner = np.maximum.accumulate(np.where(end >= want_reach, np.arange(len(end)), 0)) if len(end) else end
    assert got[0].tolist() == want_reach.tolist() and got[1].tolist() == want_owner.tolist()
    idx = np.searchsorted(start, t, side="right") - 1
    assert last_le(start, t).tolist() == idx.tolist()
    want = [int(want_owner[i]) if i >= 0 and want_reach[i] >= q else -1 for i, q in zip(idx, t, strict=True)]
    assert call_at(start, got[0], got[1], t).tolist() == want


def test_owner_passes_refuse_what_they_cannot_answer() -> None:
    """Calls out of start order are refused (the caller sorts them), with nothing written; an unsorted list
    has no sorted distinct values; an owner out of range is an error, not a read out of bounds."""
    end = np.array([5, 6], dtype=np.int64)
    assert reach(np.array([3, 1], dtype=np.int64), end) is None
    assert end.tolist() == [5, 6]
    assert distinct_sorted(np.array([2, 1], dtype=np.int64)) is None
    assert distinct_sorted(np.array([1, 1, 2, 5, 5], dtype=np.int64)).tolist() == [1, 2, 5]
    assert distinct_sorted(np.empty(0, dtype=np.int64)).tolist() == []
    with pytest.raises(ValueError, match="out of range"):
        call_at(np.array([0], dtype=np.int64), np.array([9], dtype=np.int64), np.array([7], dtype=np.int64),
                np.array([1], dtype=np.int64))


@settings(max_examples=200, deadline=None)
@given(st.sets(st.integers(0, 2**64 - 1), max_size=12), st.lists(st.integers(0, 30), max_size=60), st.data())
def test_lookup_matches_a_dictionary(table, picks, data):
    """Each hash gets its dictionary position and code, or the default code and -1 (runs of one name and
    hashes above 2^63 included: they are unsigned)."""
    table_h = np.array(sorted(table), dtype=np.uint64)
    table_c = np.array([data.draw(st.integers(0, 15)) for _ in table_h], dtype=np.uint8)
    pool = [*table_h.tolist(), 7, 2**63 + 5, 2**64 - 1]
    h = np.array([pool[p % len(pool)] for p in picks], dtype=np.uint64)
    code, slot = lookup(table_h, table_c, h, 9)
    where = {int(v): i for i, v in enumerate(table_h.tolist())}
    assert slot.tolist() == [where.get(int(v), -1) for v in h.tolist()]
    assert code.tolist() == [int(table_c[where[int(v)]]) if int(v) in where else 9 for v in h.tolist()]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 12), st.integers(1, 9), st.integers(0, 9)), max_size=40),
       st.lists(st.tuples(st.integers(0, 10), st.integers(0, 30)), max_size=8), st.booleans(), _clock)
def test_classify_matches_numpy(gaps, runs, with_taken, t0):
    """Each gap's structural owner (long; else inside the last run started at or before it; else 0), the
    runs' gaps and ids, and per code the time kept and the gaps keeping some, as the NumPy passes had them."""
    gs, ge, taken, t = [], [], [], t0
    for step, length, tk in gaps:
        t += step
        gs.append(t)
        ge.append(t + length)
        taken.append(min(tk, length))
        t += length
    gs, ge, taken = (np.array(x, dtype=np.int64) for x in (gs, ge, taken))
    rs, re_, c = [], [], t0
    for step, length in runs:
        c += step
        rs.append(c)
        re_.append(c + length)
        c += length + 1
    rs, re_ = np.array(rs, dtype=np.int64), np.array(re_, dtype=np.int64)
    rid = np.arange(len(rs), dtype=np.int64) * 10
    got = classify(gs, ge, taken if with_taken else None, 6, rs, re_, rid, 3, 4)
    owner = np.where(ge - gs >= 6, 3, 0)
    idx = np.searchsorted(rs, gs, side="right") - 1
    inside = (owner == 0) & (idx >= 0) & (re_[np.maximum(idx, 0)] >= ge if len(rs) else False)
    owner[inside] = 4
    keep = ge - gs - (taken if with_taken else 0)
    assert got.owner.tolist() == owner.tolist()
    assert got.run_idx.tolist() == np.flatnonzero(inside).tolist()
    assert got.run_of.tolist() == rid[idx[inside]].tolist()
    for code in (0, 3, 4):
        m = (owner == code) & (keep > 0)
        assert (int(got.tot_ns[code]), int(got.tot_n[code])) == (int(keep[m].sum()), int(m.sum()))
    assert got.left.tolist() == ((owner == 0) & (keep > 0)).tolist()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 99), st.integers(0, 9), st.integers(0, 9), st.booleans()), max_size=40),
       st.lists(st.integers(-1, 3), min_size=10, max_size=10), st.booleans(), _clock)
def test_region_sum_matches_bincount(gaps, region, with_taken, u0):
    """Each marked gap's kept time goes to the region of the window it starts in, as GPU002's bincount had it;
    a gap outside the windows is refused."""
    gs = np.array([u0 + a for a, _, _, _ in gaps], dtype=np.int64)
    ge = gs + np.array([d for _, d, _, _ in gaps], dtype=np.int64)
    taken = np.minimum(np.array([t for _, _, t, _ in gaps], dtype=np.int64), ge - gs)
    mask = np.array([m for *_, m in gaps], dtype=np.bool_)
    reg = np.array(region, dtype=np.int64)
    kept = ge - gs - (taken if with_taken else 0)
    rf = reg[(gs[mask] - u0) // 10]
    want = np.bincount(rf[rf >= 0], weights=kept[mask][rf >= 0], minlength=4).astype(np.int64)
    got = region_sum(gs, ge, taken if with_taken else None, mask, u0, 10, reg, 4)
    assert got.tolist() == want.tolist()
    with pytest.raises(ValueError, match="outside"):
        region_sum(np.array([u0 + 100]), np.array([u0 + 101]), None, np.array([True]), u0, 10, reg, 4)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 12), st.integers(0, 2)), max_size=60),
       st.integers(0, 4), _clock)
def test_short_runs_match_a_plain_walk(ops, min_run, t0):
    """Runs of consecutive kernels (categories 0 and 1; copies, category 2, neither extend nor break a run)
    each shorter than 8 ns, kept from ``min_run`` kernels: each run's first kernel's position among the
    kernels, start, latest end, kernels and summed time, as a plain walk over the kernels finds them."""
    start, end, cat, t = [], [], [], t0
    for step, length, c in ops:
        t += step
        start.append(t)
        end.append(t + length)
        cat.append(c)
    kernels = [(s, e) for s, e, c in zip(start, end, cat, strict=True) if c <= 1]
    want, run = [], []
    for i, (s, e) in enumerate([*kernels, (0, 10**9)]):  # a long kernel closes the last run
        if e - s < 8:
            run.append((i, s, e))
            continue
        if run and len(run) >= min_run:
            want.append((run[0][0], run[0][1], max(r[2] for r in run), len(run), sum(r[2] - r[1] for r in run)))
        run = []
    got = short_runs(np.array(start, dtype=np.int64), np.array(end, dtype=np.int64), np.array(cat, dtype=np.uint8),
                     1, 8, min_run)
    assert [tuple(int(x) for x in row) for row in zip(*got, strict=True)] == want
    with pytest.raises(ValueError, match="lengths"):
        short_runs(np.zeros(2, dtype=np.int64), np.zeros(1, dtype=np.int64), np.zeros(2, dtype=np.uint8), 1, 8, 1)
