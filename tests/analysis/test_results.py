"""The analysis' typed results: ``to_json()`` is the runner's JSON byte for byte, ``from_json`` reads it back."""

from __future__ import annotations

import json

import pytest

from analysis.api import AnalysisResult, FindingResult, ReportSummary, RuleStatus, analyze
from analysis.run.runner import analyze_run
from tests.analysis.nsys_helpers import ingested
from tests.conftest import corpus_file

EXPORTS = ["torchrun-2gpu-nccl-sendrecv-before-cropped.sqlite", "pytorch-dlprof-relu.sqlite", "tensorrt-3090.sqlite"]


def _text(data) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False)


@pytest.mark.parametrize("name", EXPORTS)
def test_analysis_result_is_the_runners_json_and_round_trips(name) -> None:
    path = ingested(corpus_file(name))
    result = analyze([path], labels=[name])
    assert isinstance(result, AnalysisResult)
    again = analyze_run([path], labels=[name])  # the runner's own result, typed: no JSON in between
    assert isinstance(again, AnalysisResult) and _text(again.to_json()) == _text(result.to_json())
    back = AnalysisResult.from_json(json.loads(_text(result.to_json())))
    assert _text(back.to_json()) == _text(result.to_json())
    assert back == AnalysisResult.from_json(json.loads(_text(back.to_json())))


def test_attributes_are_the_json_values() -> None:
    name = EXPORTS[0]
    result = analyze([ingested(corpus_file(name))], labels=[name], window="all")
    data = result.to_json()
    assert result.findings and all(isinstance(f, FindingResult) for f in result.findings)
    for f, j in zip(result.findings, data["findings"], strict=True):
        assert (f.rule_id, f.severity, f.impact_ns, f.impact_pct, f.report, f.phase) == (
            j["rule_id"], j["severity"], j["impact_ns"], j["impact_pct"], j["report"], j["phase"])
        assert [e.to_json() for e in f.evidence] == j["evidence"]
    assert [r.rule_id for r in result.rules] == [r["id"] for r in data["rules"]]
    assert all(isinstance(r, RuleStatus) and r.status in ("ok", "skipped", "error") for r in result.rules)
    (report,) = result.reports
    assert isinstance(report, ReportSummary) and report.file == name and report.tool == "nsys"
    bd = report.breakdown
    assert bd is not None and bd.span_ns == data["reports"][0]["breakdown"]["span_ns"] > 0
    assert bd.compute_ns + bd.comm_exposed_ns + bd.memory_only_ns + bd.idle_ns == bd.span_ns
    assert sum(d.span_ns for d in bd.devices) == bd.span_ns
    assert report.window is not None and report.window.spec == "all"
    assert report.iterations is not None and "iterations" not in report.details
    assert report.iterations.to_json() == data["reports"][0]["iterations"]


def test_a_summary_made_in_code_puts_the_headline_first() -> None:
    s = ReportSummary(file="a.sqlite", tool="nsys", rank=1, details={"counts": {"kernels": 2}})
    assert list(s.to_json()) == ["file", "tool", "rank", "counts"]
    assert ReportSummary.from_json(s.to_json()) == s
