"""The verdict's kind and next step are each nsys rule's own traits (``Rule.verdict_kind``, ``Rule.next_step``), not
a table beside the rules: a rule that states neither fails here (COMM005 was once missing from the table, silently)."""

from __future__ import annotations

from analysis.diagnosis.rules.base import Rule, RuleContext
from analysis.diagnosis.rules.registry import default_registry
from analysis.diagnosis.verdict import KINDS, RULE_KINDS, finding_kind, report_verdict
from tests.analysis.test_verdict import FACTS, MS, finding, info


def verdict_trait_problems(rules: list[type[Rule]]) -> list[str]:
    """What is wrong with the nsys rules' verdict traits: a rule that states no ``verdict_kind`` and ``next_step``
    (None and "" say it leads no verdict of its own), a kind outside the verdict's vocabulary, a kind without a
    next step or a next step without a kind."""
    problems = []
    for r in rules:
        if not hasattr(r, "verdict_kind") or not hasattr(r, "next_step"):
            problems.append(f"{r.id} states no verdict_kind and next_step")
        elif r.verdict_kind is not None and r.verdict_kind not in KINDS:
            problems.append(f"{r.id}: verdict_kind {r.verdict_kind!r} is none of the verdict's KINDS")
        elif (r.verdict_kind is None) != (not r.next_step.strip()):
            problems.append(f"{r.id}: a verdict_kind needs a next_step and None needs none")
    return problems


def test_every_registered_nsys_rule_states_its_verdict_traits() -> None:
    nsys = [r for r in default_registry() if r.tool == "nsys"]
    assert len(nsys) == 25 and verdict_trait_problems(nsys) == []
    # The rules that lead no verdict of their own, each one because another verdict speaks for it (finding_kind)
    # or its finding is evidence only (HOST002, the CPU samples the other findings name).
    silent = {r.id for r in nsys if r.verdict_kind is None}
    assert silent == {"KRN005", "PHASE001", "PHASE002", "HOST002"}
    assert {r: finding_kind({"rule_id": r}) for r in sorted(silent)} == {
        "HOST002": None, "KRN005": "gpu_bound_kernel", "PHASE001": "startup", "PHASE002": "startup"}
    # The verdict reads the traits: every other rule is in RULE_KINDS with its own kind and step, COMM005 too.
    assert dict(RULE_KINDS) == {r.id: (r.verdict_kind, r.next_step) for r in nsys if r.verdict_kind is not None}
    assert RULE_KINDS["COMM005"][0] == "communication"


def test_the_trait_check_fails_on_a_rule_without_them() -> None:
    class NoTraits(Rule):
        id, name = "GPU098", "gpu.no-traits"

        def check(self, ctx: RuleContext) -> list:
            return []

    class UnknownKind(NoTraits):
        id, name, verdict_kind, next_step = "GPU099", "gpu.unknown-kind", "slow", "make it fast"

    class KindWithoutStep(NoTraits):
        id, name, verdict_kind, next_step = "GPU097", "gpu.no-step", "host_bound", " "

    assert verdict_trait_problems([NoTraits, UnknownKind, KindWithoutStep]) == [
        "GPU098 states no verdict_kind and next_step",
        "GPU099: verdict_kind 'slow' is none of the verdict's KINDS",
        "GPU097: a verdict_kind needs a next_step and None needs none"]


def test_a_leading_finding_takes_its_rules_next_step() -> None:
    """A rule's own trait reaches the verdict: the idle GPU's top finding gives its rule's kind and next step."""
    rule = default_registry().get("HOST001")
    captured = {**FACTS, "captured": {"--sample=cpu": True, "--trace=osrt": True}}
    v = report_verdict(info(span_ms=100, busy_ms=20), [finding("GPU002", 10), finding("HOST001", 60)], captured)
    assert (v.kind, v.rule_id, v.next_step, v.impact_ns) == (rule.verdict_kind, "HOST001", rule.next_step, 60 * MS)


def test_the_kind_a_finding_stands_for_is_its_rule_s_trait() -> None:
    """``finding_kind`` asks the finding's rule (``Rule.finding_kind``: ``stands_for``, else ``verdict_kind``); it
    names no rule id itself."""
    import inspect
    import re

    class Speaks(Rule):
        id, name, verdict_kind, next_step, stands_for = "GPU097", "gpu.speaks", None, "", "startup"

    class Leads(Rule):
        id, name, verdict_kind, next_step = "GPU096", "gpu.leads", "host_bound", "do it"

    class Ncu(Rule):
        id, name, tool = "NCU097", "ncu.plain", "ncu"

    assert (Speaks.finding_kind({}), Leads.finding_kind({}), Ncu.finding_kind({})) == ("startup", "host_bound", None)
    assert finding_kind({"rule_id": "GPU001", "main_cause": "setup"}) == "startup"  # GPU001's own override
    assert finding_kind({"rule_id": "GPU001", "main_cause": "no_activity"}) == "host_bound"
    assert finding_kind({"rule_id": "NCU001"}) is None and finding_kind({"rule_id": "NET001"}) is None
    assert not re.search(r"[A-Z]{3,5}\d{3}", inspect.getsource(finding_kind))
