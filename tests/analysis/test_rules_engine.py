"""Engine-level rule tests on tiny normalized reports: exact impacts for KRN001 and GPU002, gap ownership
precedence, skipped rules, and the rule catalogue's documentation contract."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from analysis.api import analyze
from analysis.diagnosis.rules.base import Registry, Rule, RuleContext, Threshold
from analysis.diagnosis.rules.nsys import NSYS_RULES
from analysis.diagnosis.rules.nsys.gaps import (
    Gap,
    KernelRun,
    LowRegion,
    OwnedTotal,
    OwnedUnit,
    krn_idle_runs,
    low_regions,
    owned,
    owned_top,
    owner_code,
    ownership_params,
)
from analysis.diagnosis.rules.nsys.gpu import IdleGaps
from analysis.diagnosis.rules.registry import default_registry
from analysis.loops import window as win
from analysis.model.trace import Run
from tests.analysis.planting import api, kernel, normalized
from tests.analysis.rule_runner import run_rules

US = 1_000
MS = 1_000_000


def _findings(result, rule):
    return [f for f in result["findings"] if f["rule_id"] == rule]


def test_launch_bound_run_owns_the_small_gaps_between_short_kernels(tmp_path):
    # 30 kernels of 5 us every 20 us: 29 gaps of 15 us inside one run of short kernels.
    ks = [kernel(i * 20 * US, i * 20 * US + 5 * US) for i in range(30)]
    # A long kernel, then a 2 ms gap (GPU001's, not the run's), then 30 more short ones.
    ks.append(kernel(600 * US, 900 * US, name="long"))
    ks += [kernel(2900 * US + i * 20 * US, 2900 * US + i * 20 * US + 5 * US) for i in range(30)]
    path = normalized(tmp_path / "r.duckdb", kernels=ks)
    result = analyze([path]).to_json()
    (krn,) = _findings(result, "KRN001")
    assert krn["impact_ns"] == 2 * 29 * 15 * US
    assert krn["runs"] == 2 and krn["short_kernels"] == 60
    (gpu,) = _findings(result, "GPU001")
    gap_before_long = 600 * US - (29 * 20 * US + 5 * US)
    assert gpu["impact_ns"] == 2000 * US
    assert [e["value_ns"] for e in gpu["evidence"]] == [2000 * US]
    # The 15 us gap before the long kernel lies outside both runs.
    assert gap_before_long == 15 * US
    # Raising the bar for "short" below 5 us dissolves the runs.
    quiet = analyze([path], thresholds={"KRN001.short_kernel_us": 4}).to_json()
    assert _findings(quiet, "KRN001") == []


def owned_total(units: list[OwnedUnit], rule_id: str) -> OwnedTotal:
    """Total length and count of the gaps a rule owns, summed over the units."""
    code = owner_code(default_registry().get(rule_id))
    return OwnedTotal(sum(u.totals[code].ns for u in units), sum(u.totals[code].gaps for u in units))


def test_gap_helpers_return_named_records(tmp_path):
    """The same planted report as above, through the gap helpers: records with named fields (the gaps
    themselves stay arrays on ``OwnedUnit``)."""
    ks = [kernel(i * 20 * US, i * 20 * US + 5 * US) for i in range(30)]
    ks.append(kernel(600 * US, 900 * US, name="long"))
    ks += [kernel(2900 * US + i * 20 * US, 2900 * US + i * 20 * US + 5 * US) for i in range(30)]
    path = normalized(tmp_path / "r.duckdb", kernels=ks)
    with Run.open([path]) as run:
        units = owned(run.traces[0], {}, default_registry().idle_claimers())
        (pid, device), = {(u.unit.pid, u.unit.device) for u in units}
        assert isinstance(units[0].gap_start, np.ndarray) and len(units[0].gap_start) == 2 * 29 + 2
        assert owned_total(units, "GPU001") == (2000 * US, 1) and owned_total(units, "KRN001").gaps == 58
        assert owned_top(units, default_registry().get("GPU001")) == [Gap(pid, device, 900 * US, 2900 * US, 2000 * US)]
        found = krn_idle_runs(units)
        runs = found.top(len(found))
        assert runs == [KernelRun(pid, device, 0, 29 * 20 * US + 5 * US, 30, 30 * 5 * US, 29 * 15 * US),
                        KernelRun(pid, device, 2900 * US, 2900 * US + 29 * 20 * US + 5 * US, 30, 30 * 5 * US,
                                  29 * 15 * US)]
        assert runs[0].idle_ns == runs[0][6]  # still a tuple for code that unpacks it
        regions = low_regions(units, ownership_params({}, default_registry().idle_claimers()))
        assert all(isinstance(r, LowRegion) and r.owned_ns <= r.idle_ns for r in regions)


def test_low_utilization_windows_take_the_small_unowned_gaps(tmp_path):
    # 0-50 ms: 900 us kernels every 1 ms (90% busy). 50-100 ms: 200 us kernels every 1 ms (20% busy).
    ks = [kernel(i * MS, i * MS + 900 * US, name="busy") for i in range(50)]
    ks += [kernel(50 * MS + i * MS, 50 * MS + i * MS + 200 * US, name="sparse") for i in range(50)]
    path = normalized(tmp_path / "r.duckdb", kernels=ks)
    result = analyze([path]).to_json()
    (low,) = _findings(result, "GPU002")
    # Windows are 1 ms (span 99.2 ms / 1000 < 1 ms minimum); the gaps of 800 us that start in the sparse
    # windows are GPU002's; the one 100 us gap between the parts starts in a 90%-busy window.
    assert low["impact_ns"] == 49 * 800 * US
    assert low["evidence"][0]["start_ns"] == 50 * MS
    assert low["evidence"][0]["end_ns"] == 99 * MS and low["evidence"][0]["detail"]["busy_pct"] == 20.0
    assert _findings(result, "GPU001") == [] and _findings(result, "KRN001") == []
    strict = analyze([path], thresholds={"GPU002.max_busy_pct": 10}).to_json()
    assert _findings(strict, "GPU002") == []


def test_a_blocking_sync_owns_only_the_idle_inside_it(tmp_path):
    ks = [kernel(0, 1 * MS), kernel(6 * MS, 7 * MS), kernel(20 * MS, 21 * MS)]
    # The sync waits for the first kernel and returns 10 us after it; the host then idles 5 ms.
    calls = [api(500 * US, 1 * MS + 10 * US, "cudaStreamSynchronize"),
             api(8 * MS, 8 * MS + 5 * US, "cuCtxSynchronize")]  # started after the device drained
    path = normalized(tmp_path / "r.duckdb", kernels=ks, cuda_api=calls)
    result = analyze([path], thresholds={"SYNC001.min_idle_us": 0}).to_json()
    (sync,) = _findings(result, "SYNC001")
    # 10 us inside the first sync, 5 us inside the late one: not the 5 ms after the first returned.
    assert sync["impact_ns"] == 15 * US and sync["idle_gaps"] == 1 and sync["syncs_followed_by_idle"] == 1
    assert sync["sync_calls"] == 2 and sync["sync_calls_per_kernel"] == pytest.approx(2 / 3)
    (gpu,) = _findings(result, "GPU001")
    assert gpu["impact_ns"] == 5 * MS + 13 * MS - 15 * US  # both gaps, less the instants inside syncs
    # By default (100 us) the 15 us inside syncs are not worth a finding.
    assert _findings(analyze([path]).to_json(), "SYNC001") == []


def test_gap_cause_from_the_launching_thread(tmp_path):
    ks = [kernel(0, 1 * MS, tid=11), kernel(10 * MS, 11 * MS, tid=11), kernel(20 * MS, 21 * MS, tid=11)]
    osrt = [{"pid": 1, "tid": 11, "start_ns": 1 * MS, "end_ns": 9 * MS, "name": "poll"},
            # A thread that launches nothing sleeping through the second gap explains nothing.
            {"pid": 1, "tid": 99, "start_ns": 11 * MS, "end_ns": 20 * MS, "name": "pthread_cond_wait"}]
    path = normalized(tmp_path / "r.duckdb", kernels=ks, osrt=osrt)
    result = analyze([path]).to_json()
    (gpu,) = _findings(result, "GPU001")
    causes = {e["start_ns"]: (e["detail"]["cause"], e.get("name")) for e in gpu["evidence"]}
    assert causes == {1 * MS: ("os_runtime", "poll"), 11 * MS: ("no_activity", None)}
    # The 8 ms the launching thread sat in poll are HOST001's (``owns_idle``: the OS call categories); GPU001
    # keeps the rest of that gap (1 ms) and all of the other one (9 ms).
    (host,) = _findings(result, "HOST001")
    assert [(e["start_ns"], e["name"], e["detail"]["tid"]) for e in host["evidence"]] == [(1 * MS, "poll", 11)]
    assert host["impact_ns"] == 8 * MS and host["by_call"] == {"poll": 8 * MS} and host["main_class"] == "poll"
    assert host["by_category"] == {"os_wait": 8 * MS}
    assert gpu["impact_ns"] == 1 * MS + 9 * MS and gpu["causes"]["os_runtime"] == {"count": 1, "total_ns": 1 * MS}


def test_rules_without_their_tables_are_skipped_with_a_reason(tmp_path):
    path = normalized(tmp_path / "r.duckdb", cuda_api=[api(0, 10, "cudaDeviceSynchronize")])
    result = analyze([path]).to_json()
    status = {r["id"]: r for r in result["rules"]}
    assert status["GPU001"]["status"] == "skipped" and "kernels" in status["GPU001"]["reason"]
    assert status["MEM001"]["status"] == "skipped" and "memcpy" in status["MEM001"]["reason"]
    assert result["findings"] == []


class _Probe(Rule):
    """Records the context each of its calls gets."""

    id = "PROBE001"
    name = "probe.context"
    category = "test"
    requires = ("kernels",)
    thresholds = {"limit_us": Threshold(5.0, "us", "a threshold to override")}
    seen: list[tuple[str, RuleContext]] = []

    def check(self, ctx: RuleContext) -> list:
        self.seen.append(("run", ctx))
        return super().check(ctx)

    def check_report(self, trace, ctx: RuleContext) -> list:
        self.seen.append((trace.label, ctx))
        return []


def test_rules_get_an_explicit_context_not_instance_attributes(tmp_path):
    path = normalized(tmp_path / "r.duckdb", kernels=[kernel(0, 10)])
    spec = win.parse("all")
    _Probe.seen = []
    with Run.open([path]) as run:
        _, results = run_rules(run, Registry([IdleGaps, _Probe]), [_Probe],
                               {"PROBE001.limit_us": 7, "GPU001.min_gap_us": 3}, window=spec)
        assert [r.status for r in results] == ["ok"]
        (_, top), (label, per_report) = _Probe.seen
        assert label == run.traces[0].label
        assert top.scope == "run" and per_report.scope == "report"
        for ctx in (top, per_report):
            assert ctx.run is run and ctx.window is spec
            assert ctx.params == {"limit_us": 7.0}
            # every rule's thresholds, the unselected ones too, for the rules that share idle time
            assert ctx.all_params == {"GPU001": {"min_gap_us": 3.0}, "PROBE001": {"limit_us": 7.0}}
    assert not hasattr(_Probe(), "all_params") and not hasattr(Rule, "all_params")
    with pytest.raises(dataclasses.FrozenInstanceError):
        top.scope = "report"  # type: ignore[misc]


def test_unknown_thresholds_are_rejected(tmp_path):
    path = normalized(tmp_path / "r.duckdb", kernels=[kernel(0, 10)])
    with pytest.raises(KeyError):
        analyze([path], thresholds={"GPU001.nope": 1}).to_json()


@pytest.mark.parametrize("rule", NSYS_RULES, ids=[r.id for r in NSYS_RULES])
def test_rule_catalogue_contract(rule):
    assert re.fullmatch(r"(GPU|SYNC|MEM|KRN|COMM|HOST|PHASE)\d{3}", rule.id)
    assert re.fullmatch(r"[a-z]+\.[a-z-]+", rule.name)
    doc = rule.doc()
    for section in ("*Why it matters*", "*How it is detected*", "*Advice*"):
        assert section in doc
    assert rule.summary and rule.requires
    for t in rule.thresholds.values():
        assert t.unit and t.help
    assert rule in list(default_registry())


def test_nsys_rules_are_listed_in_id_order():
    ids = [r.id for r in NSYS_RULES]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_scheduling_traits_live_on_the_rules():
    """The engine decides where a rule runs from the rule's own traits, not from lists kept elsewhere."""
    rules = {r.id: r for r in default_registry()}
    assert {rid for rid, r in rules.items() if r.scope == "run"} == {"COMM002", "COMM005"}
    assert {rid for rid, r in rules.items() if r.scope == "cross_report"} == {"COMM003"}
    assert {rid for rid, r in rules.items() if "ncu" in r.reads_tools} == {"KRN002"}
    assert all(r.scope in ("report", "cross_report", "run") for r in rules.values())
    assert all(r.tool == "nsys" for r in rules.values() if r.scope != "report")


class _RunScoped(_Probe):
    id = "PROBE002"
    name = "probe.run-scoped"
    scope = "run"


def test_one_engine_loop_defers_run_scoped_rules_and_reports_missing_input(tmp_path):
    from analysis.diagnosis.rules.base import evaluate

    path = normalized(tmp_path / "r.duckdb", kernels=[kernel(0, 10)])
    registry = Registry([IdleGaps, _Probe, _RunScoped])
    params = {r.id: registry.resolve_params(r, None) for r in registry}
    with Run.open([path]) as run:
        base = RuleContext(run, all_params=params, claimers=default_registry().idle_claimers())
        _Probe.seen = []
        _, deferred = evaluate(run, list(registry), base, params, defer_run_scope=True)
        assert {r.rule_id: r.status for r in deferred} == {"GPU001": "ok", "PROBE001": "ok", "PROBE002": "run_level"}
        _, direct = evaluate(run, [_RunScoped], base, params)
        assert [r.status for r in direct] == ["ok"]
        # a rule whose input is absent is 'missing' to the engine, 'skipped' to a whole-run caller
        ncu_rule = next(r for r in default_registry() if r.tool == "ncu")
        _, missing = evaluate(run, [ncu_rule], base, {ncu_rule.id: {}})
        assert missing[0].status == "missing" and "ncu" in (missing[0].reason or "")
        _, via_run_rules = run_rules(run, Registry([ncu_rule]))
        assert via_run_rules[0].status == "skipped" and via_run_rules[0].reason == missing[0].reason
