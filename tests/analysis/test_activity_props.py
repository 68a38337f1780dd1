"""Property tests of the array algebra behind the gap owner table (``analysis.activity``), against the
plain definitions: NVIDIA's pairing over every busy interval sorted together, and unions by brute force."""

from __future__ import annotations

import contextlib

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import analysis.activity
from analysis.activity import merge_closed, pairing, subtract_busy, top_order, union_ns


def _intervals(max_size: int = 40, hi: int = 200):
    """Closed intervals on a small integer grid, so ties, touching ends and zero lengths are common."""
    return st.lists(st.tuples(st.integers(0, hi), st.integers(0, 30)), max_size=max_size).map(
        lambda xs: (np.array([s for s, _ in xs], dtype=np.int64), np.array([s + d for s, d in xs], dtype=np.int64)))


@contextlib.contextmanager
def _chunk(n: int):
    """Run the chunked passes with tiny chunks, so that the carries across chunks are exercised."""
    old, analysis.activity.CHUNK = analysis.activity.CHUNK, n
    try:
        yield
    finally:
        analysis.activity.CHUNK = old


def _sorted(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort((end, start))
    return start[order], end[order]


@settings(max_examples=400, deadline=None)
@given(ops=_intervals(), busy=_intervals(max_size=12, hi=260))
def test_subtracting_busy_equals_pairing_over_everything(ops, busy):
    """What ``unit_gaps`` does (pair the operations, then cut busy intervals out of the gaps) equals
    NVIDIA's pairing over the operations and the busy intervals (clipped to the operations' span) sorted
    together, which is what the overhead rows mean in nsys."""
    start, end = _sorted(*ops)
    if not len(start):
        return
    u0, u1 = int(start[0]), int(end.max())
    bs, be = busy
    keep = (bs < u1) & (be > u0)
    all_s = np.concatenate((start, np.maximum(bs[keep], u0)))
    all_e = np.concatenate((end, np.minimum(be[keep], u1)))
    want = pairing(*_sorted(all_s, all_e))
    with _chunk(3):
        gs, ge = pairing(start, end)
    got = subtract_busy(gs, ge, bs, be)
    assert got[0].tolist() == want[0].tolist()
    assert got[1].tolist() == want[1].tolist()


@settings(max_examples=300, deadline=None)
@given(iv=_intervals())
def test_merge_closed_covers_the_same_points(iv):
    s, e = iv
    ms, me = merge_closed(s, e)
    assert np.all(ms[1:] > me[:-1])  # disjoint and not touching, in order
    for t in range(0, 240):
        assert bool(((s <= t) & (e >= t)).any()) == bool(((ms <= t) & (me >= t)).any())


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
