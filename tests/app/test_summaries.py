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
    assert results.summary(None) is None and results.summary(8) is None
    # A verdict stored with other keys reads as none rather than failing the page.
    odd = results_of([RunSummary(run_id=1, report_id=None, data={"verdict": {"kind": "x"}})])
    assert odd.run.verdict is None and odd.analyzed


@pytest.fixture(scope="module")
def ncu_stored() -> dict:
    """An ncu report's summary as the metadata DB keeps it: its kernels compacted per configuration."""
    from app.services.jobs.ncu_summary import compact_report

    result = analyze([ingested(corpus_file("pytorch-sgemm-small.csv"))]).to_json()
    return compact_report(json.loads(json.dumps(result["reports"][0])))


def test_an_ncu_row_reads_its_kernels_and_headline_typed(ncu_stored):
    """Each stored kernel configuration becomes the typed ``NcuKernel`` of its longest launch with the launch
    count and profiled time the metadata DB adds; the headline is the stored numbers."""
    from app.models import RunSummary
    from app.services.reads.summaries import to_report_entity

    entity = to_report_entity(RunSummary(run_id=1, report_id=5, data=ncu_stored))
    stored = ncu_stored["kernels"]
    assert stored and len(entity.kernels) == len(stored)
    for typed, raw in zip(entity.kernels, stored, strict=True):
        assert {**typed.kernel.to_json(), "launches": typed.launches, "profiled_ns": typed.profiled_ns} == raw
    assert sum(k.launches or 0 for k in entity.kernels) == ncu_stored["kernels_total"]
    assert entity.ncu is not None and entity.ncu.gpu_time_ns == ncu_stored["gpu_time_ns"]
    assert entity.ncu.estimated_saving_ns == ncu_stored["estimated_saving"]["ns"]
    # Kernels that no longer read as ``NcuKernel`` are left out, as a missing key would be.
    old = {**ncu_stored, "kernels": [{k: v for k, v in raw.items() if k != "causes"} for raw in stored]}
    assert to_report_entity(RunSummary(run_id=1, report_id=5, data=old)).kernels == ()


def test_a_ranks_own_findings_read_typed():
    """A multi-rank run keeps each report's own findings in its summary: they read as ``FindingResult``s that
    write back the JSON as stored; one stored with other keys is left out."""
    from app.models import RunSummary
    from app.services.reads.summaries import to_report_entity

    result = analyze([ingested(corpus_file(f"nccl-ring-2node-r{i}-ault4{3 + i}.sqlite")) for i in (0, 1)]).to_json()
    data = json.loads(json.dumps(result["reports"][0]))
    assert data["findings"]
    entity = to_report_entity(RunSummary(run_id=1, report_id=3, data=data))
    assert [f.to_json() for f in entity.findings] == data["findings"]
    odd = {**data, "findings": [{"rule_id": "X"}, *data["findings"]]}
    assert len(to_report_entity(RunSummary(run_id=1, report_id=3, data=odd)).findings) == len(data["findings"])
