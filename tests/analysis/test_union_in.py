"""The per-iteration union lengths of the loop finder's records (``analysis.loops.steps._union_in``), computed in one
chunked pass (issue #43: the merged intervals they replaced were 600 MiB of the ingest's loop finder at 10M kernels),
against merged intervals (the gap causes' own) and a count by hand: the same integers for any intervals, masks,
windows and chunk size."""

from __future__ import annotations

import numpy as np
import pytest

import analysis.model.activity as activity
from analysis.diagnosis.rules.nsys import causes
from analysis.loops import steps


def _merged_reference(start, end, mask, lo, hi):
    """The computation ``_union_in`` replaced: the union as disjoint merged intervals and the covered length before
    each window's ends, as the gap causes compute it (``causes._union``, ``causes._covered_before``)."""
    s, e = (start, end) if mask is None else (start[mask], end[mask])
    if not len(s):
        return np.zeros(len(lo), dtype=np.int64)
    ps, pe, before = causes._union(s, e)
    return causes._covered_before(ps, pe, before, hi) - causes._covered_before(ps, pe, before, lo)


def _brute(start, end, mask, lo, hi):
    """Each window's covered nanoseconds, counted one by one (small integer times)."""
    keep = np.ones(len(start), dtype=bool) if mask is None else mask
    out = []
    for a, b in zip(lo, hi, strict=True):
        covered = {x for s, e, k in zip(start, end, keep, strict=True) if k for x in range(max(s, a), min(e, b))}
        out.append(len(covered))
    return np.array(out, dtype=np.int64)


@pytest.mark.parametrize("chunk", [1, 7, 1 << 20])
def test_union_in_equals_the_merged_intervals_and_a_count_by_hand(chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(activity, "CHUNK", chunk)
    rng = np.random.default_rng(43)
    for trial in range(200):
        n = int(rng.integers(0, 50))
        start = rng.integers(0, 150, n).astype(np.int64)
        end = start + rng.integers(0, 30, n)  # zero-length operations too
        order = np.lexsort((end, start))
        start, end = start[order], end[order]
        mask = None if trial % 3 == 0 else rng.random(n) < 0.5
        k = int(rng.integers(0, 6))
        lo = np.sort(rng.integers(-10, 200, k)).astype(np.int64)  # windows before, across and after the operations
        hi = lo + rng.integers(0, 50, k)
        unit = activity.UnitOps(1, 0, start, end, np.zeros(n, dtype=np.uint8))
        got = steps._union_in(unit, mask, lo, hi)
        assert np.array_equal(got, _merged_reference(start, end, mask, lo, hi))
        assert np.array_equal(got, _brute(start, end, mask, lo, hi))
