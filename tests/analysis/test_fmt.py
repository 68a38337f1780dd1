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


@pytest.mark.parametrize(("x", "text"), [
    (45.3, "45 %"), (9.96, "10 %"), (3.125, "3.1 %"), (0.523, "0.52 %"), (0.039, "0.039 %"), (0.005, "< 0.01 %"), (0, "0 %"),
    (100, "100 %"), (99.6, "99.6 %"), (99.96, "99.96 %"), (99.9996, "> 99.99 %"), (10972.1, "10,972 %"),
    (-12.3, "-12 %"), (None, "–"), (math.nan, "–"),
])
def test_shares_have_the_precision_the_value_needs(x, text):
    """Whole percentages where they say enough; never "0 %" of something or "100 %" of not quite all."""
    assert fmt.share(x) == text


@given(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False))
def test_a_share_never_reads_as_zero_or_all_when_it_is_not(x):
    number = fmt.share(x).removesuffix(" %").lstrip("<> ")
    assert "e" not in number and len(number.replace(",", "").replace("-", "").replace(".", "").lstrip("0")) <= 7
    if number.replace("-", "") in ("0", "100"):
        assert abs(x) == float(number.replace("-", ""))


@pytest.mark.parametrize(("x", "text"), [
    (5, "5"), (0.5, "0.5"), (12.5, "12.5"), (1000.0, "1,000"), (1e11, "100,000,000,000"), (1e-7, "0.0000001"),
    (98.39999999999999, "98.4"), (None, "–"),
])
def test_exact_quotes_a_threshold_as_set(x, text):
    assert fmt.exact(x) == text


def test_points_and_elapsed():
    assert fmt.points(1.26) == "+1.3 points" and fmt.points(-0.44) == "-0.4 points" and fmt.points(0) == "0.0 points"
    assert fmt.elapsed(4.214) == "4.21 s" and fmt.elapsed(0.3) == "300 ms" and fmt.elapsed(125) == "2 min 05 s"
    assert fmt.elapsed(3725) == "1 h 02 min" and fmt.elapsed(None) == "–"
