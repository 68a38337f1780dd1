"""The typed parts of a report summary (top and dominant kernel, system metrics, NVTX, launches, phases): read
back from the analysis' JSON they write it again byte for byte, the schema checks them, and broken ones fail."""

from __future__ import annotations

import copy
import json

import duckdb
import jsonschema_rs
import pytest

from analysis import contract
from analysis.api import AnalysisResult, analyze
from analysis.result_parts import (
    DominantKernel,
    KernelTotal,
    Launches,
    NvtxSummary,
    PhaseSpan,
    SystemMetrics,
    TopKernel,
)
from tests.analysis.planting import ingested
from tests.conftest import NCU_FILES, corpus_file

VALIDATOR = jsonschema_rs.Draft202012Validator(contract.json_schema())


def assert_round_trip(result: dict) -> None:
    """``from_json(x).to_json() == x`` as JSON text (key order and number forms included)."""
    text = json.dumps(result)
    back = AnalysisResult.from_json(json.loads(text)).to_json()
    assert json.dumps(back) == text


@pytest.fixture(scope="module")
def pair() -> dict:
    files = [ingested(corpus_file(f"nccl-ring-2node-r{i}-ault4{3 + i}.sqlite")) for i in (0, 1)]
    return analyze(files).to_json()


@pytest.fixture(scope="module")
def storage_report() -> tuple[dict, object]:
    """An export with storage I/O and NVTX ranges, its analysis' report and its ingested file."""
    path = ingested(corpus_file("cupy-power-iteration.sqlite"))
    return analyze([path]).to_json(), path


def test_the_two_rank_pair_round_trips_and_is_typed(pair):
    assert_round_trip(pair)
    for report in AnalysisResult.from_json(pair).reports:
        assert isinstance(report.launches, Launches) and isinstance(report.nvtx, NvtxSummary)
        assert report.phases and all(isinstance(p, PhaseSpan) for p in report.phases)
        assert report.top_kernels and all(isinstance(k, TopKernel) for k in report.top_kernels)
        assert isinstance(report.system_metrics, SystemMetrics) and report.system_metrics.nics
        # Typed parts are not duplicated in the open part.
        assert not {"launches", "nvtx", "phases", "top_kernels", "system_metrics"} & set(report.details)
        assert "iterations" in report.details


@pytest.mark.parametrize("src", NCU_FILES, ids=[p.name for p in NCU_FILES])
def test_ncu_results_round_trip(src):
    result = analyze([ingested(src)]).to_json()
    assert_round_trip(result)
    (report,) = AnalysisResult.from_json(result).reports
    # ncu's top kernels have no share of a kernel time, and the report has none of the nsys parts.
    assert report.top_kernels is not None and all(type(k) is KernelTotal for k in report.top_kernels)
    assert report.launches is None and report.phases is None and report.dominant_kernel is None
    assert "dominant_kernel" not in report.to_json() and "kernels" in report.details


def test_typed_parts_equal_direct_queries(storage_report):
    result, path = storage_report
    assert_round_trip(result)
    (report,) = AnalysisResult.from_json(result).reports
    con = duckdb.connect(str(path), read_only=True)
    try:
        name, total = con.execute("SELECT COALESCE(name, short_name), SUM(end_ns - start_ns) FROM kernels "
                                  "GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 1").fetchone()
        writes = con.execute("SELECT COUNT(*) FROM osrt WHERE name IN ('write', 'write64', '__write')").fetchone()[0]
    finally:
        con.close()
    assert report.top_kernels is not None and report.system_metrics is not None
    top = report.top_kernels[0]
    assert (top.name, top.total_ns) == (name, total)
    (write,) = [s for s in report.system_metrics.storage if s.kind == "write"]
    assert write.calls == writes
    assert report.dominant_kernel is None or isinstance(report.dominant_kernel, DominantKernel)


def _report(d: dict) -> dict:
    return d["reports"][0]


MUTATIONS = [
    ("a launch figure as text", lambda d: _report(d)["launches"]["stream"].__setitem__("call_median_ns", "5")),
    ("launches without their reason", lambda d: _report(d)["launches"].pop("reason")),
    ("an unknown storage kind", lambda d: _report(d)["system_metrics"]["storage"][0].__setitem__("kind", "delete")),
    ("an NVTX range without its count", lambda d: _report(d)["nvtx"]["top_ranges"][0].pop("count")),
    ("a phase with an unknown key", lambda d: _report(d)["phases"][0].__setitem__("surprise", 1)),
    ("a top kernel's time as a float", lambda d: _report(d)["top_kernels"][0].__setitem__("total_ns", 1.5)),
    ("phases that are not a list", lambda d: _report(d).__setitem__("phases", {})),
    ("has_nvtx as text", lambda d: _report(d)["nvtx"].__setitem__("has_nvtx", "yes")),
]


@pytest.mark.parametrize(("what", "mutate"), MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_mutated_typed_parts_fail_the_schema(storage_report, what, mutate):
    doc = copy.deepcopy(storage_report[0])
    assert VALIDATOR.is_valid(doc)
    report = _report(doc)
    assert report["launches"]["stream"] and report["nvtx"]["top_ranges"] and report["system_metrics"]["storage"]
    mutate(doc)
    assert not VALIDATOR.is_valid(doc), what


def test_the_schema_types_the_parts():
    schema = contract.json_schema()
    props = schema["$defs"]["ReportSummary"]["properties"]
    assert {"launches", "nvtx", "phases", "top_kernels", "dominant_kernel", "system_metrics"} <= set(props)
    assert "iterations" not in props  # still changing shape: open JSON in details
    assert schema["$defs"]["StorageIO"]["properties"]["kind"] == {
        "enum": ["read", "write", "sync", "async", "copy", "metadata"]}
    assert schema["$defs"]["Launches"]["additionalProperties"] is False
