"""Every threshold declares its type, unit and range; a value outside it (or not finite, or of the wrong type)
is refused by name before any work, and every value inside it, the edges included, gives an analysis: no
rule in error, and no number JSON cannot hold. A rule added without a range fails here, by name."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from analysis.api import analyze, check_thresholds
from analysis.diagnosis.findings import unrepresentable
from analysis.diagnosis.rules.base import Threshold, ThresholdError
from analysis.diagnosis.rules.registry import default_registry
from tests.analysis.planting import ingested
from tests.conftest import corpus_file

ALL = [(rule, name, t) for rule in default_registry() for name, t in rule.thresholds.items()]
IDS = [f"{rule.id}.{name}" for rule, name, _ in ALL]
# Rules that share idle time read each other's thresholds: an edge of one is run with all of them.
OWNERS = sorted(r.id for r in default_registry() if r.gap_role is not None)  # the gap table's owners
EXPORTS = {"nsys": ["nccl-ring-2node-r0-ault43.sqlite"],
           "ncu": ["pytorch-sgemm-small.csv"]}


@pytest.mark.parametrize(("rule", "name", "t"), ALL, ids=IDS)
def test_every_threshold_declares_its_type_unit_and_range(rule, name, t: Threshold):
    assert t.unit and t.help
    assert t.minimum is not None and t.maximum is not None, f"{rule.id}.{name}: declare minimum= and maximum="
    assert math.isfinite(t.minimum) and math.isfinite(t.maximum) and t.minimum < t.maximum
    assert t.minimum <= t.default <= t.maximum or t.default in t.special
    if t.is_integer:
        assert float(t.minimum).is_integer() and float(t.default).is_integer()
    described = rule.describe()["thresholds"][name]
    assert (described["type"], described["minimum"], described["maximum"]) == (t.kind, t.minimum, t.maximum)


def _outside(t: Threshold) -> list[object]:
    span = t.maximum - t.minimum
    out: list[object] = [t.minimum - max(span, 1.0), t.maximum + max(span, 1.0), t.maximum * 10 + 1, 1e308,
                         -1e308, float("nan"), float("inf"), float("-inf"), "1e400", "9" * 10_000, 10**10_000,
                         True, None, "abc", [1], "", "0x10"]
    if t.minimum > 0:
        out += [5e-324, 0.0] if 0.0 not in t.special else [5e-324]
    if t.is_integer:
        out += [t.minimum + 0.5, 2**63]
    return out


@pytest.mark.parametrize(("rule", "name", "t"), ALL, ids=IDS)
def test_values_outside_the_range_are_refused_naming_the_threshold_and_range(rule, name, t: Threshold):
    key = f"{rule.id}.{name}"
    for value in _outside(t):
        with pytest.raises(ThresholdError) as err:
            check_thresholds({key: value})
        message = str(err.value)
        assert message.startswith(f"{key} must be ") and t.range_text() in message, message
    # The edges and the default are taken, as numbers or as text.
    for value in (t.minimum, t.maximum, t.default, repr(t.maximum), *t.special):
        assert check_thresholds({key: value}) == {key: float(value)}


def _inside(t: Threshold) -> list[float]:
    values = [t.minimum, t.maximum, *t.special]
    if not t.is_integer and t.minimum == 0:
        values.append(5e-324)   # the smallest positive number: divides into an infinity
    return values


@pytest.fixture(scope="module")
def prepared() -> dict[str, list[Path]]:
    return {tool: [ingested(corpus_file(n)) for n in names] for tool, names in EXPORTS.items()}


@pytest.mark.parametrize(("rule", "name", "t"), ALL, ids=IDS)
def test_every_value_in_range_gives_an_analysis(prepared, rule, name, t: Threshold):
    rules = OWNERS if rule.id in OWNERS else [rule.id]
    for path in prepared["ncu" if rule.tool == "ncu" else "nsys"]:
        for value in _inside(t):
            result = analyze([path], rules=rules, thresholds={f"{rule.id}.{name}": value}).to_json()
            statuses = {r["id"]: (r["status"], r["reason"]) for r in result["rules"]}
            assert all(s != "error" for s, _ in statuses.values()), (path.name, value, statuses)
            assert unrepresentable(result) is None
            json.dumps(result, allow_nan=False)
