"""Rules build their finding's ``extra`` from the typed ``*Extra`` dataclasses of ``analysis.results`` (``extra_json``),
not from dict literals: the JSON keeps the keys in the type's order, and a rule whose type exists but that still
writes a dict is seen here. A rule declares its type (``Rule.extra_type``); its findings carry no key the type (or the
engine's ``EngineExtra``) lacks."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from analysis.api import analyze
from analysis.diagnosis.rules.base import Registry
from analysis.diagnosis.rules.registry import default_registry
from analysis.results import (
    DominantKernelExtra,
    EngineExtra,
    FindingResult,
    MemsetExtra,
    SyncExtra,
    WarmupExtra,
    extra_json,
)
from tests.analysis.planting import ingested
from tests.conftest import corpus_file


def test_extra_json_is_the_fields_in_declared_order() -> None:
    assert list(extra_json(WarmupExtra(steady_median_ns=7, warmup_iterations=3))) == ["warmup_iterations",
                                                                                       "steady_median_ns"]
    assert extra_json(MemsetExtra(memsets=2)) == {"memsets": 2}
    with pytest.raises(TypeError):
        extra_json({"memsets": 2})
    with pytest.raises(TypeError):
        extra_json(MemsetExtra)


def test_every_rule_with_a_typed_extra_constructs_it() -> None:
    """In its own class or a base it shares (the ncu rules build ``NcuExtra`` in ``NcuRule``, and the gain sharing
    rebuilds it with its keys: ``ncu_gains.share_gains``)."""
    rules = {r.id: r for r in default_registry()}
    dicts = sorted(rid for rid, cls in default_registry().finding_extras().items()
                   if not any(f"{cls.__name__}(" in inspect.getsource(base) for base in rules[rid].__mro__
                              if base.__module__.startswith("analysis.")))
    assert dicts == []


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


# Exports whose findings cover the nsys rules with a typed extra that the corpus shows (MEM003 fires on none) and
# six of the ncu rules, which share one type (``NcuRule.extra_type``).
EXPORTS = ["devsync-heavy-report13.sqlite", "openacc-v100.sqlite", "numba-copy-blocked-full.csv",
           "conv2d-result-rules.csv"]
COVERED = {"KRN004", "KRN005", "MEM001", "MEM002", "MEM004", "PHASE002", "SYNC001", "NCU001", "NCU002", "NCU005",
           "NCU006", "NCU007", "NCU010"}


def undeclared(findings: list[FindingResult], registry: Registry) -> set[tuple[str, str]]:
    """(rule id, key) for each key of a finding's extra that neither its rule's ``extra_type`` nor ``EngineExtra``
    declares (rules without a type are open)."""
    types = registry.finding_extras()
    engine = {f.name for f in dataclasses.fields(EngineExtra)}
    return {(f.rule_id, key) for f in findings if f.rule_id in types
            for key in f.extra if key not in engine and key not in {x.name for x in dataclasses.fields(types[f.rule_id])}}


@pytest.fixture(scope="module")
def typed_findings() -> list[FindingResult]:
    return [f for name in EXPORTS for f in analyze([ingested(corpus_file(name))]).findings]


def test_a_rule_s_findings_carry_only_the_keys_its_type_declares(typed_findings) -> None:
    registry = default_registry()
    assert COVERED <= {f.rule_id for f in typed_findings} & set(registry.finding_extras())
    assert undeclared(typed_findings, registry) == set()


def test_a_key_the_type_lacks_is_seen(typed_findings) -> None:
    """The check above can fail: a SYNC001 finding given one key more than ``SyncExtra`` declares is reported."""
    sync = next(f for f in typed_findings if f.rule_id == "SYNC001")
    assert "sync_calls" in {x.name for x in dataclasses.fields(SyncExtra)}
    planted = dataclasses.replace(sync, extra={**sync.extra, "sync_calls_total": 1})
    assert undeclared([planted], default_registry()) == {("SYNC001", "sync_calls_total")}


def test_the_registry_lists_each_rule_s_declared_type() -> None:
    extras = default_registry().finding_extras()
    assert extras["SYNC001"] is SyncExtra and extras["KRN005"] is DominantKernelExtra
    assert all(dataclasses.is_dataclass(cls) for cls in extras.values())
    assert not {"GPU001", "COMM002"} & set(extras)  # rules whose extra is still open declare none
