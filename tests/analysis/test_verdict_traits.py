"""The verdict's kind and next step are each nsys rule's own traits (``Rule.verdict_kind``, ``Rule.next_step``), not
a table beside the rules: a rule that states neither fails here (COMM005 was once missing from the table, silently)."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.diagnosis.rules.base import Rule, RuleContext
from analysis.diagnosis.rules.registry import default_registry
from analysis.diagnosis.verdict import KINDS, finding_kind, report_verdict
from tests.analysis.planting import finding_of
from tests.analysis.test_verdict import FACTS, MS, RULE_KINDS, finding, info


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
    assert {r: finding_kind(finding_of(r, 0)) for r in sorted(silent)} == {
        "HOST002": None, "KRN005": "gpu_bound_kernel", "PHASE001": "startup", "PHASE002": "startup"}
    # Every other rule leads a verdict of its own, COMM005 too.
    assert RULE_KINDS["COMM005"][0] == "communication" and len(RULE_KINDS) == len(nsys) - len(silent)


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

    assert (Speaks.finding_kind(finding_of(Speaks.id, 0)), Leads.finding_kind(finding_of(Leads.id, 0)),
            Ncu.finding_kind(finding_of(Ncu.id, 0))) == ("startup", "host_bound", None)
    assert finding_kind(finding_of("GPU001", 0, main_cause="setup")) == "startup"  # GPU001's own override
    assert finding_kind(finding_of("GPU001", 0, main_cause="no_activity")) == "host_bound"
    assert finding_kind(finding_of("NCU001", 0)) is None and finding_kind(finding_of("NET001", 0)) is None
    assert not re.search(r"[A-Z]{3,5}\d{3}", inspect.getsource(finding_kind))


RULE_ID = r"^(GPU|SYNC|MEM|KRN|COMM|HOST|PHASE|NCU|NET)\d{3}$"


def rule_ids_in(source: str) -> list[str]:
    """The rule ids code names as string constants (docstrings and comments aside, and a rule class's own
    ``id = "..."``): a table or a test keyed by rule id outside the rule classes."""
    import ast
    import re

    tree = ast.parse(source)
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    own = {id(a.value) for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for a in c.body
           if isinstance(a, ast.Assign) and [getattr(t, "id", None) for t in a.targets] == ["id"]}
    return sorted(n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                  and id(n) not in docs and id(n) not in own and re.match(RULE_ID, n.value))


def rule_ids_named(path: str) -> list[str]:
    """``rule_ids_in`` a module of the checkout."""
    return rule_ids_in((ROOT / path).read_text())


ROOT = Path(__file__).resolve().parents[2]
ANALYSIS_MODULES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "analysis").rglob("*.py"))


@pytest.mark.parametrize("path", ANALYSIS_MODULES)
def test_no_rule_id_keyed_table_outside_the_rule_classes(path: str) -> None:
    """Facts about rules live on the rules: no module of the analysis names a rule id outside a rule class's own
    ``id`` (the gap table's owners and the calls a gap opened in are ``Rule.gap_role`` and ``Rule.opened_in``; the
    ownership thresholds' defaults are the rules' own)."""
    assert rule_ids_named(path) == []


def test_a_rule_id_keyed_table_is_seen() -> None:
    """The check above fails on the tables ``gaps.py`` once held, and not on a rule class's own id."""
    table = 'OWNER_CODES = {"GPU001": 3, "KRN001": 4}\nclass IdleGaps(Rule):\n    id = "GPU001"\n'
    assert rule_ids_in(table) == ["GPU001", "KRN001"]
    assert rule_ids_in('def f(p):\n    return p.get("GPU001", {}).get("min_gap_us")\n') == ["GPU001"]


def test_the_gap_table_s_parts_are_stated_once_each() -> None:
    """One rule plays each part of the gap table and each ``opened_in``, and the engine hands the owners to every rule
    (``Registry.idle_claimers``) with the claiming rules."""
    rules = list(default_registry())
    assert {r.id: r.gap_role for r in rules if r.gap_role} == {
        "GPU001": "long_gap", "KRN001": "short_runs", "GPU002": "low_utilization"}
    assert {r.id: r.opened_in for r in rules if r.opened_in} == {"SYNC001": "sync", "MEM002": "blocking_copy"}
    claimers = default_registry().idle_claimers()
    assert {"GPU001", "KRN001", "GPU002"} <= {r.id for r in claimers}
    from analysis.diagnosis.rules.nsys.gaps import gap_rule

    with pytest.raises(LookupError):
        gap_rule([r for r in claimers if r.gap_role != "long_gap"], "long_gap")


@pytest.mark.parametrize("path", ["analysis/diagnosis/verdict.py", "analysis/diagnosis/ncu_verdict.py",
                                  "analysis/diagnosis/nccl/__init__.py", "analysis/run/rollup.py",
                                  "analysis/run/runner.py", "analysis/run/facts.py", "analysis/run/waiting.py"])
def test_the_verdicts_name_no_rule_id(path: str) -> None:
    """What a verdict does with a finding beyond its kind (a pause, host work, the per-launch round trip, the roles
    on a busy GPU, the step that depends on the finding; an ncu cause's step and whether its fix removes work; a
    NET finding's place in the log's order; a rule costed as a phase's wall time; what the run-level step adds to a
    rule's findings) is the rule's trait, so the code names no rule."""
    assert rule_ids_named(path) == []


def test_every_net_rule_states_its_place_in_the_log_verdict() -> None:
    from analysis.diagnosis.nccl import registry

    orders = [getattr(r, "verdict_order", None) for r in registry()]
    assert all(isinstance(o, int) for o in orders) and len(set(orders)) == len(orders) == 7


def verdict_role_problems(rules: list[type[Rule]]) -> list[str]:
    """The verdict's other traits, checked as the verdict needs them: one rule of each role it looks up (the round
    trip's whole, the copy-bound time, the launch shape, the dominant kernel), every round-trip part and host-work
    rule a rule that leads a verdict, a one-off phase one of the verdict's kinds."""
    problems = []
    for role in ("copy_bound", "launch_shape", "dominant_kernel"):
        if len([r for r in rules if r.busy_role == role]) != 1:
            problems.append(f"not one rule plays {role}")
    if len([r for r in rules if r.round_trip is not None and r.round_trip.whole]) != 1:
        problems.append("not one rule measures the round trip")
    for r in rules:
        if (r.round_trip is not None or r.host_work) and r.verdict_kind is None:
            problems.append(f"{r.id}: a round-trip part or host work leads no verdict")
        if r.one_off_phase is not None and r.one_off_phase not in KINDS:
            problems.append(f"{r.id}: one_off_phase {r.one_off_phase!r} is none of the verdict's KINDS")
    return problems


def test_the_verdict_roles_are_stated_once_each() -> None:
    nsys = [r for r in default_registry() if r.tool == "nsys"]
    assert verdict_role_problems(nsys) == []
    assert {r.id for r in nsys if r.host_work} == {"GPU001", "HOST001", "HOST003"}
    assert {r.id: r.round_trip.part for r in nsys if r.round_trip} == {
        "KRN001": "between launches", "SYNC001": "in synchronizations", "MEM003": "in synchronous memsets",
        "MEM002": "in synchronous copies", "MEM006": "in allocation calls"}
    # A registry without the round trip's rule, or with a second copy-bound rule, fails.
    without = [r for r in nsys if r.id != "KRN001"]
    twice = [*nsys, type("Copies2", (nsys[[r.busy_role for r in nsys].index("copy_bound")],), {"id": "MEM098"})]
    assert verdict_role_problems(without) == ["not one rule measures the round trip"]
    assert verdict_role_problems(twice) == ["not one rule plays copy_bound"]


def test_a_rule_s_own_step_reaches_the_verdict() -> None:
    """MEM004's step follows its faults' direction and MEM002's drops pinning without a pageable copy: the rules'
    own ``verdict_step``, which the verdict takes for its leading finding."""
    mem004, mem002 = default_registry().get("MEM004"), default_registry().get("MEM002")
    faults = {"idle_by_direction": {"UVM_DtoH": {"ns": 5}}, "kernel_overlap_ns": 1}
    to_host = finding_of("MEM004", 0, **faults)
    assert "cudaCpuDeviceId" in mem004.verdict_step(to_host)
    assert mem004.verdict_step(finding_of("MEM004", 0)) == mem004.next_step
    assert mem002.verdict_step(finding_of("MEM002", 0, pinned_advice=False)) != mem002.next_step
    assert mem002.verdict_step(finding_of("MEM002", 0, pinned_advice=True)) == mem002.next_step
    v = report_verdict(info(span_ms=100, busy_ms=20), [finding("MEM004", 60, **faults)], FACTS)
    assert (v.rule_id, v.next_step) == ("MEM004", mem004.verdict_step(to_host))


def test_what_the_run_step_adds_is_the_rule_s_trait() -> None:
    """The run-level step completes COMM003's groups with every rank, HOST003's idle with its MPI waiting and COMM001's
    exposed time with its collective waiting, each found by the rule's ``run_split``, none by id."""
    from analysis.diagnosis.rules.base import split_in_run

    rules = list(default_registry())
    assert {s: split_in_run(rules, s) for s in ("ranks", "mpi_waiting", "collective_waiting")} == {
        "ranks": {"COMM003"}, "mpi_waiting": {"HOST003"}, "collective_waiting": {"COMM001"}}
