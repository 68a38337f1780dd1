"""A multi-rank run through the service, end to end with a real worker and Redis, holds its findings as the
CLI's JSON does: one per rule and scope across the ranks with ``per_rank``, each report's own under its
summary; the roll-up is the reports' findings summed by rule and scope, and nothing counts twice (finding
counts, impacts, the job's history)."""

from __future__ import annotations

from collections import defaultdict

import pytest

from tests.analysis.many_ranks import build_run
from tests.e2e.test_many_ranks import _offline, _service_findings

pytestmark = [pytest.mark.slow, pytest.mark.services]

N = 4


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_multi_rank_run_stores_the_cli_roll_up(make_service, tmp_path, backend) -> None:
    files = build_run(tmp_path / "ranks", n=N, delayed=2)
    svc = make_service(backend)
    svc.start_web()
    svc.start_worker(concurrency=2)
    created = svc.upload(files, job="rollup")
    offline = _offline(files)
    run = svc.wait_run(created["id"], timeout=180)
    assert run["status"] == "ready", svc.log_tail()
    findings = _service_findings(svc, run["id"])
    assert findings == offline["findings"]
    rolled = [f for f in findings if "ranks_with_finding" in f]
    assert rolled and all(f["report"] is None and f["ranks_with_finding"] == len(f["per_rank"]) for f in rolled)
    # each report's own findings, as the CLI's reports[].findings, in the report's summary
    summary = svc.get(f"/runs/{run['id']}/summary")
    by_name = {r["id"]: r["name"] for r in run["reports"]}
    own = {by_name[r["report_id"]]: r["data"]["findings"] for r in summary["reports"]}
    assert own == {r["file"]: r["findings"] for r in offline["reports"]}
    assert {by_name[r["report_id"]]: r["finding_count"] for r in summary["reports"]} == {
        name: len(items) for name, items in own.items()}
    # the roll-up is the per-report findings summed by rule and scope, rank by rank
    summed: dict[tuple[str, str | None], int] = defaultdict(int)
    per_rank: dict[tuple[str, str | None], dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for items in own.values():
        for f in items:
            summed[(f["rule_id"], f["phase"])] += f["impact_ns"]
            per_rank[(f["rule_id"], f["phase"])][f["rank"]] += f["impact_ns"]
    # (a start-up's impact is wall time on the aligned clock, issue #41; the sum over ranks stays beside it)
    assert {(f["rule_id"], f["phase"]): f.get("impact_summed_ns", f["impact_ns"]) for f in rolled} == dict(summed)
    for f in rolled:
        assert {p["rank"]: p["impact_ns"] for p in f["per_rank"]} == per_rank[(f["rule_id"], f["phase"])]
        assert sum(h["impact_ns"] for h in f["per_host"]) == f.get("impact_summed_ns", f["impact_ns"])
    # ?rank= lists the findings with a part on that rank (the delayed one's straggler finding among them)
    for k in range(N):
        got = svc.get(f"/runs/{run['id']}/findings?rank={k}&page_size=200")
        assert [(f["rule_id"], f["impact_ns"]) for f in got["items"]] == [
            (f["rule_id"], f["impact_ns"]) for f in findings
            if (any(p["rank"] == k for p in f["per_rank"]) if "per_rank" in f else f["rank"] == k)]
    # counted once: the run's finding count and severities, the run list, the job's history
    assert sum(summary["severity_counts"].values()) == len(findings) == summary["totals"]["finding_count"]
    assert svc.get(f"/runs/{run['id']}")["finding_count"] == len(findings)
    [listed] = svc.get("/runs?job=rollup")["items"]
    assert listed["finding_count"] == len(findings)
    assert listed["top_impact_ns"] == max(f["impact_ns"] for f in findings)
    [point] = svc.get("/jobs/rollup/history")["items"]
    assert point["finding_count"] == len(findings)
    # the run's time is the ranks' time summed once (goodput from the per-report breakdowns)
    spans = [r["data"]["breakdown"]["span_ns"] for r in summary["reports"]]
    assert summary["totals"]["span_ns"] == sum(spans)
    assert summary["totals"]["compute_ns"] == sum(r["data"]["breakdown"]["compute_ns"] for r in summary["reports"])
