"""The run page's Retry button: shown for transient failures, CSRF-protected, re-queues like the API."""

from __future__ import annotations

import hashlib

import sqlalchemy as sa

from app.models import Job, Report, Run
from tests.web.conftest import csrf_of


def _failed_run(db, settings, code: str, owner_id: int) -> tuple[int, int]:
    content = b"SQLite format 3\x00 the stored export"
    sha = hashlib.sha256(content).hexdigest()
    rel = f"uploads/{sha[:2]}/{sha}.sqlite"
    (settings.data_dir / rel).parent.mkdir(parents=True, exist_ok=True)
    (settings.data_dir / rel).write_bytes(content)
    run = Run(job=Job(name=f"j-{code}"), tags={}, source="web", submitter_user_id=owner_id, status="failed",
              analysis_status="failed",
              error="no report of this run could be ingested; see each report's error")
    db.add(run)
    db.flush()
    report = Report(run_id=run.id, name="a.sqlite", kind="nsys", sha256=sha, size_bytes=len(content),
                    status="failed", error_code=code, error_message="only 1 bytes free", attempts=1,
                    upload_path=rel)
    db.add(report)
    db.commit()
    return run.id, report.id


def test_retry_button_requeues_a_report_that_ran_out_of_space(client, db, settings, user) -> None:
    run_id, report_id = _failed_run(db, settings, "no_space", user.id)
    html = client.get(f"/runs/{run_id}").get_data(as_text=True)
    assert 'id="retry-run"' in html
    assert client.post(f"/runs/{run_id}/retry").status_code == 400  # no CSRF token
    resp = client.post(f"/runs/{run_id}/retry", data={"csrf_token": csrf_of(html)})
    assert resp.status_code == 302 and resp.headers["Location"].endswith(f"/runs/{run_id}")
    db.expire_all()
    report = db.get(Report, report_id)
    assert (report.status, report.attempts, report.error_code) == ("queued", 0, None)
    page = client.get(f"/runs/{run_id}").get_data(as_text=True)
    assert "Retrying 1 report(s)." in page and 'id="retry-run"' not in page
    assert db.scalar(sa.select(Run.status).where(Run.id == run_id)) == "queued"


def test_no_retry_button_for_a_file_that_is_not_an_export(client, db, settings, user) -> None:
    run_id, report_id = _failed_run(db, settings, "not_nsys_export", user.id)
    html = client.get(f"/runs/{run_id}").get_data(as_text=True)
    assert 'id="retry-run"' not in html
    resp = client.post(f"/runs/{run_id}/retry", data={"csrf_token": csrf_of(html)}, follow_redirects=True)
    assert "nothing to retry" in resp.get_data(as_text=True)
    db.expire_all()
    assert db.get(Report, report_id).status == "failed"


def test_no_retry_button_for_someone_elses_run(app, client, db, settings, user) -> None:
    from app.services.accounts.users import create_user
    from tests.web.conftest import PASSWORD

    other = create_user(db, "carol", PASSWORD)
    run_id, _ = _failed_run(db, settings, "no_space", other.id)
    assert 'id="retry-run"' not in client.get(f"/runs/{run_id}").get_data(as_text=True)
