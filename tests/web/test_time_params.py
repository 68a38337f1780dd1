"""Time and bucket parameters of the timeline and trace routes at their extremes, on SQLite and PostgreSQL:
a 400 naming the parameter or a valid answer (complete JSON), never a 500 or a truncated body."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from app.models import Report
from tests.conftest import corpus_file
from tests.web import seed

EXTREMES = ["0", "-1", "1e308", "-1e308", "5e-324", "nan", "inf", "-inf", "1e400", str(2**63), str(2**63 - 1),
            str(-(2**63)), "9" * 10_000, "abc", "1.5", "%ED%A0%80", "%00", "0x10", ""]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"], indirect=True)
def test_timeline_and_trace_parameters_at_their_extremes(client, db, settings, ingested) -> None:
    run_id = seed.store_run(db, settings, ingested, [corpus_file("vecadd-2026.sqlite")])
    report_id = db.scalar(sa.select(Report.id).where(Report.run_id == run_id))
    paths = [f"/runs/{run_id}/timeline.json?start_ns={{v}}", f"/runs/{run_id}/timeline.json?end_ns={{v}}",
             f"/runs/{run_id}/timeline.json?buckets={{v}}",
             f"/runs/{run_id}/timeline.json?start_ns={{v}}&end_ns={2**63 - 1}",
             f"/runs/{run_id}/timeline/select.json?report_id={report_id}&t_ns={{v}}",
             f"/runs/{run_id}/timeline/select.json?report_id={report_id}&t_ns=0&tol_ns={{v}}",
             f"/runs/{run_id}/trace.json?start_ns={{v}}", f"/runs/{run_id}/trace.json?end_ns={{v}}",
             f"/runs/{run_id}/reports/{report_id}/timeline.json?start_ns={{v}}",
             f"/runs/{run_id}/reports/{report_id}/timeline.json?buckets={{v}}",
             f"/runs/{run_id}/reports/{report_id}/trace.json?start_ns={{v}}&end_ns={{v}}"]
    seen = set()
    for path in paths:
        for value in EXTREMES:
            resp = client.get(path.format(v=value))
            assert resp.status_code in (200, 400, 414), (path, value[:20], resp.status_code)
            seen.add(resp.status_code)
            if resp.status_code == 400 and resp.is_json:  # a NUL is refused before routing, as a page
                assert resp.json["error"]["code"] == "VALIDATION_ERROR"
            elif resp.status_code == 200 and "json" in resp.content_type:
                json.loads(resp.get_data())  # complete, whatever the window
    assert 200 in seen and 400 in seen
