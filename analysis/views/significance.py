"""Whether a per-step or per-launch metric changed between two runs: a Mann-Whitney U test on the two
samples (two-sided, normal approximation with tie and continuity correction) and a floor on the effect
size.

The effect size (``delta_pct``) is the Hodges-Lehmann estimate of the ratio head / base: the median of the
log ratios of all pairs (one value of each run), as a change in percent. Durations change by factors,
and many kernels have several modes (an NCCL kernel that waits for its peer or not): the ratio of two
medians jumps with the share of launches in each mode, the pairwise estimate does not. ``delta`` is the
change of the median (ns), shown beside.

A metric is ``changed`` when the test is significant at ``ALPHA`` and the median moved by at least the
floor. A side with fewer than ``MIN_SAMPLES`` values cannot be tested, nor can samples too small for any
outcome to reach ``ALPHA`` (2 against 2, say): the floor alone decides, and the result says so
(``test: "floor_only"``). The normal approximation is the textbook one (and SciPy's
``method="asymptotic"``): with a handful of samples per side it is conservative rather than exact.
"""

from __future__ import annotations

import math
from typing import TypedDict

import numpy as np

from analysis import fmt

ALPHA = 0.01          # strict: a comparison tests every kernel, so false alarms add up over many tests
MIN_SAMPLES = 2
# Above this many values a side enters the pairwise estimate by as many evenly spaced quantiles (90,000
# pairs at most): the estimate moves by far less than the noise floor.
PAIR_QUANTILES = 300


def ratio_estimate(base: np.ndarray, head: np.ndarray) -> float:
    """The Hodges-Lehmann estimate of head / base: exp of the median of log(h) - log(b) over all pairs
    (values under 1 count as 1: a zero-length step part or launch)."""
    def logs(x: np.ndarray) -> np.ndarray:
        v = np.log(np.maximum(np.asarray(x, dtype=np.float64), 1.0))
        if len(v) > PAIR_QUANTILES:
            v = np.quantile(v, (np.arange(PAIR_QUANTILES) + 0.5) / PAIR_QUANTILES)
        return v

    return float(np.exp(np.median(np.subtract.outer(logs(head), logs(base)))))


def mann_whitney_p(x: np.ndarray, y: np.ndarray) -> float:
    """Two-sided p-value of the Mann-Whitney U test of ``x`` against ``y`` (normal approximation, ties
    corrected, continuity corrected). 1.0 when every value is the same."""
    n1, n2 = len(x), len(y)
    both = np.concatenate([np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)])
    order = np.argsort(both, kind="mergesort")
    ranks = np.empty(len(both), dtype=np.float64)
    sorted_vals = both[order]
    # Average ranks over runs of equal values (1-based).
    _, first, counts = np.unique(sorted_vals, return_index=True, return_counts=True)
    avg = first + (counts + 1) / 2.0
    ranks[order] = np.repeat(avg, counts)
    u1 = float(ranks[:n1].sum()) - n1 * (n1 + 1) / 2.0
    mu = n1 * n2 / 2.0
    n = n1 + n2
    tie = float((counts.astype(np.float64) ** 3 - counts).sum())
    var = n1 * n2 / 12.0 * ((n + 1) - tie / (n * (n - 1)))
    if var <= 0:
        return 1.0
    z = (abs(u1 - mu) - 0.5) / math.sqrt(var)
    if z <= 0:
        return 1.0
    return float(math.erfc(z / math.sqrt(2.0)))


def smallest_p(n1: int, n2: int) -> float:
    """The smallest p-value ``mann_whitney_p`` can give for samples of these sizes (all of one side below
    all of the other, no ties): at or above ``ALPHA`` the test cannot say "changed", whatever the data."""
    n = n1 + n2
    z = (n1 * n2 / 2.0 - 0.5) / math.sqrt(n1 * n2 * (n + 1) / 12.0)
    return float(math.erfc(z / math.sqrt(2.0)))


class Sample(TypedDict):
    """A sample described: its size, median, p10 and p90 (None for an empty one)."""

    n: int
    median: float | None
    p10: float | None
    p90: float | None


class SampleComparison(TypedDict):
    """Two samples compared (``compare_samples``)."""

    base: Sample
    head: Sample
    delta: float | None
    delta_pct: float | None
    p_value: float | None
    test: str | None
    significant: bool | None
    changed: bool
    note: str | None


def describe(values: np.ndarray) -> Sample:
    """n, median, p10 and p90 of a sample (None for an empty one)."""
    v = np.asarray(values, dtype=np.float64)
    if not len(v):
        return {"n": 0, "median": None, "p10": None, "p90": None}
    p10, p50, p90 = np.percentile(v, (10, 50, 90))
    return {"n": int(len(v)), "median": float(p50), "p10": float(p10), "p90": float(p90)}


def compare_samples(base: np.ndarray, head: np.ndarray, floor_pct: float, alpha: float = ALPHA) -> SampleComparison:
    """The two samples described, the change of the median (``delta``, ns), the effect in percent
    (``delta_pct``: ``ratio_estimate``), the test's p-value, and whether the metric ``changed``
    (significant and at least ``floor_pct``)."""
    b, h = describe(base), describe(head)
    out: SampleComparison = {"base": b, "head": h, "delta": None, "delta_pct": None, "p_value": None,
                           "test": None, "significant": None, "changed": False, "note": None}
    if b["median"] is None or h["median"] is None:
        out["note"] = "no samples on one side"
        return out
    out["delta"] = h["median"] - b["median"]
    out["delta_pct"] = delta_pct = round(100.0 * (ratio_estimate(base, head) - 1.0), 3)
    above = abs(delta_pct) >= floor_pct and delta_pct != 0
    if b["n"] < MIN_SAMPLES or h["n"] < MIN_SAMPLES:
        out["test"], out["changed"] = "floor_only", bool(above)
        out["note"] = (f"{fmt.count(min(b['n'], h['n']))} sample(s) on one side: no test, the {fmt.exact(floor_pct)} % "
                       "floor decides")
        return out
    if smallest_p(b["n"], h["n"]) >= alpha:
        out["test"], out["changed"] = "floor_only", bool(above)
        out["note"] = (f"{fmt.count(b['n'])} and {fmt.count(h['n'])} samples: too few for the test to reach p < {fmt.exact(alpha)}, "
                       f"the {fmt.exact(floor_pct)} % floor decides")
        return out
    p = mann_whitney_p(np.asarray(base), np.asarray(head))
    out["test"], out["p_value"], out["significant"] = "mann_whitney", float(f"{p:.3g}"), p < alpha
    out["changed"] = bool(p < alpha and above)
    return out
