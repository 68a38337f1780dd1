"""The one formatting module: three significant digits, the unit chosen per value, never an exponent or a
long tail of digits, and a dash for what is unknown."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from analysis import fmt


@pytest.mark.parametrize(("ns", "text"), [
    (26_813_634_000, "26.8 s"), (546, "546 ns"), (4_210_000, "4.21 ms"), (24_234_653_000, "24.2 s"),
    (12_000, "12.0 µs"), (999_960, "1.00 ms"), (0, "0 ns"), (1_500_000_000_000, "1,500 s"), (None, "–"),
    (math.nan, "–"), (math.inf, "–"),
])
def test_durations(ns, text):
    assert fmt.duration(ns) == text


@pytest.mark.parametrize(("n", "text"), [
    (512, "512 B"), (1_234_567, "1.23 MB"), (16e9, "16.0 GB"), (999_999, "1.00 MB"), (None, "–"),
])
def test_sizes_and_rates(n, text):
    assert fmt.size(n) == text
    assert fmt.rate(n) == ("–" if n is None else text + "/s")


def test_percentages_and_counts():
    assert fmt.pct(12.345) == "12.3 %" and fmt.pct(None) == "–"
    assert fmt.count(12288) == "12,288" and fmt.count(float("inf")) == "–"


@pytest.mark.parametrize(("p", "text"), [
    (0.786, "0.786"), (0.0123, "0.0123"), (0.001, "0.00100"), (0.000852, "< 0.001"), (0.0, "< 0.001"), (1.0, "1.00"),
    (None, "–"),
])
def test_p_values(p, text):
    """A p-value keeps three significant digits down to 0.001 and says "< 0.001" below: never "0.000852"."""
    assert fmt.p_value(p) == text


@given(st.floats(min_value=-1e18, max_value=1e18, allow_nan=False))
def test_three_significant_digits_at_most_and_no_exponent(ns):
    text = fmt.duration(ns)
    number, unit = text.rsplit(" ", 1)
    assert unit in ("s", "ms", "µs", "ns") and "e" not in number
    digits = number.replace(",", "").replace("-", "").replace(".", "").lstrip("0")
    assert len(digits) <= 3 or "." not in number  # whole numbers of a large unit keep every digit
