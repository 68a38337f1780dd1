"""The ingest task leaves the run timeline's overview beside the published report, so no page view
waits for it; the file holds the report's activity, and a re-delivered message does not rebuild it."""

from __future__ import annotations

import duckdb

from analysis.model.trace import Trace
from analysis.views.run_overview import LEVELS, lane_facts, lanes_path, overview_path, read_lanes
from analysis.views.timeline import extent
from app.models import Report
from app.queue import INGEST_TASK
from tests.conftest import corpus_file
from tests.workers.conftest import make_run
from workers.celery_app import make_celery


def test_ingest_builds_the_timeline_overview(session, settings):
    tasks = make_celery(settings).tasks
    path = corpus_file("vecadd-2026.sqlite")
    _run_id, [rid] = make_run(session, settings, [(path.name, path.read_bytes())])
    assert tasks[INGEST_TASK](rid) == "ready"
    session.expire_all()
    trace = settings.data_dir / session.get(Report, rid).trace_path
    ov = overview_path(trace)
    assert ov.is_file() and ov.parent == trace.parent
    con = duckdb.connect()
    expected = duckdb.connect(str(trace), read_only=True).execute(
        "SELECT (SELECT count(*) FROM kernels) + (SELECT count(*) FROM memcpy) + (SELECT count(*) FROM memset)"
    ).fetchone()[0]
    per_level = con.execute("SELECT level, sum(n) FROM read_parquet(?) WHERE kind = 'gpu' GROUP BY level "
                            "ORDER BY level", [str(ov)]).fetchall()
    assert per_level == [(level, expected) for level in range(len(LEVELS))] and expected > 0
    # the lane catalogue's facts and the extent beside it, equal to reading the report
    assert lanes_path(trace).is_file() and lanes_path(trace).parent == trace.parent
    t = Trace(trace, "r")
    try:
        assert read_lanes(trace) == (lane_facts(t), extent(t))
    finally:
        t.close()
    stamp = ov.stat().st_mtime_ns
    assert tasks[INGEST_TASK](rid) == "skipped" and ov.stat().st_mtime_ns == stamp
