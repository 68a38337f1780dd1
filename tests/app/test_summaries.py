"""Stored report summaries read as typed objects: current rows read whole, rows stored by an older version keep
the part that no longer reads as JSON (nothing lost), and rows without a report summary read as None."""

from __future__ import annotations

import copy
import json

import pytest

from analysis.api import ReportSummary, analyze
from app.services.reads.summaries import report_summary
from tests.analysis.planting import ingested
from tests.conftest import corpus_file


@pytest.fixture(scope="module")
def stored() -> dict:
    result = analyze([ingested(corpus_file("cupy-power-iteration.sqlite"))]).to_json()
    return json.loads(json.dumps(result["reports"][0]))


def test_a_current_row_reads_typed(stored):
    summary = report_summary(stored)
    assert summary is not None and summary.system_metrics is not None and summary.phases
    assert [s.kind for s in summary.system_metrics.storage] == [s["kind"] for s in stored["system_metrics"]["storage"]]
    assert summary.to_json() == stored


def test_an_older_part_stays_json_and_writes_back_unchanged(stored):
    old = copy.deepcopy(stored)
    del old["system_metrics"]["storage"]  # stored before storage I/O was summarised
    with pytest.raises(KeyError):
        ReportSummary.from_json(old)
    summary = report_summary(old)
    assert summary is not None and summary.system_metrics is None
    assert summary.details["system_metrics"] == old["system_metrics"] and summary.phases
    assert json.dumps(summary.to_json()) == json.dumps(old)


@pytest.mark.parametrize("data", [None, {}, {"reports": []}, {"file": 3, "tool": "nsys"}, []])
def test_rows_without_a_report_summary_read_as_none(data):
    assert report_summary(data) is None


def test_the_read_store_makes_rows_entities(stored):
    """Report rows become typed summaries beside their JSON as stored; the run row's verdict becomes a Verdict."""
    from analysis.api import Verdict
    from app.models import RunSummary
    from app.services.reads.summaries import results_of

    verdict = {"kind": "host_bound", "text": "t", "impact_ns": 5, "next_step": "n", "rule_id": "GPU001"}
    rows = [RunSummary(run_id=1, report_id=None, data={"reports": [stored], "verdict": verdict,
                                                       "missing_ranks": [3], "network": None}, span_ns=10),
            RunSummary(run_id=1, report_id=7, data=stored, span_ns=10, idle_ns=4)]
    results = results_of(rows)
    assert results.analyzed and list(results.reports) == [7]
    report = results.reports[7]
    assert report.summary is not None and report.summary.to_json() == stored and report.data is stored
    assert report.to_api()["data"] == stored and report.to_api()["idle_ns"] == 4
    assert results.run.verdict == Verdict.from_json(verdict) and results.run.missing_ranks == (3,)
    assert results.run.network is None and results.run.headline.span_ns == 10
    assert results.summary(None) is None and results.data(8) == {}
    # A verdict stored with other keys reads as none rather than failing the page.
    odd = results_of([RunSummary(run_id=1, report_id=None, data={"verdict": {"kind": "x"}})])
    assert odd.run.verdict is None and odd.analyzed
