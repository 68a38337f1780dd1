"""What makes a stretch of iterations a loop: repeats of one signature, and where one loop gives way to the next.

An iteration's *signature* is the multiset of its operations' codes (kernel names, copy kinds; see
``analysis.loops.periods``), hashed order-free so that the same work launched in another order (streams,
host threads) keeps its signature. A loop needs repeats of one signature: at least ``MIN_REPEATS``
iterations with the same signature, or ``MIN_REPEATS_SINGLE`` when an iteration is a single operation
(one kernel launched five times in a row is a loop; three distinct launches, or a pipeline of four
chunks, is not).

A program that runs several loops one after the other (a benchmark of several methods, the two phases
of a solver) gives iterations whose signature changes at each new loop. ``segments`` cuts a stretch
of iterations where a signature that *persists* (``MIN_REPEATS`` consecutive iterations) differs from
the ones of the current loop; an isolated odd iteration (a logging kernel, an extra copy every N steps)
stays in its loop, and loops whose iterations alternate between two signatures stay one loop.

The same work run at two paces one after the other (a benchmark of one kernel at two sizes, a loop
timed before and after a change of settings) keeps its signature: ``level_cuts`` cuts it where the
iteration time steps from one level to another. A step, not a trend: the two sides' medians differ by
``LEVEL_RATIO`` or more, the sides barely overlap (the faster side's 90th percentile is below the slower
side's 10th), and the change happens at the cut (the two iterations either side of it, and the
``MIN_REPEATS`` iterations either side of it, differ by at least half the whole change). Work that shrinks or grows step by step (Gaussian elimination)
changes a little at every iteration, so it is one loop whose iteration time has a trend.
"""

from __future__ import annotations

import numpy as np

MIN_REPEATS = 3
MIN_REPEATS_SINGLE = 5
# Most iterations must be repeats (of a signature seen ``min_repeats`` times; a loop may alternate between a
# few): a one-shot program whose distinct steps include a few identical ones (copies of the weights, one
# after the other) has no loop.
MIN_MODE_SHARE = 0.5
LEVEL_RATIO = 1.2
_MIX = np.uint64(0x9E3779B97F4A7C15)


def min_repeats(ops_per_iteration: float) -> int:
    """Repeats of one signature a loop needs: more when an iteration is a single operation."""
    return MIN_REPEATS_SINGLE if ops_per_iteration < 1.5 else MIN_REPEATS


def signatures(at: np.ndarray, codes: np.ndarray, n: int) -> np.ndarray:
    """Order-free signature of each of ``n`` iterations: ``at[j]`` is operation j's iteration (< 0 or >= n:
    none), ``codes[j]`` its 32-bit code. The sum of the codes per iteration (exact in float64 up to two
    million operations per iteration) mixed with their count; an iteration without operations has
    signature 0."""
    ok = (at >= 0) & (at < n)
    a, c = (at, codes) if ok.all() else (at[ok], codes[ok])  # no full-size copies when every operation counts
    total = np.bincount(a, weights=c.astype(np.float64), minlength=n)[:n]
    cnt = np.bincount(a, minlength=n)[:n].astype(np.uint64)
    with np.errstate(over="ignore"):
        return (total.astype(np.uint64) * _MIX) ^ (cnt * np.uint64(0xBF58476D1CE4E5B9))


def mode_count(sigs: np.ndarray) -> int:
    """How often the most common signature occurs."""
    if not len(sigs):
        return 0
    _, counts = np.unique(sigs, return_counts=True)
    return int(counts.max())


def repeated_share(sigs: np.ndarray, need: int) -> float:
    """Share of the iterations whose signature occurs at least ``need`` times among them."""
    if not len(sigs):
        return 0.0
    _, inv, counts = np.unique(sigs, return_inverse=True, return_counts=True)
    return float(np.mean(counts[inv] >= need))


def repeats_one(sigs: np.ndarray, ops_per_iteration: float) -> bool:
    """Whether iterations with these signatures are a loop: one signature repeats ``min_repeats`` times,
    and repeated signatures (single-operation iterations: that one signature) are at least
    ``MIN_MODE_SHARE`` of the iterations."""
    need = min_repeats(ops_per_iteration)
    mode = mode_count(sigs)
    if ops_per_iteration < 1.5:
        # Single operations between syncs: the loop is one operation again and again, not a program's
        # distinct kernels (each reused a few times) each followed by a sync.
        return mode >= need and mode >= MIN_MODE_SHARE * len(sigs)
    return mode >= need and repeated_share(sigs, need) >= MIN_MODE_SHARE


def segments(sigs: np.ndarray, need: int = MIN_REPEATS) -> list[tuple[int, int]]:
    """The loops in a stretch of consecutive iterations, as ``[i0, i1)`` index ranges, in order (see the
    module docstring). A range is returned only when one signature repeats ``need`` times in it."""
    n = len(sigs)
    if n == 0:
        return []
    change = np.flatnonzero(np.r_[True, sigs[1:] != sigs[:-1]])
    lengths = np.diff(np.r_[change, n])
    cuts: list[int] = [0]
    current: set[int] = set()
    last_own = 0
    for start, length in zip(change, lengths, strict=True):
        sig = int(sigs[start])
        if length >= need:
            if current and sig not in current:
                # The new loop starts after the old one's last iteration of its own (odd iterations
                # between them go with the new loop: they are most often its own first ones).
                cuts.append(last_own)
                current = set()
            current.add(sig)
        if sig in current:
            last_own = int(start + length)
    cuts.append(n)
    return [(a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=True)
            if mode_count(sigs[a:b]) >= need and repeated_share(sigs[a:b], need) >= MIN_MODE_SHARE]


def level_cuts(d: np.ndarray, need: int = MIN_REPEATS, depth: int = 4) -> list[int]:
    """Where a loop's iteration times ``d`` step from one level to another (see the module docstring),
    as indexes into ``d`` (each side at least ``need`` iterations); found by binary segmentation on the
    log of the times."""
    n = len(d)
    if depth == 0 or n < 2 * need:
        return []
    x = np.log(np.maximum(d.astype(np.float64), 1.0))
    c = np.cumsum(x)
    i = np.arange(need, n - need + 1)
    score = np.abs(c[i - 1] / i - (c[-1] - c[i - 1]) / (n - i)) * np.sqrt(i * (n - i) / n)
    k = int(i[int(np.argmax(score))])
    left, right = d[:k], d[k:]
    ml, mr = float(np.median(left)), float(np.median(right))
    if min(ml, mr) <= 0 or max(ml, mr) < LEVEL_RATIO * min(ml, mr):
        return []
    fast, slow = (left, right) if ml < mr else (right, left)
    if np.percentile(fast, 90) > np.percentile(slow, 10):
        return []
    whole = abs(np.log(ml / mr))
    jl, jr = float(np.median(d[k - need:k])), float(np.median(d[k:k + need]))
    if min(jl, jr) <= 0 or abs(np.log(jl / jr)) < 0.5 * whole or abs(x[k] - x[k - 1]) < 0.5 * whole:
        return []
    return [*level_cuts(left, need, depth - 1), k, *(k + j for j in level_cuts(right, need, depth - 1))]
