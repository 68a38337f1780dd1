"""Stored report summaries read as typed objects: current rows read whole, rows stored by an older version keep
the part that no longer reads as JSON (nothing lost), and rows without a report summary read as None."""

from __future__ import annotations

import copy
import json

import pytest

from analysis.api import ReportSummary, analyze
from app.services.summaries import report_summary
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
