"""PHASE001 and PHASE002, each where it fires and where it stays silent: the start-up and warm-up of loops
planted in a real export (exact costs from the plant) and real corpus exports with and without them."""

from __future__ import annotations

from analysis.api import analyze
from tests.analysis.declared_cases import observe_result, rule_case
from tests.analysis.planting import ingested
from tests.analysis.test_phases import MS, _analyzed
from tests.conftest import corpus_file


@rule_case("PHASE001", "fires")
def test_startup_before_a_planted_loop_is_costed(tmp_path):
    facts, result = _analyzed(tmp_path, [5 * MS] * 30, rules=["PHASE001"])
    observe_result(result)
    (f,) = result["findings"]
    assert f["impact_ns"] == facts["t0"] - facts["first"] and f["phase"] == "startup"


@rule_case("PHASE001", "silent")
def test_one_shot_program_with_a_short_setup_has_no_startup_cost():
    # The TensorRT export is one inference pass: no loop, so start-up / work / teardown. Its set-up before
    # the first GPU operation is 0.4 ms (the labels: 0.378 ms), under PHASE001's 1 ms; the 479 ms of
    # cuModuleUnload after the last GPU work are teardown, never the analysed work.
    result = analyze([ingested(corpus_file("tensorrt-3090.sqlite"))], rules=["PHASE001"]).to_json()
    observe_result(result)
    phases = {p["name"]: p for p in result["reports"][0]["phases"]}
    assert list(phases) == ["startup", "work", "teardown"]
    assert phases["startup"]["end_ns"] - phases["startup"]["start_ns"] < 1_000_000
    assert "cuModuleUnload" not in phases["work"]["reason"] and result["reports"][0]["window"]["phase"] == "work"


@rule_case("PHASE002", "fires")
def test_slow_leading_iterations_are_warmup(tmp_path):
    p = 5 * MS
    _, result = _analyzed(tmp_path, [3 * p, 3 * p] + [p] * 28, rules=["PHASE002"])
    observe_result(result)
    (f,) = result["findings"]
    assert f["impact_ns"] == 2 * (3 * p - p) and f["phase"] == "warmup"


@rule_case("PHASE002", "silent")
def test_a_loop_at_pace_from_its_first_iteration_has_no_warmup(tmp_path):
    _, result = _analyzed(tmp_path, [5 * MS] * 30, rules=["PHASE002"])
    observe_result(result)
    assert "warmup" not in [p["name"] for p in result["reports"][0]["phases"]]
