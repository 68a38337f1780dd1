"""Each rule states its advice once: its ``advice`` attribute feeds the *Advice* section of its published
docs (GET /api/v1/rules, the Rules page) and the advice of its findings; the docstring holds none, and no
finding spells the rule's advice out again in code."""

from __future__ import annotations

import ast
import inspect
import re
import sys
from pathlib import Path

import pytest

from analysis.api import analyze
from analysis.diagnosis.rules.registry import default_registry
from tests.analysis.planting import api as api_call
from tests.analysis.planting import kernel, normalized

RULES = list(default_registry())


def _words(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_the_advice_is_stated_once_and_published_in_the_docs(rule):
    assert rule.advice.strip(), f"{rule.id} states no advice"
    assert "*Advice*" not in (rule.__doc__ or ""), f"{rule.id}: advice in the docstring too; put it in `advice`"
    doc = rule.doc()
    assert doc.count("*Advice*") == 1 and doc.endswith(f"*Advice*: {rule.advice}")
    assert rule.describe()["doc"] == doc
    # The module's source holds the advice's text once: in the attribute, never again as a finding's literal.
    tree = ast.parse(inspect.getsource(sys.modules[rule.__module__]))
    quoted = [_words(s.value) for s in ast.walk(tree) if isinstance(s, ast.Constant) and isinstance(s.value, str)]
    assert sum(q == _words(rule.advice) for q in quoted) == 1


def test_no_finding_states_advice_as_a_literal():
    """``advice=`` of a finding is the rule's ``advice`` or advice chosen by the cause found (a table or a
    variable), never a string written at the call."""
    literals = []
    folders = {Path(inspect.getfile(r)).parent for r in RULES}  # the rules' packages, wherever they live
    assert folders
    for path in sorted(p for folder in folders for p in folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.keyword) and node.arg == "advice" and isinstance(node.value, ast.Constant):
                literals.append(f"{path}:{node.value.lineno}")
    assert not literals


def test_a_findings_advice_is_its_rules(tmp_path):
    """SYNC001 on a planted blocking sync: the finding's advice is the rule's ``advice``, word for word."""
    rule = next(r for r in RULES if r.id == "SYNC001")
    path = normalized(tmp_path / "r.duckdb", kernels=[kernel(0, 1_000_000), kernel(50_000_000, 51_000_000)],
                      cuda_api=[api_call(500_000, 49_000_000, "cudaDeviceSynchronize")])
    found = [f for f in analyze([path], rules=["SYNC001"], window="all").findings if f.rule_id == "SYNC001"]
    assert found and all(f.advice == rule.advice for f in found)
    assert re.search(r"synchronize once per step", rule.advice)
