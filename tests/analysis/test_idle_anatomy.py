"""The idle anatomy: exact partitions of each device's idle, checked by brute force on random intervals, on a
tiny report with known numbers and on every corpus export (per device, per phase and per iteration)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import analysis.diagnosis.idle_anatomy as ia
from analysis.diagnosis.breakdown import breakdown
from analysis.diagnosis.idle_anatomy import (
    Painted,
    idle_anatomy,
    paint,
    paint_intervals,
    speakers,
    window_idle,
)
from analysis.diagnosis.idle_classes import CATEGORIES, CODE, NONE, WORDS, cuda_class, os_class
from analysis.diagnosis.rules.nsys.idle_claims import claims
from analysis.diagnosis.rules.registry import default_registry
from analysis.loops.phases import phase_info
from analysis.model.activity import pairing, unit_ops
from analysis.model.trace import Trace
from tests.analysis.planting import api, ingested, kernel, normalized
from tests.conftest import NSYS_FILES

IDS = [p.name.split("__")[-1] for p in NSYS_FILES]
ALL = {c: 0 for c in CATEGORIES}


def unit_idle(trace: Trace) -> list[tuple[int | None, int | None, np.ndarray, np.ndarray]]:
    """Each device's idle gaps as the breakdown counts them (``pid, device, gap_start, gap_end``): the oracle
    the anatomy's per-phase idle is checked against."""
    return [(u.pid, u.device, *pairing(u.start, u.end)) for u in unit_ops(trace) if len(u)]


def _disjoint(draw_list):
    """Sorted disjoint idle pieces from a sorted list of distinct grid points taken in pairs."""
    pts = sorted(set(draw_list))
    pts = pts[: len(pts) // 2 * 2]
    return np.array(pts[0::2], dtype=np.int64), np.array(pts[1::2], dtype=np.int64)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 120), max_size=16),
       st.lists(st.tuples(st.integers(0, 120), st.integers(0, 40), st.integers(0, len(CATEGORIES) - 2),
                          st.integers(0, 3)), max_size=25),
       st.lists(st.integers(0, 120), max_size=4, unique=True))
def test_paint_matches_brute_force_on_a_grid(gaps, covers, cuts):
    """Every integer instant of the idle gets the lowest category code of the intervals covering it (none when
    nothing does), counted in the bin of the last cut at or before it: the sweep equals that brute force."""
    gs, ge = _disjoint(gaps)
    s = np.array([a for a, _, _, _ in covers], dtype=np.int64)
    e = np.array([a + d for a, d, _, _ in covers], dtype=np.int64)
    cat = np.array([c for _, _, c, _ in covers], dtype=np.uint8)
    name = np.array([n for _, _, _, n in covers], dtype=np.uint64)
    cuts_a = np.array(sorted(cuts), dtype=np.int64)
    out = Painted(max(1, len(cuts_a)))
    paint_intervals(gs, ge, s, e, cat, name, cuts_a, out)
    want = np.zeros((out.bins, len(CATEGORIES)), dtype=np.int64)
    by_name: dict[tuple[int, int, int], int] = {}
    for g0, g1 in zip(gs, ge, strict=True):
        for t in range(int(g0), int(g1)):
            b = max(0, int(np.searchsorted(cuts_a, t, side="right")) - 1) if len(cuts_a) else 0
            cov = [(int(c), int(n)) for a, z, c, n in zip(s, e, cat, name, strict=True) if a <= t < z]
            c = min((c for c, _ in cov), default=NONE)
            want[b, c] += 1
    assert (out.ns == want).all()
    assert int(out.ns.sum()) == int((ge - gs).sum())
    # Names: the time of each category is the time of its names (nothing lost, nothing counted twice).
    for (b, c, _h), (ns, calls) in out.names.items():
        by_name[(b, c, 0)] = by_name.get((b, c, 0), 0) + ns
        assert calls >= 0  # a call counts in the bin where its idle time starts
    total_calls = sum(calls for _, calls in out.names.values())
    painted = int(want.sum() - want[:, NONE].sum())
    assert (total_calls >= 1) == (painted > 0) and total_calls <= len(s)
    for b in range(out.bins):
        for c in range(len(CATEGORIES)):
            if c != NONE:
                assert by_name.get((b, c, 0), 0) == want[b, c]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 8), st.integers(1, 12)), max_size=12),
       st.lists(st.tuples(st.integers(0, 150), st.integers(0, 40), st.integers(0, len(CATEGORIES) - 2)), max_size=25),
       st.lists(st.integers(0, 150), max_size=4, unique=True),
       st.lists(st.tuples(st.integers(0, 4), st.integers(0, len(CATEGORIES) - 1)), max_size=20),
       st.lists(st.booleans(), min_size=12, max_size=12))
def test_claimed_and_long_time_per_piece_match_brute_force(steps, covers, cuts, takes, longs):
    """Idle pieces that may touch (one ends where the next starts), with claims (``take``: per bin and category)
    and long pieces: each piece's claimed time (``taken``) and the unclaimed time of long pieces per category
    (``long_ns``) equal a count instant by instant; every interval that paints counts as one call, once."""
    gs_l, ge_l, t = [], [], 0
    for skip, length in steps:  # a skip of 0 makes a piece touch the previous one
        gs_l.append(t + skip)
        ge_l.append(t + skip + length)
        t = ge_l[-1]
    gs, ge = np.array(gs_l, dtype=np.int64), np.array(ge_l, dtype=np.int64)
    s = np.array([a for a, _, _ in covers], dtype=np.int64)
    e = np.array([a + d for a, d, _ in covers], dtype=np.int64)
    cat = np.array([c for _, _, c in covers], dtype=np.uint8)
    name = np.arange(len(covers), dtype=np.uint64)  # one name per interval: its calls are 1 or 0
    cuts_a = np.array(sorted(cuts), dtype=np.int64)
    out = Painted(max(1, len(cuts_a)))
    out.take = np.zeros((out.bins, len(CATEGORIES)), dtype=bool)
    for b, c in takes:
        out.take[min(b, out.bins - 1), c] = True
    out.taken = np.zeros(len(gs), dtype=np.int64)
    out.long = np.array(longs[: len(gs)], dtype=bool)
    paint_intervals(gs, ge, s, e, cat, name, cuts_a, out, np.arange(len(gs)))
    taken = np.zeros(len(gs), dtype=np.int64)
    long_ns = np.zeros(len(CATEGORIES), dtype=np.int64)
    painted_by: set[int] = set()
    for i, (g0, g1) in enumerate(zip(gs, ge, strict=True)):
        for t in range(int(g0), int(g1)):
            b = max(0, int(np.searchsorted(cuts_a, t, side="right")) - 1) if len(cuts_a) else 0
            cov = [(int(c), k) for k, (a, z, c) in enumerate(zip(s, e, cat, strict=True)) if a <= t < z]
            c = min((c for c, _ in cov), default=NONE)
            if c != NONE:  # the interval of that category reaching furthest, started by then, names it
                painted_by.add(max((int(e[k]), k) for cc, k in cov if cc == c)[1])
            if out.take[b, c]:
                taken[i] += 1
            elif out.long[i]:
                long_ns[c] += 1
    assert (out.taken == taken).all()
    assert (out.long_ns == long_ns).all()
    calls: dict[int, int] = {}
    for (_b, _c, h), (_ns, n) in out.names.items():  # a call across a cut has time in two bins, counts in one
        calls[h] = calls.get(h, 0) + n
    assert all(n <= 1 for n in calls.values())
    assert {h for h, n in calls.items() if n} == painted_by


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 500), st.integers(0, 60)), min_size=1, max_size=30),
       st.integers(0, 600), st.integers(0, 600))
def test_window_idle_is_the_complement_of_the_union(ops, lo, hi):
    lo, hi = min(lo, hi), max(lo, hi)
    start = np.array(sorted(a for a, _ in ops), dtype=np.int64)
    end = np.array([a + d for a, d in sorted(ops)], dtype=np.int64)
    gs, ge = window_idle(start, end, lo, hi)
    busy = np.zeros(700, dtype=bool)
    for a, z in zip(start, end, strict=True):
        busy[a:z] = True
    idle = np.zeros(700, dtype=bool)
    for a, z in zip(gs, ge, strict=True):
        assert not idle[a:z].any()  # disjoint
        idle[a:z] = True
    assert (idle[lo:hi] == ~busy[lo:hi]).all() and not idle[:lo].any() and not idle[hi:].any()


def test_every_category_has_words_for_prose():
    """PHASE001 and GPU001 name categories in words: one entry per category of the vocabulary, no other."""
    assert list(WORDS) == list(CATEGORIES) and all(WORDS.values())


def test_names_are_classified_most_specific_first():
    assert CATEGORIES[cuda_class("cudaMallocPitch")] == "allocation"
    assert CATEGORIES[cuda_class("cuMemFreeAsync")] == "allocation"
    assert CATEGORIES[cuda_class("cudaFreeArray")] == "allocation"
    assert CATEGORIES[cuda_class("cudaHostAlloc")] == "allocation"
    assert CATEGORIES[cuda_class("cudaStreamSynchronize")] == "sync"
    assert CATEGORIES[cuda_class("cudaMemcpy")] == "sync_copy"
    assert CATEGORIES[cuda_class("cudaMemsetAsync")] == "memset"
    assert CATEGORIES[cuda_class("cuLaunchKernel")] == "launch"
    assert CATEGORIES[cuda_class("cudaGraphLaunch")] == "launch"
    assert CATEGORIES[cuda_class("cuModuleLoadData")] == "jit_module"
    assert CATEGORIES[cuda_class("nvrtcCompileProgram")] == "jit_module"
    assert CATEGORIES[cuda_class("cudaEventRecord")] == "cuda_other"
    assert CATEGORIES[os_class("write")] == "os_io"
    assert CATEGORIES[os_class("recvmsg")] == "os_io"
    assert CATEGORIES[os_class("pthread_cond_timedwait")] == "os_wait"
    assert CATEGORIES[os_class("nanosleep")] == "os_wait"
    assert CATEGORIES[os_class("ioctl")] == "os_other"


def test_tiny_report_exact_numbers(tmp_path):
    """One device, idle 100-400 and 500-1000; thread 1 launched the work, thread 2 did not (it does not speak)."""
    ks = [kernel(0, 100), kernel(400, 500), kernel(1000, 1100)]
    calls = [api(100, 180, "cudaMalloc"), api(150, 250, "cudaLaunchKernel"),  # 100-180 alloc, 180-250 launch
             api(600, 700, "cudaDeviceSynchronize", tid=2)]                   # not a launching thread
    osrt = [{"pid": 1, "tid": 1, "start_ns": 240, "end_ns": 300, "name": "write"}]  # 250-280 os_io
    nvtx = [{"pid": 1, "tid": 1, "start_ns": 280, "end_ns": 350, "text": "MPI_Send", "domain": "MPI",
             "kind": "push_pop"},                                # 280-350 mpi: more specific than the write
            {"pid": 1, "tid": 1, "start_ns": 500, "end_ns": 800, "text": "step <1>", "kind": "push_pop"}]
    samples = [{"pid": 1, "tid": 1, "start_ns": t, "cpu": 0, "function": "parse", "module": "app"}
               for t in (820, 840, 860)]  # period 20: each covers +-10 -> 810-870
    path = normalized(tmp_path / "r.duckdb", kernels=ks, cuda_api=calls, osrt=osrt, nvtx=nvtx, cpu_samples=samples)
    t = Trace(path, "r")
    try:
        assert speakers(t) == {(1, 0): [1]}
        out = _json(idle_anatomy(t, [("startup", 0), ("steady", 450)]))
        bd = breakdown(t)
    finally:
        t.close()
    by_phase = {e["phase"]: e for e in out}
    assert by_phase["startup"]["idle_ns"] + by_phase["steady"]["idle_ns"] == bd.idle_ns == 300 + 500
    start = {c["category"]: c["ns"] for c in by_phase["startup"]["categories"]}
    assert start == {"allocation": 80, "launch": 70, "os_io": 30, "mpi": 70, "none": 50}
    steady = {c["category"]: c["ns"] for c in by_phase["steady"]["categories"]}
    assert steady == {"user_range": 300, "host_cpu": 60, "none": 140}
    top = {c["category"]: c["top"] for c in by_phase["steady"]["categories"]}
    assert top["user_range"] == [{"name": "step <1>", "ns": 300, "calls": 1}]
    assert top["host_cpu"] == [{"name": "parse", "ns": 60, "calls": 3}]


def _whole_and_sliced(path, monkeypatch) -> tuple[list, list]:
    """The anatomy of a report in one slice of time, then cut into slices of 3 host rows."""
    t = Trace(path, "r")
    try:
        whole = _json(idle_anatomy(t))
        monkeypatch.setattr(ia, "SLICE_ROWS", 3)
        t.memo.clear()
        return whole, _json(idle_anatomy(t))
    finally:
        t.close()


def test_slices_give_the_same_anatomy(tmp_path, monkeypatch):
    """Cutting the time into many slices (a bounded fetch each) changes nothing."""
    ks = [kernel(i * 100, i * 100 + 40) for i in range(40)]
    calls = [api(i * 100 + 30, i * 100 + 70 + (i % 7), "cudaMalloc" if i % 3 else "cudaMemcpy") for i in range(40)]
    whole, sliced = _whole_and_sliced(normalized(tmp_path / "r.duckdb", kernels=ks, cuda_api=calls), monkeypatch)
    ns = lambda out: {c["category"]: c["ns"] for e in out for c in e["categories"]}  # noqa: E731
    assert ns(whole) == ns(sliced)
    assert sum(ns(whole).values()) == 39 * 60


def test_a_call_across_slices_counts_once(tmp_path, monkeypatch):
    """A call running across the end of a slice of time is fetched by both slices: it still counts as one call
    (in the slice where it first painted idle), with all its time; so do the NVTX range and the samples around
    it."""
    ks = [kernel(i * 100, i * 100 + 40) for i in range(40)]
    calls = [api(i * 100 + 30, i * 100 + 50, "cudaLaunchKernel") for i in range(40)]
    calls.append(api(1045, 3560, "cudaMalloc"))  # across many gaps, so across slices of 3 rows
    nvtx = [{"pid": 1, "tid": 1, "start_ns": 42, "end_ns": 3990, "text": "train", "kind": "push_pop"}]
    samples = [{"pid": 1, "tid": 1, "start_ns": t, "cpu": 0, "function": "step", "module": "app"}
               for t in range(3600, 3990, 10)]
    path = normalized(tmp_path / "r.duckdb", kernels=ks, cuda_api=calls, nvtx=nvtx, cpu_samples=samples)
    whole, sliced = _whole_and_sliced(path, monkeypatch)
    tops = lambda out: {(c["category"], n["name"]): (n["ns"], n["calls"])  # noqa: E731
                        for e in out for c in e["categories"] for n in c["top"]}
    # The idle of 1045-3560: the end of gap 10, gaps 11-34 whole, the start of gap 35 (allocation before launch).
    assert tops(whole)[("allocation", "cudaMalloc")] == (55 + 24 * 60 + 20, 1)
    assert tops(whole)[("user_range", "train")][1] == 1
    assert tops(sliced) == tops(whole)


@pytest.mark.parametrize("src", NSYS_FILES, ids=IDS)
def test_parts_sum_to_idle_per_device_phase_and_iteration(src):
    path = ingested(src)
    t = Trace(path, src.name)
    try:
        info = phase_info(t)
        phases = [(p.name, p.start_ns) for p in info.phases]
        out = _json(idle_anatomy(t, phases))
        bd = breakdown(t)
        by_dev: dict[tuple, int] = {}
        for e in out:
            assert sum(c["ns"] for c in e["categories"]) == e["idle_ns"]
            assert all(c["category"] in CATEGORIES for c in e["categories"])
            by_dev[(e["pid"], e["device"])] = by_dev.get((e["pid"], e["device"]), 0) + e["idle_ns"]
        assert by_dev == {(d.pid, d.device): d.idle_ns for d in bd.devices if d.idle_ns}
        # Per phase: each phase's idle is the unit's gaps clipped to the phase.
        units = {(p, d): (gs, ge) for p, d, gs, ge in unit_idle(t)}
        bounds = [s for _, s in phases] + [1 << 62]
        for e in out:
            gs, ge = units[(e["pid"], e["device"])]
            i = [n for n, _ in phases].index(e["phase"]) if phases else 0
            lo = bounds[i] if i else -(1 << 62)
            hi = bounds[i + 1] if phases else 1 << 62
            assert e["idle_ns"] == int(np.maximum(np.minimum(ge, hi) - np.maximum(gs, lo), 0).sum())
        # Per iteration: cut at every iteration start, the bins still add up and match the clipped gaps.
        loop = info.loop
        if len(loop):
            sp = speakers(t)
            for (pid, dev), (gs, ge) in units.items():
                p = paint(t, pid, sp.get((pid, dev)) if pid is not None else None, gs, ge, loop.starts)
                edges = [-(1 << 62), *loop.starts[1:].tolist(), 1 << 62]
                for b in range(p.bins):
                    clip = np.maximum(np.minimum(ge, edges[b + 1]) - np.maximum(gs, edges[b]), 0).sum()
                    assert int(p.ns[b].sum()) == int(clip)
                assert int(p.ns.sum()) == int((ge - gs).sum())
    finally:
        t.close()


def test_categories_cover_a_cuda_call_exactly(tmp_path):
    """A CUDA call spanning two gaps and the busy time between them counts only its idle part."""
    ks = [kernel(0, 10), kernel(50, 60), kernel(100, 110)]
    path = normalized(tmp_path / "r.duckdb", kernels=ks, cuda_api=[api(5, 105, "cudaFree")])
    t = Trace(path, "r")
    try:
        (e,) = _json(idle_anatomy(t))
    finally:
        t.close()
    assert e["categories"] == [{"category": "allocation", "ns": 80, "top": [{"name": "cudaFree", "ns": 80, "calls": 1}]}]
    assert CODE["allocation"] < CODE["sync"] < CODE["none"]


@pytest.mark.parametrize("src", NSYS_FILES, ids=IDS)
def test_the_gap_rules_painting_gives_the_same_anatomy(src):
    """After the gap rules painted the idle (cut at every iteration), the report's anatomy is read from that
    painting: it equals the anatomy painted on its own."""
    path = ingested(src)
    alone, shared = Trace(path, src.name), Trace(path, src.name)
    try:
        phases = [(p.name, p.start_ns) for p in phase_info(alone).phases]
        want = _json(idle_anatomy(alone, phases))
        claims(shared, default_registry().idle_claimers())
        assert "idle_painted" in shared.memo
        got = _json(idle_anatomy(shared, phases))
    finally:
        alone.close()
        shared.close()

    def strip(out):
        return [{**e, "categories": [{**c, "top": [{**t, "calls": None} for t in c["top"]]} for c in e["categories"]]}
                for e in out]

    # Every time is the same; a call covering both a gap and idle under profiler overhead (painted apart for
    # the gap rules) may count in each.
    assert strip(got) == strip(want)
    calls = lambda out: [t["calls"] for e in out for c in e["categories"] for t in c["top"]]  # noqa: E731
    assert all(g >= w for g, w in zip(calls(got), calls(want), strict=True))


def _json(entries: list) -> list[dict]:
    """``idle_anatomy``'s typed entries as the result's JSON shows them."""
    return [e.to_json() for e in entries]


def test_cpu_samples_size_the_slices(tmp_path, monkeypatch):
    """CPU samples count among the host rows a slice of time holds (tens of millions of samples must not come
    in one fetch), and slicing a sampled report changes nothing."""
    ks = [kernel(i * 100, i * 100 + 40) for i in range(40)]
    samples = [{"pid": 1, "tid": 1, "start_ns": t, "cpu": 0, "function": f"f{t % 3}", "module": "app"}
               for t in range(45, 3990, 10)]
    path = normalized(tmp_path / "r.duckdb", kernels=ks, cpu_samples=samples)
    t = Trace(path, "r")
    try:
        host = ia._Host(t, 1, [1])
        assert host.count(0, 4000) == len(samples)
    finally:
        t.close()
    whole, sliced = _whole_and_sliced(path, monkeypatch)
    assert whole == sliced
    ns = {c["category"]: c["ns"] for e in whole for c in e["categories"]}
    assert sum(ns.values()) == 39 * 60 and ns["host_cpu"] > 0


@pytest.mark.parametrize("cross", [False, True], ids=["nested", "crossing"])
def test_innermost_range_names_each_instant(cross) -> None:
    """Issue #39, class 6: NVTX ranges of one thread and category cut so that the innermost range open (the one
    started last) names each instant, each piece carrying its range's start; an empty range names nothing, and
    another thread's or category's ranges are cut apart. ``cross``: the inner range outlives its parent."""
    from analysis.diagnosis.idle_anatomy import innermost

    s = np.array([0, 10, 20, 30, 5, 0], dtype=np.int64)
    e = np.array([100, 40, 30, 30, 50, 60], dtype=np.int64)
    if cross:
        e[2] = 45  # [20, 45) crosses its parent [10, 40)
    c = np.array([12, 12, 12, 12, 12, 5], dtype=np.uint8)
    tid = np.array([1, 1, 1, 1, 2, 1])
    h = np.arange(6, dtype=np.uint64)
    ps, pe, pc, ph, pg = innermost(s, e, c, h, tid)
    got = sorted(zip(ps.tolist(), pe.tolist(), pc.tolist(), ph.tolist(), pg.tolist(), strict=True))
    want = [(0, 60, 5, 5, 0), (5, 50, 12, 4, 5), (0, 10, 12, 0, 0), (10, 20, 12, 1, 10)]
    want += ([(20, 45, 12, 2, 20), (45, 100, 12, 0, 0)] if cross else
             [(20, 30, 12, 2, 20), (30, 40, 12, 1, 10), (40, 100, 12, 0, 0)])
    assert got == sorted(want)
