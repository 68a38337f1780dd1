"""Trends in a sequence of durations: a rank correlation over their order, so steadily shrinking or growing work
(an elimination whose matrix shrinks each step) is told apart from warm-up and from spread around a level."""

from __future__ import annotations

import numpy as np

from analysis import fmt

TREND_RHO = 0.8  # |Spearman rank correlation| of duration against order at or above which the durations trend
TREND_MIN = 20   # fewest values to judge a trend (a handful of values correlates by chance)


def _ranks(values: np.ndarray) -> np.ndarray:
    """Average ranks (ties share the mean of their ranks), 1-based."""
    order = np.argsort(values, kind="stable")
    sorted_v = values[order]
    ranks = np.empty(len(values), dtype=np.float64)
    # positions where a new value starts, and the mean rank of each run of equal values
    starts = np.flatnonzero(np.concatenate(([True], sorted_v[1:] != sorted_v[:-1])))
    ends = np.append(starts[1:], len(values))
    mean_rank = (starts + ends + 1) / 2.0
    ranks[order] = np.repeat(mean_rank, ends - starts)
    return ranks


def rank_trend(values: np.ndarray) -> float | None:
    """Spearman's rank correlation of ``values`` with their order (-1: always falling, +1: always rising); None
    with fewer than ``TREND_MIN`` values or when they are all equal."""
    v = np.asarray(values, dtype=np.float64)
    if len(v) < TREND_MIN:
        return None
    r = _ranks(v)
    if float(r.std()) == 0.0:
        return None
    x = np.arange(1, len(v) + 1, dtype=np.float64)
    return float(np.corrcoef(x, r)[0, 1])


def is_trend(rho: float | None) -> bool:
    """Whether a rank correlation says the durations trend (fall or rise steadily over the run)."""
    return rho is not None and abs(rho) >= TREND_RHO


def trend_words(rho: float, n: int, what: str = "durations") -> str:
    """'durations fall steadily over the run (rank correlation -0.99 over 4,095)'."""
    return (f"{what} {'fall' if rho < 0 else 'rise'} steadily over the run (rank correlation {fmt.signed(fmt.number(rho), rho)} over "
            f"{fmt.count(n)})")
