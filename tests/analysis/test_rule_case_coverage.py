"""Every registered rule has a case where it fires and one where it stays silent: nsys rules as planted
variants of real exports (rule_cases.CASES, rule_cases_system.SYSTEM_CASES), ncu rules as tests declared with ``@rule_case`` (declared_cases).
A rule registered without both fails here by name, unless it is listed, visibly, in MISSING below."""

from __future__ import annotations

import importlib
from collections import defaultdict
from pathlib import Path

from analysis.diagnosis.rules.registry import default_registry
from tests.analysis.rule_cases import CASES
from tests.analysis.rule_cases_system import SYSTEM_CASES

OUTCOMES = {"fires", "silent"}
# Rules registered without a firing or a silent case yet: rule id -> the outcomes it lacks, each with a
# comment on why. Empty today: every registered rule has both. Add an entry only with its reason; the
# test below fails once the case lands, so an entry cannot outlive the gap it names.
MISSING: dict[str, set[str]] = {}


def declared_cases() -> dict[str, set[str]]:
    """Rule id -> the outcomes some case covers: the planted nsys table plus every ``@rule_case`` test of
    this package (each test module imported and scanned, so a new test file is picked up as it lands)."""
    found: dict[str, set[str]] = defaultdict(set)
    for case in [*CASES, *SYSTEM_CASES]:
        found[case.rule].add(case.outcome)
    for path in sorted(Path(__file__).parent.glob("test_*.py")):
        module = importlib.import_module(f"{__package__}.{path.stem}")
        for obj in vars(module).values():
            declared = getattr(obj, "rule_case", None)
            if callable(obj) and isinstance(declared, tuple):
                found[declared[0]].add(declared[1])
    return found


def test_every_rule_has_a_firing_and_a_silent_case():
    found = declared_cases()
    lacking = {rule.id: OUTCOMES - found.get(rule.id, set()) for rule in default_registry()}
    lacking = {rule_id: gap for rule_id, gap in lacking.items() if gap}
    unlisted = {rule_id: sorted(gap) for rule_id, gap in lacking.items() if gap - MISSING.get(rule_id, set())}
    assert not unlisted, f"rules without a case (add one to rule_cases.CASES or a @rule_case test): {unlisted}"


def test_the_allow_list_names_only_real_gaps():
    found = declared_cases()
    registered = set(default_registry().ids())
    assert set(MISSING) <= registered, f"MISSING names rules that are not registered: {set(MISSING) - registered}"
    closed = {rule_id: sorted(gap & found.get(rule_id, set())) for rule_id, gap in MISSING.items()}
    assert not any(closed.values()), f"these cases exist now; remove them from MISSING: {closed}"


def test_every_case_names_a_registered_rule_and_a_known_outcome():
    registered = set(default_registry().ids())
    found = declared_cases()
    assert set(found) <= registered, f"cases for unregistered rules: {set(found) - registered}"
    assert all(outcomes <= OUTCOMES for outcomes in found.values()), found
