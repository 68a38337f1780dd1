"""The run page's window form and Retry button change the run: only its submitter or an admin may; anyone
else is told so and the run stays as it was."""

from __future__ import annotations

import pytest

from app.models import Job, Run
from app.services.accounts.users import create_user
from tests.web.conftest import PASSWORD, csrf_of


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"], indirect=True)
def test_someone_else_cannot_reanalyse_or_retry_from_the_run_page(app, client, db, user) -> None:
    run = Run(job=Job(name="theirs"), tags={}, submitter="alice", submitter_user_id=user.id, source="web",
              status="ready", analysis_window="all", analysis_status="failed")
    db.add(run)
    db.commit()
    create_user(db, "bob", PASSWORD)
    bob = app.test_client()
    token = csrf_of(bob.get("/login").get_data(as_text=True))
    assert bob.post("/login", data={"username": "bob", "password": PASSWORD, "csrf_token": token}).status_code == 302
    csrf = csrf_of(bob.get("/tokens").get_data(as_text=True))
    for path, form in ((f"/runs/{run.id}/analysis", {"window": "time:0-1"}), (f"/runs/{run.id}/retry", {})):
        resp = bob.post(path, data={**form, "csrf_token": csrf}, follow_redirects=True)
        assert resp.status_code == 200 and "only they or an admin can" in resp.get_data(as_text=True)
    db.expire_all()
    after = db.get(Run, run.id)
    assert (after.analysis_window, after.analysis_status) == ("all", "failed")
