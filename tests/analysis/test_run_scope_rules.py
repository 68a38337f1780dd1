"""Rules of scope ``run`` are dispatched by their trait (``Rule.check_facts``), not by id: the runner's run-level step
gives every such rule the same ``RunFacts`` and never names a rule."""

from __future__ import annotations

import ast
import inspect

import pytest

from analysis.diagnosis.rules.base import Rule, RunFacts
from analysis.diagnosis.rules.registry import default_registry
from analysis.run import runner


def test_every_run_scope_rule_implements_check_facts() -> None:
    run_scope = [r for r in default_registry() if r.scope == "run"]
    assert {r.id for r in run_scope} == {"COMM002", "COMM005"}
    assert [r.id for r in run_scope if r.check_facts is Rule.check_facts] == []


def test_a_run_scope_rule_without_check_facts_fails_in_the_run_level_step() -> None:
    class NoFacts(Rule):
        id, name, scope = "COMM098", "comm.no-facts", "run"

    facts = RunFacts(con=None, sources=[], labels=[], ranks=[], hosts=[], offsets=[], windows=[], spans=[])
    with pytest.raises(NotImplementedError):
        NoFacts().check_facts(facts, {})


def test_the_run_level_step_names_no_rule() -> None:
    """No rule id as a string constant in the run-level step (COMM005 was once special-cased there)."""
    tree = ast.parse(inspect.getsource(runner._run_level_rule))
    ids = {r.id for r in default_registry()}
    assert [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in ids] == []
