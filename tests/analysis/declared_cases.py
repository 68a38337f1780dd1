"""Rule cases declared on test functions, ``@rule_case("NCU001", "fires")``, and checked as they run: a case
declared firing must see its rule report a finding, a silent one must see it run clean (status ok, none).

The helpers that run a rule in a test (``test_ncu_rules.run_rule``) report each run with ``observe``; a
declared test that never runs its rule through them fails, so a declaration cannot outlive its test.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Literal

Outcome = Literal["fires", "silent"]
_observed: list[tuple[str, str, int]] = []  # (rule id, status, findings) of each rule run in the current test


def observe(rule_id: str, status: str, findings: int) -> None:
    _observed.append((rule_id, status, findings))


def rule_case(rule: str, outcome: Outcome) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare the decorated test a case where ``rule`` fires (at least one finding) or stays silent."""
    if outcome not in ("fires", "silent"):
        raise ValueError(f"outcome must be 'fires' or 'silent', not {outcome!r}")

    def decorate(test: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(test)  # keeps the signature: pytest still sees the fixtures and parameters
        def checked(*args: Any, **kwargs: Any) -> Any:
            _observed.clear()
            out = test(*args, **kwargs)
            runs = [(status, n) for rule_id, status, n in _observed if rule_id == rule]
            assert runs, f"{test.__name__} is declared a {rule} case but never ran {rule}"
            if outcome == "fires":
                assert any(status == "ok" and n > 0 for status, n in runs), f"{rule} did not fire: {runs}"
            else:
                assert all(status == "ok" and n == 0 for status, n in runs), f"{rule} was not silent: {runs}"
            return out

        checked.rule_case = (rule, outcome)  # type: ignore[attr-defined]
        return checked

    return decorate


def observe_result(result: dict[str, Any]) -> None:
    """Report every rule of an ``analysis.api.analyze`` result (its status and findings) to the declared case."""
    counts: dict[str, int] = {}
    for f in result["findings"]:
        counts[f["rule_id"]] = counts.get(f["rule_id"], 0) + 1
    for r in result["rules"]:
        observe(r["id"], r["status"], counts.get(r["id"], 0))
