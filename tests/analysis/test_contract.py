"""The analysis JSON contract: the schema is generated from the result types, the committed copy equals it,
`goodput schema` prints it, real analyses validate and broken ones do not."""

from __future__ import annotations

import copy
import dataclasses
import json
import subprocess
import sys
from typing import NotRequired, TypedDict

import jsonschema_rs
import pytest

from analysis import contract
from analysis.api import analyze, result_schema, result_schema_text
from analysis.diagnosis.rules.registry import finding_extras
from tests.analysis.planting import ingested
from tests.conftest import NCU_FILES, ROOT, corpus_file

VALIDATOR = jsonschema_rs.Draft202012Validator(result_schema())


def valid(doc) -> bool:
    return VALIDATOR.is_valid(json.loads(json.dumps(doc)))


def test_committed_schema_equals_the_generated_one():
    assert contract.SCHEMA_FILE.read_text() == result_schema_text(), (
        "regenerate it: .venv/bin/goodput schema > analysis/result.schema.json")


def test_goodput_schema_prints_it():
    out = subprocess.run([sys.executable, "-m", "goodput_cli.main", "schema"], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout
    assert json.loads(out) == result_schema()
    assert out == result_schema_text()


def test_the_schema_follows_the_types():
    schema = result_schema()
    rule = schema["$defs"]["RuleStatus"]
    assert set(rule["properties"]) == {"id", "status", "reason", "findings"}  # rule_id is written as "id"
    assert rule["additionalProperties"] is False
    finding = schema["$defs"]["FindingResult"]
    # A finding's per-rule extras are flattened into it, so its object stays open; every declared key is typed.
    assert finding["additionalProperties"] is True
    assert all(spec for spec in finding["properties"].values())
    assert finding["properties"]["impact_ns"] == {"type": "integer"}
    assert "rule_id" in finding["required"] and "extra" not in finding["properties"]
    assert schema["properties"]["schema_version"] == {"anyOf": [{"type": "integer"}, {"type": "null"}]}


@pytest.fixture(scope="module")
def two_rank_result():
    pair = [ingested(corpus_file(f"nccl-ring-2node-r{i}-ault4{3 + i}.sqlite")) for i in (0, 1)]
    return analyze(pair).to_json()


def test_real_analyses_validate(two_rank_result):
    assert two_rank_result["schema_version"] == contract.SCHEMA_VERSION
    assert valid(two_rank_result)
    for src in NCU_FILES:
        assert valid(analyze([ingested(src)]).to_json()), src.name


MUTATIONS = [
    ("a finding's impact as text", lambda d: d["findings"][0].__setitem__("impact_ns", "12")),
    ("a finding without its rule", lambda d: d["findings"][0].pop("rule_id")),
    ("an evidence time that is not an integer", lambda d: d["findings"][0]["evidence"][0].__setitem__("start_ns", 1.5)),
    ("a rule status that is a number", lambda d: d["rules"][0].__setitem__("status", 5)),
    ("an unknown top-level key", lambda d: d.__setitem__("surprise", 1)),
    ("a device breakdown without its idle", lambda d: d["reports"][0]["breakdown"]["devices"][0].pop("idle_ns")),
    ("reports that are not a list", lambda d: d.__setitem__("reports", {})),
    ("a rolled-up finding's rank count as text", lambda d: _with(d, "ranks_with_finding").__setitem__(
        "ranks_with_finding", "2")),
    ("a finding's per-rank rows that are not a list", lambda d: _with(d, "per_rank").__setitem__("per_rank", {})),
]


def _with(doc: dict, key: str) -> dict:
    return next(f for f in doc["findings"] if key in f)


@pytest.mark.parametrize(("what", "mutate"), MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_mutated_analyses_fail(two_rank_result, what, mutate):
    doc = copy.deepcopy(two_rank_result)
    assert doc["findings"] and doc["findings"][0]["evidence"]
    mutate(doc)
    assert not valid(doc), what


def test_finding_extras_are_typed_per_rule_where_stable():
    schema = result_schema()
    finding = schema["$defs"]["FindingResult"]
    assert finding["properties"]["impact_per_step_ns"] == {"type": "integer"}  # the engine's keys, on every finding
    cases = {c["if"]["properties"]["rule_id"]["const"]: c["then"] for c in finding["allOf"]}
    assert cases["SYNC001"]["properties"]["sync_calls"] == {"$ref": "#/$defs/SyncExtra/properties/sync_calls"}
    assert cases["NCU001"]["properties"]["speedup_pct"] == {"$ref": "#/$defs/NcuExtra/properties/speedup_pct"}
    # A typed extra is closed: beside the fixed and engine keys, only its type's.
    assert all(c["additionalProperties"] is False for c in cases.values())
    assert schema["$defs"]["SyncExtra"]["additionalProperties"] is False
    assert set(schema["$defs"]["SyncExtra"]["required"]) == {
        "sync_calls", "sync_calls_per_kernel", "sync_call_names", "idle_gaps", "syncs_followed_by_idle", "idle_ns",
        "names"}


@pytest.fixture(scope="module")
def typed_extras_result():
    """An export whose findings include MEM001 and KRN005 (rules with an ``extra_type``)."""
    return analyze([ingested(corpus_file("cupy-power-iteration.sqlite"))]).to_json()


def _rule(doc: dict, rule_id: str) -> dict:
    return next(f for f in doc["findings"] if f["rule_id"] == rule_id)


EXTRA_MUTATIONS = [
    ("MEM001's copies as text", lambda d: _rule(d, "MEM001").__setitem__("copies", "3")),
    ("KRN005 without its ncu command", lambda d: _rule(d, "KRN005").pop("ncu_command")),
    ("KRN005's share as text", lambda d: _rule(d, "KRN005").__setitem__("share_pct", "90%")),
    ("an impact per step as a float", lambda d: _with(d, "impact_per_step_ns").__setitem__("impact_per_step_ns", 1.5)),
    ("MEM001 with a key its type lacks", lambda d: _rule(d, "MEM001").__setitem__("copies_total", 3)),
    ("KRN005 with a key its type lacks", lambda d: _rule(d, "KRN005").__setitem__("surprise", None)),
]


@pytest.mark.parametrize(("what", "mutate"), EXTRA_MUTATIONS, ids=[m[0] for m in EXTRA_MUTATIONS])
def test_mutated_finding_extras_fail(typed_extras_result, what, mutate):
    doc = copy.deepcopy(typed_extras_result)
    assert valid(doc)
    mutate(doc)
    assert not valid(doc), what


def test_mutated_ncu_finding_extras_fail():
    doc = analyze([ingested(corpus_file("pytorch-sgemm-small.csv"))]).to_json()
    assert valid(doc)
    ncu = next(f for f in doc["findings"] if f["rule_id"].startswith("NCU"))
    ncu["speedup_pct"] = "12"
    assert not valid(doc)
    ncu["speedup_pct"] = 12.0
    assert valid(doc)
    ncu["speedup"] = 12.0  # a key NcuExtra does not declare
    assert not valid(doc)


def test_every_rule_s_findings_are_closed(typed_extras_result):
    """Every rule declares a type (``tests/analysis/test_typed_extras.py``), so every finding of a listed rule is
    closed: a GPU001 finding (open before it had ``IdleGapsExtra``) with one key more fails, and a NET finding's
    ``nccl`` must be one of the ``Net*Facts`` shapes, whole and with no other key."""
    schema = result_schema()
    cases = {c["if"]["properties"]["rule_id"]["const"] for c in schema["$defs"]["FindingResult"]["allOf"]}
    assert cases == set(finding_extras()) and {"GPU001", "COMM002", "NET001"} <= cases
    doc = copy.deepcopy(typed_extras_result)
    _rule(doc, "GPU001")["anything"] = 1
    assert not valid(doc)
    net = {**_rule(doc, "GPU001"), "rule_id": "NET004", "nccl": {"pairs": 2, "reasons": ["no GDR line"]}}
    for key in [k for k in net if k not in schema["$defs"]["FindingResult"]["properties"]]:
        net.pop(key)
    doc = copy.deepcopy(typed_extras_result)
    doc["findings"].append(net)
    assert valid(doc)
    for bad in ("2 pairs", {"pairs": 2}, {"pairs": 2, "reasons": [], "nics": 1}, {"pairs": "2", "reasons": []}):
        net["nccl"] = bad  # not an object; a shape's key missing; a key no shape has; a count as text
        assert not valid(doc)


class _Shape(TypedDict):
    """A planted part: one key required, one not."""

    pairs: int
    path: NotRequired[str | None]


def test_a_typeddict_part_is_a_closed_object_with_its_required_keys():
    """A TypedDict in a result type (the NET rules' ``Net*Facts``) is written as built: its schema is closed, its
    ``NotRequired`` keys optional (this module's annotations are postponed, as the result types' are)."""
    defs: dict = {}
    assert contract._schema_of(_Shape, defs) == {"$ref": "#/$defs/_Shape"}
    assert defs["_Shape"] == {"type": "object", "description": "A planted part: one key required, one not.",
                              "properties": {"pairs": {"type": "integer"},
                                             "path": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
                              "required": ["pairs"], "additionalProperties": False}


@dataclasses.dataclass(frozen=True)
class _Inner:
    """A planted part whose keys are written beside its holder's."""

    host: str
    count: int | None = dataclasses.field(default=None, metadata={"json": {"optional": True}})


@dataclasses.dataclass(frozen=True)
class _Holder:
    """A planted holder: its own key, then its part's flat."""

    report: str
    inner: _Inner = dataclasses.field(metadata={"json": {"flat": True}})


def test_a_flat_dataclass_part_puts_its_keys_beside_its_holder_s():
    """A dataclass field marked ``flat`` (the run's network path holds the log's so) adds its keys, and which of them
    are required, to its holder's object, which stays closed."""
    defs: dict = {}
    assert contract._schema_of(_Holder, defs) == {"$ref": "#/$defs/_Holder"}
    assert defs["_Holder"]["properties"] == {"report": {"type": "string"}, "host": {"type": "string"},
                                             "count": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}
    assert defs["_Holder"]["required"] == ["report", "host"]
    assert defs["_Holder"]["additionalProperties"] is False


def test_two_result_types_of_one_name_fail():
    """A ``$defs`` entry is named by its type: a second type of the same name (the nsys ``Nic`` and the NCCL log's
    NIC) would be read as the first, so the schema refuses it."""
    contract._schema_of(_Inner, {})
    other = dataclasses.make_dataclass("_Inner", [("name", str)])
    with pytest.raises(TypeError, match="two result types are named _Inner"):
        contract._schema_of(other, {})
