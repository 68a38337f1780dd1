"""The run page names the reports a partial run was analyzed without, escaped."""

from __future__ import annotations

import sqlalchemy as sa

from app.models import RunSummary
from tests.conftest import corpus_file
from tests.web import seed


def test_run_page_names_the_missing_reports_escaped(client, db, settings, ingested) -> None:
    run_id = seed.store_run(db, settings, ingested, [corpus_file("vecadd-2026.sqlite")])
    row = db.scalar(sa.select(RunSummary).where(RunSummary.run_id == run_id, RunSummary.report_id.is_(None)))
    html = client.get(f"/runs/{run_id}").get_data(as_text=True)
    assert 'id="missing-reports"' not in html
    row.data = {**row.data, "missing": [{"report_id": 99, "report": seed.XSS_SCRIPT, "rank": 3,
                                         "error_code": "worker_crashed", "error_message": "died"}],
                "missing_ranks": [3]}
    db.commit()
    html = client.get(f"/runs/{run_id}").get_data(as_text=True)
    assert 'id="missing-reports"' in html and "Analyzed without" in html and "(rank 3)" in html
    assert "Ranks missing from the job: 3" in html and "worker_crashed" in html
    assert seed.XSS_SCRIPT not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
