"""Rules build their finding's ``extra`` from the typed ``*Extra`` dataclasses of ``analysis.results`` (``extra_json``),
not from dict literals: the JSON keeps the keys in the type's order, and a rule whose type exists but that still
writes a dict is seen here."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from analysis.api import analyze
from analysis.diagnosis.rules.registry import default_registry
from analysis.results import FINDING_EXTRA, DominantKernelExtra, MemsetExtra, WarmupExtra, extra_json
from tests.analysis.planting import ingested
from tests.conftest import corpus_file

# The ncu rules share NcuExtra, which also declares the keys the gain sharing (analysis.diagnosis.ncu_gains) adds
# after the rule, and not the rule's launch_savings: the rule's own part is not yet a type (issue #38).
NOT_YET = {f"NCU{i:03d}" for i in range(1, 11)}


def test_extra_json_is_the_fields_in_declared_order() -> None:
    assert list(extra_json(WarmupExtra(steady_median_ns=7, warmup_iterations=3))) == ["warmup_iterations",
                                                                                       "steady_median_ns"]
    assert extra_json(MemsetExtra(memsets=2)) == {"memsets": 2}
    with pytest.raises(TypeError):
        extra_json({"memsets": 2})
    with pytest.raises(TypeError):
        extra_json(MemsetExtra)


def test_every_rule_with_a_typed_extra_constructs_it() -> None:
    rules = {r.id: r for r in default_registry()}
    dicts = sorted(rid for rid, cls in FINDING_EXTRA.items()
                   if f"{cls.__name__}(" not in inspect.getsource(rules[rid]))
    assert dicts == sorted(NOT_YET)


def test_a_rule_s_extra_on_a_real_export_is_its_type() -> None:
    """KRN005 on a corpus export: the finding's extra keys are DominantKernelExtra's fields, in order, and its values
    build the type back."""
    result = analyze([ingested(corpus_file("vecadd-2026.sqlite"))], rules=["KRN005"])
    (finding,) = result.findings
    fields = [f.name for f in dataclasses.fields(DominantKernelExtra)]
    typed = [k for k in finding.extra if k in fields]
    assert typed == fields
    assert extra_json(DominantKernelExtra(**{k: finding.extra[k] for k in fields})) == {k: finding.extra[k]
                                                                                        for k in fields}
