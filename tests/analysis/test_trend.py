"""Issue #39 class 6: work that shrinks (or grows) steadily over a loop is a trend, not warm-up and not spread.

Gaussian elimination (gaussian-threadsync, Rodinia) updates an (n - t) x (n - t) submatrix at step t: Fan2's
duration falls over the 4,095 steps. Its first steps are the slowest because they do the most work, so they are not
warm-up, and its time above the median is that trend, not kernels slowed by something beside them. The rank
correlation the analysis uses equals Spearman's, computed here from the raw export.
"""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from analysis.loops.phases import warmup_count
from analysis.loops.trend import TREND_RHO, rank_trend
from tests.analysis.test_verdict_substance import _result
from tests.conftest import corpus_file

SHORT = "gaussian-threadsync.sqlite"


def _spearman(y: list[float]) -> float:
    """Spearman's rho of ``y`` against its order, average ranks for ties (the textbook definition)."""
    order = sorted(range(len(y)), key=lambda i: y[i])
    ranks = [0.0] * len(y)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and y[order[j + 1]] == y[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return float(np.corrcoef(np.arange(len(y)), ranks)[0, 1])


def test_gaussian_fan2_is_a_trend_not_warmup_or_spread() -> None:
    con = sqlite3.connect(f"file:{corpus_file(SHORT)}?mode=ro", uri=True)
    try:
        durs = [float(d) for (d,) in con.execute("""
            SELECT k."end" - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName
            WHERE s.value = 'Fan2' ORDER BY k.start""")]
        starts = [int(s) for (s,) in con.execute("""
            SELECT k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName
            WHERE s.value = 'Fan1' ORDER BY k.start""")]
    finally:
        con.close()
    rho = _spearman(durs)
    assert len(durs) == 4095 and rho < -0.95
    result = _result(SHORT)
    report = result["reports"][0]
    # No warm-up: the loop's first iterations are its largest, and the steady phase says why.
    names = [p["name"] for p in report["phases"]]
    assert "warmup" not in names, report["phases"]
    steady = next(p for p in report["phases"] if p["name"] == "steady")
    assert "iteration times fall steadily" in steady["reason"] and "a trend, not warm-up" in steady["reason"]
    iteration_rho = _spearman([float(b - a) for a, b in zip(starts, starts[1:], strict=False)])
    assert iteration_rho < -TREND_RHO
    # KRN003: the time above Fan2's median is the trend; the finding says so and does not lead.
    (f,) = [x for x in result["findings"] if x["rule_id"] == "KRN003"]
    assert f["premise_holds"] is False and f["title"].startswith("Kernel durations trend, not spread")
    (t,) = f["trends"]
    assert t["name"].startswith("Fan2") and t["rank_correlation"] == pytest.approx(rho, abs=1e-4)
    assert result["verdict"]["rule_id"] != "KRN003"


def test_a_level_with_slow_first_iterations_is_still_warmup() -> None:
    """The trend test does not swallow warm-up: a flat loop whose first iterations are slow keeps its warm-up,
    while a loop that shrinks step by step (the same slow start) has none."""
    rng = np.random.default_rng(39)
    level = 100.0 + rng.normal(0.0, 2.0, 400)
    level[:5] = 900.0
    assert abs(rank_trend(level) or 0.0) < TREND_RHO and warmup_count(level) == 5
    shrinking = np.linspace(900.0, 20.0, 400) + rng.normal(0.0, 2.0, 400)
    assert (rank_trend(shrinking) or 0.0) < -TREND_RHO and warmup_count(shrinking) == 0
    assert rank_trend(np.full(50, 7.0)) is None and rank_trend(np.arange(5.0)) is None
    assert rank_trend(np.array([3.0, 1.0, 2.0] * 10)) == pytest.approx(_spearman([3.0, 1.0, 2.0] * 10))
