"""Planted-defect variants of real exports: each rule fires with the impact computed from the raw export,
and stays silent on the clean variant (see rule_cases.CASES)."""

from __future__ import annotations

import pytest

from analysis.api import analyze
from tests.analysis.planting import copy_export, ingest_copy
from tests.analysis.rule_cases import CASES, Case
from tests.conftest import corpus_file


def _run(case: Case, tmp_path) -> tuple[int | None, dict]:
    src = copy_export(corpus_file(case.corpus), tmp_path / "a.sqlite")
    peer = copy_export(corpus_file(case.peer), tmp_path / "b.sqlite") if case.peer else None
    expected = case.plant(src, peer)
    outs = []
    for i, path in enumerate([src, peer] if peer else [src]):
        # Unplanted exports (a silent case, a run's untouched peer) reuse the session's ingest of those bytes.
        outs.append(ingest_copy(path, tmp_path / f"{i}.duckdb"))
    # The rules' own semantics over the whole export (the steady-state default has its own tests).
    return expected, analyze(outs, thresholds=case.thresholds, window="all").to_json()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_planted_case(case: Case, tmp_path) -> None:
    expected, result = _run(case, tmp_path)
    assert case.outcome == ("silent" if expected is None else "fires"), "the plant returned what it does not declare"
    status = {r["id"]: r for r in result["rules"]}[case.rule]
    assert status["status"] == "ok", status
    found = [f for f in result["findings"] if f["rule_id"] == case.rule]
    if expected is None:
        assert found == []
        return
    assert len(found) == 1, found
    assert found[0]["impact_ns"] == expected
    assert found[0]["evidence"], "a finding always shows where"
    # Impact share: of the GPU-active span of the report (for a run-level finding, the straggler's).
    shares = [100 * expected / r["breakdown"]["span_ns"] for r in result["reports"]]
    assert any(found[0]["impact_pct"] == pytest.approx(s, abs=1e-3) for s in shares)


def test_sync001_owns_the_idle_inside_syncs_not_the_gaps_after_them(tmp_path) -> None:
    """SYNC001's impact is the idle inside sync calls (brute force on the raw export), not the whole of the gaps
    that opened while a sync ran: the planted sync returned 500 ns after the device drained."""
    case = next(c for c in CASES if c.plant.__name__ == "sync001_fires")
    expected, result = _run(case, tmp_path)
    (sync,) = [f for f in result["findings"] if f["rule_id"] == "SYNC001"]
    assert sync["impact_ns"] == expected and sync["idle_gaps"] >= 1
    assert sync["names"] and sync["names"][0]["ns"] <= sync["impact_ns"]


def test_straggler_is_named_by_rank(tmp_path) -> None:
    case = next(c for c in CASES if c.plant.__name__ == "comm002_fires")
    _, result = _run(case, tmp_path)
    (f,) = [f for f in result["findings"] if f["rule_id"] == "COMM002"]
    assert f["rank"] == 1 and "rank 1" in f["title"]
    assert f["participants"]["rank 0"]["times_last"] == 0
