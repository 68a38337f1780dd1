"""The typed parts of a report summary (top and dominant kernel, system metrics, NVTX, launches, phases): read
back from the analysis' JSON they write it again byte for byte, the schema checks them, and broken ones fail."""

from __future__ import annotations

import copy
import json

import duckdb
import jsonschema_rs
import pytest

from analysis.api import AnalysisResult, analyze, result_schema
from analysis.result_parts import (
    DominantKernel,
    IdleAnatomy,
    Iterations,
    KernelTotal,
    Launches,
    NcuKernel,
    NvtxSummary,
    PhaseSpan,
    SystemMetrics,
    TopKernel,
)
from tests.analysis.planting import ingested
from tests.conftest import NCU_FILES, corpus_file

VALIDATOR = jsonschema_rs.Draft202012Validator(result_schema())


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
        assert not {"launches", "nvtx", "phases", "top_kernels", "system_metrics", "idle_anatomy"} & set(report.details)
        assert "iterations" not in report.details and isinstance(report.iterations, Iterations)


@pytest.mark.parametrize("src", NCU_FILES, ids=[p.name for p in NCU_FILES])
def test_ncu_results_round_trip(src):
    result = analyze([ingested(src)]).to_json()
    assert_round_trip(result)
    (report,) = AnalysisResult.from_json(result).reports
    # ncu's top kernels have no share of a kernel time, and the report has none of the nsys parts.
    assert report.top_kernels is not None and all(type(k) is KernelTotal for k in report.top_kernels)
    assert report.launches is None and report.phases is None and report.dominant_kernel is None
    assert "dominant_kernel" not in report.to_json() and "kernels" not in report.details
    # Its profiled kernels, typed; the memory story stays an open object.
    assert report.kernels and all(isinstance(k, NcuKernel) for k in report.kernels)
    assert [k.kernel_id for k in report.kernels] == sorted(k.kernel_id for k in report.kernels)
    for k in report.kernels:
        assert {"levels", "bound"} <= set(k.memory)


def test_the_idle_anatomy_is_typed_and_partitions_the_breakdowns_idle(storage_report):
    (report,) = AnalysisResult.from_json(storage_report[0]).reports
    assert report.idle_anatomy and all(isinstance(a, IdleAnatomy) for a in report.idle_anatomy)
    assert "idle_anatomy" not in report.details and report.breakdown is not None
    for a in report.idle_anatomy:
        assert sum(c.ns for c in a.categories) == a.idle_ns
        assert all(t.ns <= c.ns for c in a.categories for t in c.top)
    # Each device's idle over its phases is its breakdown's idle.
    for d in report.breakdown.devices:
        assert sum(a.idle_ns for a in report.idle_anatomy if (a.pid, a.device) == (d.pid, d.device)) == d.idle_ns


def test_the_loop_is_typed_and_its_records_partition_each_step(storage_report):
    (report,) = AnalysisResult.from_json(storage_report[0]).reports
    it = report.iterations
    assert isinstance(it, Iterations) and it.source is not None and it.loops and it.anatomy is not None
    assert it.items and [i.index for i in it.items] == list(range(len(it.items)))
    assert all(a.start_ns < a.end_ns <= b.start_ns for a, b in zip(it.items, it.items[1:], strict=False))
    assert it.anatomy.records_total >= len(it.anatomy.records) > 0
    for r in it.anatomy.records:
        assert r.compute_ns + r.comm_exposed_ns + r.memory_only_ns + r.idle_ns == r.ns
    assert sum(lp.main for lp in it.loops) == 1


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
    ("an idle category's time as text", lambda d: _report(d)["idle_anatomy"][0]["categories"][0].__setitem__("ns", "5")),
    ("an idle anatomy without its phase", lambda d: _report(d)["idle_anatomy"][0].pop("phase")),
    ("an idle name without its calls", lambda d: _idle_name(d).pop("calls")),
    ("idle threads that are not a list", lambda d: _report(d)["idle_anatomy"][0].__setitem__("threads", 7)),
    ("a loop without its signature", lambda d: _report(d)["iterations"]["loops"][0].pop("signature")),
    ("a step record's idle as a float", lambda d: _report(d)["iterations"]["anatomy"]["records"][0].__setitem__(
        "idle_ns", 0.5)),
    ("an unknown loop kind", lambda d: _report(d)["iterations"]["anatomy"].__setitem__("kind", "fast")),
    ("a slow step without its cause", lambda d: _report(d)["iterations"]["anatomy"]["slowest_steps"][0].pop("cause")),
    ("an iteration item with an unknown key", lambda d: _report(d)["iterations"]["items"][0].__setitem__("x", 1)),
    ("the program's shape as a list", lambda d: _report(d)["iterations"].__setitem__("program", [])),
]


def _idle_name(d: dict) -> dict:
    return next(t for a in _report(d)["idle_anatomy"] for c in a["categories"] for t in c["top"])


@pytest.mark.parametrize(("what", "mutate"), MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_mutated_typed_parts_fail_the_schema(storage_report, what, mutate):
    doc = copy.deepcopy(storage_report[0])
    assert VALIDATOR.is_valid(doc)
    report = _report(doc)
    assert report["launches"]["stream"] and report["nvtx"]["top_ranges"] and report["system_metrics"]["storage"]
    mutate(doc)
    assert not VALIDATOR.is_valid(doc), what


def test_the_schema_types_the_parts():
    schema = result_schema()
    props = schema["$defs"]["ReportSummary"]["properties"]
    assert {"launches", "nvtx", "phases", "top_kernels", "dominant_kernel", "system_metrics"} <= set(props)
    assert "iterations" in props
    iterations = schema["$defs"]["Iterations"]
    assert iterations["additionalProperties"] is True  # the NVTX step summary's keys stay open beside the typed
    assert {"loops", "program", "anatomy", "items"} <= set(iterations["properties"])
    assert schema["$defs"]["StepRecord"]["additionalProperties"] is False
    assert {"idle_anatomy", "kernels"} <= set(props)
    kernel = schema["$defs"]["NcuKernel"]["properties"]
    assert kernel["memory"] == {"type": "object", "additionalProperties": {}}  # the memory story: open
    assert schema["$defs"]["IdleCategory"]["additionalProperties"] is False
    assert schema["$defs"]["StorageIO"]["properties"]["kind"] == {
        "enum": ["read", "write", "sync", "async", "copy", "metadata"]}
    assert schema["$defs"]["Launches"]["additionalProperties"] is False


NCU_MUTATIONS = [
    ("an ncu kernel without its id", lambda k: k.pop("kernel_id")),
    ("a launch grid as text", lambda k: k.__setitem__("grid", "1x1x1")),
    ("a cause's impact as a float", lambda k: k["causes"][0].__setitem__("impact_ns", 1.5)),
    ("the memory story as a list", lambda k: k.__setitem__("memory", [])),
]


@pytest.mark.parametrize(("what", "mutate"), NCU_MUTATIONS, ids=[m[0] for m in NCU_MUTATIONS])
def test_mutated_ncu_kernels_fail_the_schema(ncu_result, what, mutate):
    doc = copy.deepcopy(ncu_result)
    assert VALIDATOR.is_valid(doc)
    mutate(next(k for k in _report(doc)["kernels"] if k["causes"]))
    assert not VALIDATOR.is_valid(doc), what


@pytest.fixture(scope="module")
def ncu_result() -> dict:
    return analyze([ingested(corpus_file("pytorch-sgemm-small.csv"))]).to_json()
