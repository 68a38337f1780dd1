"""The run as a whole, on 16 ranks built from the corpus' 2-node pair (``many_ranks``: even ranks are copies
of r0 on host ault43, odd ranks of r1 on ault44): one finding per rule across the ranks, equal to the
reports' own findings summed by rule; a whole node shifted late (COMM005 names it, its lateness checked
against the kernels' own times); each collective's wait for the last rank vs the transfer after it; the
run step compact at 64 ranks."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from analysis.api import ingest
from analysis.diagnosis.rules.base import RuleContext
from analysis.diagnosis.rules.nsys.nodes import LateNode
from analysis.diagnosis.rules.registry import default_registry
from analysis.model.trace import Run, Trace
from analysis.run.runner import ReportResult, analyze_run, make_context
from tests.analysis.declared_cases import observe, rule_case
from tests.analysis.many_ranks import COLLECTIVES, DELAY_NS, build_rank

N = 16
LATE_HOST = "ault44.cscs.ch"  # r1's host: the odd ranks


def _ingest(folder: Path, late: bool) -> list[Path]:
    outs = []
    for k in range(N):
        src = build_rank(folder / "raw" / f"rank{k:02d}.sqlite", k, N, delayed=late and k % 2 == 1)
        out = folder / f"rank{k:02d}.duckdb"
        ingest(src, out)
        src.unlink()
        outs.append(out)
    return outs


@pytest.fixture(scope="module")
def late_run(tmp_path_factory) -> list[Path]:
    return _ingest(tmp_path_factory.mktemp("late"), late=True)


def _labels(paths: list[Path]) -> list[str]:
    return [p.stem + ".sqlite" for p in paths]


def _arrivals(paths: list[Path]) -> tuple[np.ndarray, list[str]]:
    """Every rank's NCCL kernel starts on one clock (session start + start), straight from its file."""
    rows, hosts = [], []
    for p in paths:
        t = Trace(p, p.name)
        try:
            starts = [r[0] for r in t.sql("SELECT start_ns FROM kernels WHERE category = 'nccl' ORDER BY start_ns")]
            rows.append([int(t.session_start_utc_ns) + s for s in starts])  # Python ints: no overflow
            hosts.append(t.meta["host"])
        finally:
            t.close()
    base = min(min(r) for r in rows)
    return np.array([[x - base for x in r] for r in rows], dtype=np.int64).T, hosts


@rule_case("COMM005", "fires")
def test_a_late_node_is_named_with_its_lateness(late_run) -> None:
    # The whole reports, as the rule on the attached traces below sees them (the default window of this
    # one-shot program is its short work phase, whose span makes a different share).
    out = analyze_run(late_run, labels=_labels(late_run), window="all").to_json()
    observe("COMM005", *next((r["status"], r["findings"]) for r in out["rules"] if r["id"] == "COMM005"))
    (f,) = [f for f in out["findings"] if f["rule_id"] == "COMM005"]
    t, hosts = _arrivals(late_run)
    assert t.shape == (COLLECTIVES, N)
    mine = np.array([h == LATE_HOST for h in hosts])
    gap = t[:, mine].min(axis=1) - t[:, ~mine].max(axis=1)
    assert (gap > 0).all() and f["late_in"] == COLLECTIVES and f["host"] == LATE_HOST
    assert f["impact_ns"] == int(gap.sum())
    per = np.median(t[:, mine] - t[:, ~mine].max(axis=1, keepdims=True), axis=0)
    assert (f["lateness_ns"]["min"], f["lateness_ns"]["max"]) == (int(per.min()), int(per.max()))
    assert f["title"].startswith(f"Late node: the {N // 2} ranks of host {LATE_HOST} arrive ")
    assert "after host ault43.cscs.ch's" in f["title"]
    # r1's ranks already reach the pair's collective 2.4 ms after r0's; the planted delay adds DELAY_NS: above
    # the clocks' uncertainty (1 ms by default), and the finding says so
    assert np.median(gap) > DELAY_NS > 1_000_000
    assert f["clock"]["below_uncertainty"] is False and "above it" in f["message"]
    assert "host's system clock" in f["message"]
    # the facts path equals the rule on the attached traces
    with Run.open(late_run, _labels(late_run)) as run:
        (old,) = LateNode().check(RuleContext(run, params=default_registry().resolve_params(LateNode, None),
                                                 claimers=default_registry().idle_claimers()))
    assert (old.impact_ns, old.title) == (f["impact_ns"], f["title"])
    assert f["impact_pct"] == pytest.approx(old.impact_pct, abs=1e-3) and f["impact_pct"] > 0
    assert f["severity"] == old.severity != "info"  # above the clocks' uncertainty: ranked like COMM002


@rule_case("COMM005", "silent")
def test_a_late_node_below_the_clock_uncertainty_says_so_and_a_higher_bar_is_silent(late_run) -> None:
    out = analyze_run(late_run, labels=_labels(late_run),
                      thresholds={"COMM005.clock_uncertainty_us": 5000}).to_json()
    (f,) = [f for f in out["findings"] if f["rule_id"] == "COMM005"]
    assert f["severity"] == "info" and f["clock"]["below_uncertainty"] is True
    assert "below it: it may be the clocks" in f["message"]
    t, hosts = _arrivals(late_run)
    mine = np.array([h == LATE_HOST for h in hosts])
    worst = int((t[:, mine].min(axis=1) - t[:, ~mine].max(axis=1)).max())
    quiet = analyze_run(late_run, labels=_labels(late_run), rules=["COMM005"],
                        thresholds={"COMM005.min_skew_us": worst / 1000 + 1}).to_json()
    observe("COMM005", *next((r["status"], r["findings"]) for r in quiet["rules"] if r["id"] == "COMM005"))
    assert not [f for f in quiet["findings"] if f["rule_id"] == "COMM005"]


def test_one_finding_per_rule_equals_the_reports_findings_summed(late_run) -> None:
    out = analyze_run(late_run, labels=_labels(late_run)).to_json()
    per_report: dict[tuple, int] = defaultdict(int)
    count: dict[tuple, int] = defaultdict(int)
    for rep in out["reports"]:
        for f in rep["findings"]:
            per_report[(f["rule_id"], f["phase"])] += f["impact_ns"]
            count[(f["rule_id"], f["phase"])] += 1
    rolled = [f for f in out["findings"] if "per_rank" in f and f["rule_id"] not in ("COMM005",)]
    assert {(f["rule_id"], f["phase"]) for f in rolled} == set(per_report)
    assert len(rolled) == len(per_report)  # one entry per rule and scope
    for f in rolled:
        key = (f["rule_id"], f["phase"])
        assert f["impact_summed_ns"] == per_report[key] == sum(r["impact_ns"] for r in f["per_rank"])
        # GPU time adds up over ranks; a start-up is wall time on the aligned clock, once (issue #41)
        if f["impact_basis"] == "wall_time_aligned":
            assert f["rule_id"] == "PHASE001" and max(r["impact_ns"] for r in f["per_rank"]) <= f["impact_ns"] <= per_report[key]
        else:
            assert f["impact_ns"] == per_report[key]
        assert sum(r["findings"] for r in f["per_rank"]) == count[key]
        assert {r["host"] for r in f["per_rank"]} <= {"ault43.cscs.ch", "ault44.cscs.ch"}
        hosts = {h["host"]: h for h in f["per_host"]}
        for h, agg in hosts.items():
            mine = [r for r in f["per_rank"] if r["host"] == h]
            assert agg["impact_ns"] == sum(r["impact_ns"] for r in mine) and agg["ranks"] == len(mine)
            assert agg["of_ranks"] == N // 2
        top = f["per_rank"][0]
        assert f["rank"] == top["rank"] and top["impact_ns"] == max(r["impact_ns"] for r in f["per_rank"])
    exposed = [f for f in rolled if f["rule_id"] == "COMM001"]
    assert exposed and len(exposed[0]["per_rank"]) == N


def test_each_collective_splits_into_wait_and_transfer(late_run) -> None:
    out = analyze_run(late_run, labels=_labels(late_run)).to_json()
    split = out["collectives"]
    t, hosts = _arrivals(late_run)
    ends = []
    for p in late_run:
        tr = Trace(p, p.name)
        try:
            e = [r[0] for r in tr.sql("SELECT end_ns FROM kernels WHERE category = 'nccl' ORDER BY start_ns")]
            ends.append([int(tr.session_start_utc_ns) + x for x in e])
        finally:
            tr.close()
    base = min(min(int(x) for x in row) for row in _arrivals_raw(late_run))
    e = np.array([[x - base for x in r] for r in ends], dtype=np.int64).T
    last = t.max(axis=1, keepdims=True)
    assert split["instances"] == COLLECTIVES
    by_rank = {r["rank"]: r for r in split["per_rank"]}
    for k in range(N):
        assert by_rank[k]["wait_ns"] == int((last[:, 0] - t[:, k]).sum())
        assert by_rank[k]["transfer_ns"] == int(np.maximum(e[:, k] - last[:, 0], 0).sum())
    hosts_out = {h["host"]: h for h in split["per_host"]}
    assert hosts_out[LATE_HOST]["wait_ns"] < hosts_out["ault43.cscs.ch"]["wait_ns"]  # the late node waits least


def _arrivals_raw(paths: list[Path]) -> list[list[int]]:
    rows = []
    for p in paths:
        t = Trace(p, p.name)
        try:
            rows.append([int(t.session_start_utc_ns) + r[0] for r in
                         t.sql("SELECT start_ns FROM kernels WHERE category = 'nccl' ORDER BY start_ns")])
        finally:
            t.close()
    return rows


def test_the_run_step_stays_compact_at_64_ranks(late_run, tmp_path) -> None:
    """Step 1's facts of 64 ranks (copies of the 16 with their own ranks): the run step reads JSON facts
    and parquet collectives only, and what it keeps per rank does not grow with the traces."""
    ctx = make_context()
    from analysis.run.runner import analyze_report, analyze_run_facts

    base = [analyze_report(p, lab, ctx, tmp_path / str(i)) for i, (p, lab) in enumerate(zip(late_run, _labels(late_run),
                                                                                               strict=True))]
    results = []
    for j in range(64):
        r = base[j % N]
        data = json.loads(json.dumps(r.to_json()))
        data["label"] = f"rank{j:02d}.sqlite"
        data["info"]["file"] = data["label"]
        data["facts"]["rank"] = j
        for f in data["findings"]:
            f["report"] = data["label"]
        results.append(ReportResult.from_json(data, r.facts_dir))
    out = analyze_run_facts(results, ctx).to_json()
    assert len(out["collectives"]["per_rank"]) == 64
    size = len(json.dumps({k: v for k, v in out.items() if k != "reports"}))
    assert size < 400_000, size  # the run's own part: one entry per rule, per-rank rows of a few numbers


def test_steps_finished_last_are_summed_by_host() -> None:
    from analysis.diagnosis.rules.nsys.run_nodes import steps_by_host

    steps = {"last": {"rank 0": 1, "rank 1": 5, "rank 2": 0, "rank 3": 4, "b.sqlite": 2}}
    hosts = [(0, "r0", "a"), (1, "r1", "b"), (2, "r2", "a"), (3, "r3", "b"), (None, "b.sqlite", "c")]
    assert steps_by_host(steps, hosts) == [{"host": "b", "ranks": 2, "steps_last": 9},
                                           {"host": "c", "ranks": 1, "steps_last": 2},
                                           {"host": "a", "ranks": 2, "steps_last": 1}]
