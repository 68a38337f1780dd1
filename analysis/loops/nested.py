"""Nested loops of data-dependent length: an outer loop whose iterations each run an inner loop a varying number of times.

A solver that iterates until convergence inside an outer loop (an assignment algorithm's augmenting rounds,
a Newton step around an iterative linear solve) has no constant kernel sequence: the inner loop's trip
count changes from one outer iteration to the next, so no period covers the work and the iterations that a
period would open differ in length. The structure is still plain:

* the **inner loop** is the unit's period (``analysis.loops.periods.find_period``: a short sequence that comes
  back again and again), found as *bursts*: stretches where the sequence repeats itself with that period at
  least twice in a row; each burst is one run of the inner loop, whatever its trip count;
* with every burst read as one token, an operation that opens the **outer iteration** occurs once per
  iteration and every iteration it opens holds inner-loop work. Operations of the rounds around each inner
  run (a preamble launched before every run) qualify too, but they repeat inside an outer iteration: the
  outer one is the candidate whose iterations hold a *loop of those rounds* (a stretch that repeats
  back to back, holds a burst and does not hold the candidate), when any candidate has one. Of those, the
  most frequent opens the outer iteration (the others are branches taken in some iterations only, ends
  that differ); equally frequent ones, the first to occur;
* the loop must cover ``MIN_COVERAGE`` of the unit's operations, and its iterations must repeat one
  vocabulary (the set of operations each uses, ``analysis.loops.signatures.repeats_one``).

The last outer iteration ends with its last operation of the loop's vocabulary (teardown kernels that no
iteration runs are not in it). Bounded: the unit's first ``MAX_OPS`` operations (a nested loop is the
fallback when no period covers the work; the long loops of big exports have one).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.loops.periods import MIN_COVERAGE, MIN_ITERATIONS, OPS_CODES_SQL, _cond, _units, find_period
from analysis.model.trace import Trace

MAX_OPS = 1 << 18
MAX_ROUND = 64      # the longest round (in operations and bursts) looked for between the inner runs
_BURST = np.uint64(0)


@dataclass(frozen=True)
class Nested:
    """An outer loop over inner runs: the outer iterations' (start_ns, end_ns, operations, operation time),
    the inner loop's period and how many inner iterations and runs it has."""

    pid: int | None
    device: int | None
    iterations: list[tuple[int, int, int, int]]
    anchor: int             # the code that opens each outer iteration
    inner_length: int       # operations per inner iteration
    inner_anchor: int
    inner_iterations: int   # occurrences of the inner anchor inside the bursts
    inner_runs: int         # bursts: runs of the inner loop


def _bursts(codes: np.ndarray, length: int) -> list[tuple[int, int]]:
    """[a, b) of every stretch that repeats itself with period ``length`` at least twice in a row."""
    eq = codes[:-length] == codes[length:]
    edges = np.flatnonzero(np.diff(np.r_[False, eq, False].astype(np.int8)))
    return [(int(a), int(b) + length) for a, b in zip(edges[::2], edges[1::2], strict=True) if b - a >= length]


def _rounds(seq: np.ndarray) -> list[tuple[int, int, frozenset]]:
    """Back-to-back repeats in the token sequence whose unit holds a burst: (start, end, unit's tokens)."""
    out = []
    for q in range(2, min(MAX_ROUND, len(seq) // 2) + 1):
        eq = seq[:-q] == seq[q:]
        edges = np.flatnonzero(np.diff(np.r_[False, eq, False].astype(np.int8)))
        for a, b in zip(edges[::2], edges[1::2], strict=True):
            if b - a >= q:
                unit = frozenset(seq[a:a + q].tolist())
                if int(_BURST) in unit:
                    out.append((int(a), int(b) + q, unit))
    return out


def find_nested(codes: np.ndarray) -> tuple[int, int, int, list[tuple[int, int]], np.ndarray] | None:
    """(outer anchor code, inner length, inner anchor, bursts, positions of the outer anchor) of a code
    sequence, or None (see the module docstring)."""
    found = find_period(codes)
    if found is None:
        return None
    length, inner_anchor = found[0], found[1]
    bursts = _bursts(codes, length)
    if len(bursts) < MIN_ITERATIONS:
        return None
    # One token per burst (code 0: a hash never is in practice), the other operations as they are.
    keep = np.ones(len(codes), dtype=bool)
    seq = codes.astype(np.uint64).copy()
    for a, b in bursts:
        keep[a + 1:b] = False
        seq[a] = _BURST
    where = np.flatnonzero(keep)
    seq = seq[keep]
    rounds = _rounds(seq)
    bursts_upto = np.cumsum(seq == _BURST)
    best: tuple[bool, int, int, int] | None = None   # (holds a loop of rounds, count, -first position, code)
    # Positions grouped by code, in time order (one sort instead of a scan per code).
    order = np.argsort(seq, kind="stable")
    groups = np.split(order, np.flatnonzero(np.diff(seq[order])) + 1)
    for pos in groups:
        code, n = seq[pos[0]], len(pos)
        if code == _BURST or n < MIN_ITERATIONS:
            continue
        if np.any(np.diff(bursts_upto[pos]) <= 0):
            continue   # an iteration without inner work
        # Iterations that hold a loop of rounds are outer to the rounds' own operations.
        outer = any(int(code) not in unit and pos[0] <= a and b <= pos[-1] for a, b, unit in rounds)
        key = (outer, int(n), -int(pos[0]), int(code))
        if best is None or key[:3] > best[:3]:
            best = key
    if best is None:
        return None
    return best[3], length, inner_anchor, bursts, where[np.flatnonzero(seq == best[3])]


def nested_loop(trace: Trace) -> Nested | None:
    """The nested loop of the unit with the most operations that has one (see the module docstring)."""
    from analysis.loops.signatures import repeats_one, signatures

    for pid, device, n, _, _ in _units(trace)[:8]:
        if n < 2 * MIN_ITERATIONS:
            break
        ops = trace.arrays(f"SELECT start_ns, end_ns, code FROM ({OPS_CODES_SQL}) WHERE {_cond(pid, device)} "  # noqa: S608
                           f"ORDER BY start_ns, end_ns LIMIT {MAX_OPS}")
        codes = ops["code"].astype(np.uint64)
        found = find_nested(codes)
        if found is None:
            continue
        anchor, length, inner_anchor, bursts, pos = found
        # The last iteration: its operations of the loop's vocabulary, up to the first one no iteration runs.
        vocab = np.unique(codes[pos[0]:pos[-1]])
        tail = np.flatnonzero(~np.isin(codes[pos[-1]:], vocab))
        end = int(pos[-1] + (tail[0] if len(tail) else len(codes) - pos[-1]))
        bounds = np.r_[pos, end]
        if end - pos[0] < MIN_COVERAGE * len(codes):
            continue
        # The iterations repeat one vocabulary: the set of codes each uses (each code counted once).
        at = np.searchsorted(bounds, np.arange(len(codes)), side="right") - 1
        at[(at < 0) | (np.arange(len(codes)) >= end)] = -1
        first = np.zeros(len(codes), dtype=bool)
        ok = np.flatnonzero(at >= 0)
        pairs = at[ok].astype(np.uint64) * np.uint64(1 << 32) + (codes[ok] & np.uint64(0xFFFFFFFF))
        _, once = np.unique(pairs, return_index=True)
        first[ok[once]] = True
        sets = signatures(np.where(first, at, -1), (codes & np.uint64(0xFFFFFFFF)).astype(np.uint32), len(pos))
        if not repeats_one(sets, 2.0):
            continue
        its = []
        for i in range(len(pos)):
            lo, hi = int(bounds[i]), int(bounds[i + 1])
            its.append((int(ops["start_ns"][lo]), int(ops["end_ns"][lo:hi].max()), hi - lo,
                        int((ops["end_ns"][lo:hi] - ops["start_ns"][lo:hi]).sum())))
        inner = sum(int(np.count_nonzero(codes[a:b] == np.uint64(inner_anchor))) for a, b in bursts
                    if pos[0] <= a < end)
        runs = sum(1 for a, _ in bursts if pos[0] <= a < end)
        return Nested(pid, device, its, anchor, length, inner_anchor, inner, runs)
    return None
