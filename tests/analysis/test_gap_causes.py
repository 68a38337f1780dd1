"""GPU001's gap causes (analysis.diagnosis.rules.nsys.causes): the covered time of each gap equals a brute-force
count over the union of the launching threads' calls, however the calls are sliced in time."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import analysis.diagnosis.rules.nsys.causes as causes
from analysis.model.trace import Trace
from tests.analysis.planting import api, kernel, normalized


def _brute(calls: list[tuple[int, int]], gs: int, ge: int) -> int:
    covered = np.zeros(ge - gs, dtype=bool)
    for s, e in calls:
        covered[max(s, gs) - gs:max(min(e, ge) - gs, 0)] = True
    return int(covered.sum())


@settings(max_examples=300, deadline=None)
@given(calls=st.lists(st.tuples(st.integers(0, 200), st.integers(1, 40)), min_size=1, max_size=30),
       gaps=st.lists(st.tuples(st.integers(0, 220), st.integers(1, 60)), min_size=1, max_size=10))
def test_union_coverage_equals_brute_force(calls, gaps):
    cs = np.array([s for s, _ in calls], dtype=np.int64)
    ce = np.array([s + d for s, d in calls], dtype=np.int64)
    ps, pe, before = causes._union(cs, ce)
    gs = np.array([s for s, _ in gaps], dtype=np.int64)
    ge = np.array([s + d for s, d in gaps], dtype=np.int64)
    got = causes._covered_before(ps, pe, before, ge) - causes._covered_before(ps, pe, before, gs)
    want = [_brute(list(zip(cs.tolist(), ce.tolist(), strict=True)), int(a), int(b)) for a, b in zip(gs, ge, strict=True)]
    assert got.tolist() == want


@pytest.mark.parametrize("slice_calls", [1, 3, 1 << 22])
def test_coverage_in_time_slices(tmp_path, slice_calls, monkeypatch):
    """Overlapping calls on two launching threads, one thread that launches nothing, and a call of
    another process: only the launchers' union counts, for any number of slices."""
    rng = np.random.default_rng(7)
    starts = np.sort(rng.integers(0, 1_000_000, 60))
    calls = [(int(s), int(s + rng.integers(1_000, 40_000))) for s in starts]
    rows = [api(s, e, "cudaLaunchKernel", tid=11 if i % 2 else 12) for i, (s, e) in enumerate(calls)]
    rows += [api(0, 1_000_000, "cudaFree", tid=99), api(0, 1_000_000, "cudaFree", pid=2, tid=11)]
    ks = [kernel(0, 1, tid=11), kernel(2, 3, tid=12), kernel(1_000_000, 1_000_001, tid=11)]
    trace = Trace(normalized(tmp_path / "r.duckdb", kernels=ks, cuda_api=rows), "r")
    gs = np.array([5_000, 100_000, 400_000, 650_000], dtype=np.int64)
    ge = np.array([90_000, 300_000, 410_000, 999_000], dtype=np.int64)
    monkeypatch.setattr(causes, "SLICE_CALLS", slice_calls)
    try:
        tids = causes.launchers(trace)
        assert tids == {1: [11, 12]} or tids == {1: [12, 11]}
        got = causes.coverage(trace, "cuda_api", 1, tids[1], gs, ge)
    finally:
        trace.close()
    assert got.tolist() == [_brute(calls, int(a), int(b)) for a, b in zip(gs, ge, strict=True)]
