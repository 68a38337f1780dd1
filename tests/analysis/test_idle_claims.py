"""Rules that own idle by what the host was doing (SYNC001, MEM002, MEM006, HOST003, HOST004): a call planted into a real loop's
gap moves exactly its length to its rule, every other owner keeps what it had, and the finding names the call."""

from __future__ import annotations

import pytest

from analysis.api import analyze
from analysis.diagnosis.rules.nsys import NSYS_RULES
from analysis.diagnosis.rules.registry import default_registry
from tests.analysis.planting import copy_export, ingest_copy, ingested
from tests.analysis.rule_cases_idle import DELTA, host004_fires, mem006_fires
from tests.analysis.test_idle_owners import EXPECTED_OWNERS
from tests.analysis.test_rules_corpus import ALL_GAPS, IDLE_OWNERS
from tests.conftest import corpus_file

GAUSSIAN = "gaussian-threadsync.sqlite"


def _impacts(path) -> tuple[dict[str, int], dict]:
    result = analyze([path], thresholds=ALL_GAPS, window="all").to_json()
    return {f["rule_id"]: f["impact_ns"] for f in result["findings"] if f["rule_id"] in IDLE_OWNERS}, result


def test_the_trait_is_on_the_rule_classes():
    owners = {r.id: r.owns_idle for r in default_registry().idle_claimers() if r.owns_idle}
    assert owners == EXPECTED_OWNERS
    assert {r.id: r.idle_phases for r in NSYS_RULES if r.owns_idle}["MEM006"] == ("warmup", "steady")


@pytest.mark.parametrize(("plant", "rule", "name"), [(mem006_fires, "MEM006", "cudaMallocPitch"),
                                                     (host004_fires, "HOST004", "cuModuleLoadData")])
def test_a_planted_call_moves_exactly_its_length(tmp_path, plant, rule, name):
    before, _ = _impacts(ingested(corpus_file(GAUSSIAN)))
    src = copy_export(corpus_file(GAUSSIAN), tmp_path / "a.sqlite")
    assert plant(src, None) == DELTA
    after, result = _impacts(ingest_copy(src, tmp_path / "a.duckdb"))
    assert after.pop(rule) == DELTA and before.pop(rule, 0) == 0
    # The opened gap grew by DELTA and the call covers exactly that: its old owner keeps its old share.
    assert after == before
    (f,) = [f for f in result["findings"] if f["rule_id"] == rule]
    assert name in f["title"] and f["evidence"][0]["name"] == name and f["evidence"][0]["detail"]["calls"] == 1
    assert f["iterations"] > 100 and f["iterations_with"] == 1  # one iteration holds the planted call


def test_allocation_outside_the_loop_is_not_churn():
    """Start-up allocations (the context's creation in the first cudaMalloc) stay out of MEM006."""
    _, result = _impacts(ingested(corpus_file("a30-mig.sqlite")))
    assert [f for f in result["findings"] if f["rule_id"] == "MEM006"] == []
    # A one-shot program's start-up (until its work starts) is PHASE001's: the allocation is named there.
    (phase,) = [f for f in result["findings"] if f["rule_id"] == "PHASE001"]
    assert "cudaMalloc" in phase["message"] and phase["severity"] != "critical"


def test_churn_every_iteration_on_a_real_loop():
    """openacc-report12: the OpenACC runtime allocates around each of its 1,933 kernel launches."""
    result = analyze([ingested(corpus_file("openacc-report12-nometa.sqlite"))]).to_json()
    (f,) = [f for f in result["findings"] if f["rule_id"] == "MEM006"]
    assert f["iterations_with"] >= 0.99 * f["iterations"] > 1000
    assert f"in {f['iterations_with']} of {f['iterations']} iterations" in f["message"] or (
        f["iterations_with"] == f["iterations"] and "every iteration" in f["message"])
    assert f["evidence"][0]["name"].startswith("cu") and f["impact_ns"] == f["idle_ns"]
