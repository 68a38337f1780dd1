"""Property tests of the array algebra behind the gap owner table (``analysis.model.activity``), against the
plain definitions: NVIDIA's pairing over every busy interval sorted together, and unions by brute force."""

from __future__ import annotations

import contextlib

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import analysis.model.activity
from analysis.model.activity import (
    UnitGaps,
    UnitOps,
    pairing,
    top_order,
    union_ns,
)


def _intervals(max_size: int = 40, hi: int = 200):
    """Closed intervals on a small integer grid, so ties, touching ends and zero lengths are common."""
    return st.lists(st.tuples(st.integers(0, hi), st.integers(0, 30)), max_size=max_size).map(
        lambda xs: (np.array([s for s, _ in xs], dtype=np.int64), np.array([s + d for s, d in xs], dtype=np.int64)))


@contextlib.contextmanager
def _chunk(n: int):
    """Run the chunked passes with tiny chunks, so that the carries across chunks are exercised."""
    old, analysis.model.activity.CHUNK = analysis.model.activity.CHUNK, n
    try:
        yield
    finally:
        analysis.model.activity.CHUNK = old


def _sorted(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort((end, start))
    return start[order], end[order]


def _in_span(start: np.ndarray, end: np.ndarray, bs: np.ndarray, be: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Busy intervals clipped to the operations' span, as ``unit_gaps`` clips the profiler overhead."""
    u0, u1 = int(start[0]), int(end.max())
    keep = (bs < u1) & (be > u0)
    return np.maximum(bs[keep], u0), np.minimum(be[keep], u1)


@settings(max_examples=400, deadline=None)
@given(ops=_intervals(), busy=_intervals(max_size=12, hi=260), chunk=st.sampled_from([1, 2, 3, 7, 1 << 20]))
def test_busy_intervals_merged_chunk_by_chunk_pair_like_one_sorted_stream(ops, busy, chunk):
    """What ``unit_gaps`` does with profiler overhead (merge it into the chunks of operations it falls
    in) equals NVIDIA's pairing over the operations and the overhead, clipped to the operations' span,
    sorted together."""
    start, end = _sorted(*ops)
    if not len(start):
        return
    bs, be = _in_span(start, end, *busy)
    with _chunk(1 << 20):
        want = pairing(*_sorted(np.concatenate((start, bs)), np.concatenate((end, be))))
    with _chunk(chunk):
        got = pairing(start, end, bs, be)
    assert got[0].tolist() == want[0].tolist()
    assert got[1].tolist() == want[1].tolist()


@settings(max_examples=400, deadline=None)
@given(ops=_intervals(), busy=_intervals(max_size=12, hi=260))
def test_idle_under_busy_is_the_plain_idle_the_gaps_leave_out(ops, busy):
    """``UnitGaps.idle_under_busy`` (the idle the breakdown counts and the gap table does not: under profiler
    overhead) equals, unit cell by unit cell, the plain pairing's gaps less the gaps with the overhead busy."""
    start, end = _sorted(*ops)
    if not len(start):
        return
    bs, be = _in_span(start, end, *busy)
    unit = UnitOps(None, None, start, end, np.zeros(len(start), dtype=np.uint8))
    gs, ge = pairing(start, end, bs, be)
    xs, xe = UnitGaps(unit, gs, ge, bs, be).idle_under_busy()
    cells = np.zeros(int(end.max()) + 1, dtype=np.int8)
    for a, z in zip(*pairing(start, end), strict=True):
        cells[a:z] += 1
    for a, z in zip(gs, ge, strict=True):
        cells[a:z] -= 1
    want = np.flatnonzero(cells == 1)
    got = np.concatenate([np.arange(a, z) for a, z in zip(xs, xe, strict=True)] or [np.zeros(0, dtype=np.int64)])
    assert got.tolist() == want.tolist()  # sorted, disjoint (no cell twice), and the same cells
    assert (xe > xs).all() and (xs[1:] >= xe[:-1]).all()


def _covered(start: np.ndarray, end: np.ndarray) -> int:
    covered = np.zeros(int(end.max()) + 1 if len(end) else 1, dtype=bool)  # unit cells [t, t+1)
    for s, e in zip(start, end, strict=True):
        covered[s:e] = True
    return int(covered.sum())


@settings(max_examples=300, deadline=None)
@given(iv=_intervals(), chunk=st.sampled_from([1, 2, 3, 7, 1 << 20]), keep=st.lists(st.booleans(), max_size=40))
def test_union_length_and_pairing_gaps_partition_the_span(iv, chunk, keep):
    start, end = _sorted(*iv)
    mask = np.array((keep + [True] * len(start))[: len(start)], dtype=bool)
    with _chunk(chunk):
        assert union_ns(start, end) == _covered(start, end)
        assert union_ns(start, end, mask) == _covered(start[mask], end[mask])
        if not len(start):
            return
        gs, ge = pairing(start, end)
    # The gaps are where nothing runs, between the first start and the last end.
    assert union_ns(start, end) + int((ge - gs).sum()) == int(end.max() - start[0])
    assert np.all(gs < ge) and np.all(ge[:-1] <= gs[1:])
    for a, b in zip(gs, ge, strict=True):
        assert not ((start < b) & (end > a)).any()  # no operation overlaps a gap


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.integers(-5, 5), max_size=30), n=st.integers(1, 8))
def test_top_order_is_a_stable_descending_sort(values, n):
    v = np.array(values, dtype=np.int64)
    t = np.arange(len(v), dtype=np.int64)[::-1].copy()  # tiebreak: later positions first
    want = sorted(range(len(v)), key=lambda i: (-v[i], t[i]))[:n]
    assert top_order(v, t, n).tolist() == want
