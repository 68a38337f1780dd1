"""Downloads carry one well-formed content type each (the CSV had its charset twice)."""

from __future__ import annotations

from tests.conftest import corpus_file
from tests.web import seed


def test_findings_downloads_have_one_charset(client, db, settings, ingested) -> None:
    run_id = seed.store_run(db, settings, ingested, [corpus_file("vecadd-2026.sqlite")])
    csv = client.get(f"/runs/{run_id}/findings.csv")
    assert csv.status_code == 200 and csv.headers["Content-Type"] == "text/csv; charset=utf-8"
    assert client.get(f"/runs/{run_id}/findings.json").headers["Content-Type"] == "application/json"
