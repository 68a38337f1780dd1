"""A job's trend reads a multi-rank run's start-up as wall time: the corpus 2-node pair, stored twice in one job,
shows PHASE001's impact per run and its median as the union of the two ranks' start-ups on the aligned clock
(from each report's session start and start-up phase), not their sum (issue #41, "roll-ups are wall time")."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from analysis.run.runner import analyze_run
from app.services.pages.web_jobs import job_trends
from tests.analysis.planting import ingested as ingested_copy
from tests.conftest import corpus_file
from tests.web import seed

R0, R1 = "nccl-ring-2node-r0-ault43.sqlite", "nccl-ring-2node-r1-ault44.sqlite"


def test_the_job_trend_shows_startup_as_wall_time(client, db, settings, ingested) -> None:
    out = analyze_run([ingested_copy(corpus_file(n)) for n in (R0, R1)], labels=[R0, R1]).to_json()
    spans = []
    for r in out["reports"]:
        (ph,) = [p for p in r["phases"] if p["name"] == "startup"]
        spans.append((r["session_start_utc_ns"] + ph["start_ns"], r["session_start_utc_ns"] + ph["end_ns"]))
    (a0, b0), (a1, b1) = sorted(spans)
    union, summed = max(b0, b1) - a0, (b0 - a0) + (b1 - a1)
    assert union < summed  # the ranks start up together
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    ids = [seed.store_run(db, settings, ingested, [corpus_file(R0), corpus_file(R1)], job="wall-trend",
                          created_at=t0 + timedelta(days=i)) for i in range(2)]
    trends = job_trends(db, "wall-trend")
    assert trends.rule_impact["PHASE001"] == {ids[0]: union, ids[1]: union}
    (top,) = [r for r in trends.top_rules if r.rule_id == "PHASE001"]
    assert top.median_ns == top.latest_ns == union and top.runs == 2
