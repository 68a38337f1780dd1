"""The run page opens with the run's verdict (stored with the run's summary, also in the API's run summary), its
trace strings escaped."""

from __future__ import annotations

import sqlalchemy as sa

from app.models import RunSummary
from tests.conftest import corpus_file
from tests.web import seed


def test_run_page_opens_with_the_verdict_escaped(client, db, settings, ingested) -> None:
    run_id = seed.store_run(db, settings, ingested, [corpus_file("gaussian-threadsync.sqlite")])
    row = db.scalar(sa.select(RunSummary).where(RunSummary.run_id == run_id, RunSummary.report_id.is_(None)))
    verdict = row.data["verdict"]
    assert verdict["kind"] == "gpu_bound_kernel" and verdict["rule_id"] == "KRN005"
    assert client.get(f"/api/v1/runs/{run_id}/summary").get_json()["verdict"] == verdict  # the API has it too
    html = client.get(f"/runs/{run_id}").get_data(as_text=True)
    assert 'id="verdict"' in html and 'data-kind="gpu_bound_kernel"' in html
    assert html.index('id="verdict"') < html.index("Findings, ranked by impact")
    assert "One kernel is " in html and "--kernel-name Fan2" in html
    # Kernel names are trace strings: a hostile one in the sentence is shown as text.
    row.data = {**row.data, "verdict": {**verdict, "text": f"One kernel is 99% of GPU time: {seed.XSS_SCRIPT}"}}
    db.commit()
    html = client.get(f"/runs/{run_id}").get_data(as_text=True)
    assert seed.XSS_SCRIPT not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
