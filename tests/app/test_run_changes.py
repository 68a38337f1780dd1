"""Changing a run (re-analysis, adding reports, retry) is for its submitter and admins, as deleting is: another
user's write token gets 403 and the run stays as it was."""

from __future__ import annotations

import sqlalchemy as sa

from app.models import Job, Report, Run
from app.services.accounts import tokens
from app.services.accounts.users import create_user


def _bearer(session, name: str, scope: str = "write", user_id: int | None = None) -> dict:
    return {"Authorization": f"Bearer {tokens.create_token(session, name, scope, user_id=user_id).token}"}


def test_another_write_token_cannot_reanalyse_add_reports_or_retry(client, session):
    owner, other, admin = _bearer(session, "owner"), _bearer(session, "other"), _bearer(session, "root", "admin")
    run_id = client.post("/api/v1/runs", headers=owner, json={"job": "j", "window": "all"}).json["id"]

    r = client.post(f"/api/v1/runs/{run_id}/analysis", headers=other, json={"window": "time:0-1"})
    assert (r.status_code, r.json["error"]["code"]) == (403, "FORBIDDEN")
    assert "only they or an admin can re-analyse" in r.json["error"]["message"]
    r = client.put(f"/api/v1/runs/{run_id}/reports/x.sqlite", headers=other, data=b"SQLite format 3\0")
    assert (r.status_code, r.json["error"]["code"]) == (403, "FORBIDDEN")
    r = client.post(f"/api/v1/runs/{run_id}/retry", headers=other)
    assert (r.status_code, r.json["error"]["code"]) == (403, "FORBIDDEN")
    session.expire_all()
    run = session.get(Run, run_id)
    assert run.analysis_window == "all"
    assert session.scalar(sa.select(sa.func.count()).select_from(Report).where(Report.run_id == run_id)) == 0

    # The submitter and an admin may: the answers are the service's own, never 403.
    assert client.post(f"/api/v1/runs/{run_id}/analysis", headers=owner, json={"window": "steady"}).status_code == 202
    assert client.post(f"/api/v1/runs/{run_id}/analysis", headers=admin, json={"window": "all"}).status_code == 202
    assert client.post(f"/api/v1/runs/{run_id}/retry", headers=admin).status_code == 409  # nothing to retry
    # A run that does not exist stays a 404 for anyone.
    r = client.post(f"/api/v1/runs/{run_id + 1000}/analysis", headers=other, json={"window": "all"})
    assert r.status_code == 404


def test_a_users_token_may_change_the_run_that_user_submitted_in_the_browser(client, session):
    alice = create_user(session, "alice", "correct-horse-battery")
    bob = create_user(session, "bob", "correct-horse-battery")
    run = Run(job=Job(name="mine"), tags={}, submitter="alice", submitter_user_id=alice.id, source="web",
              status="ready")
    session.add(run)
    session.commit()
    as_alice = _bearer(session, "alice's", user_id=alice.id)
    as_bob = _bearer(session, "bob's", user_id=bob.id)
    assert client.post(f"/api/v1/runs/{run.id}/retry", headers=as_bob).status_code == 403
    assert client.post(f"/api/v1/runs/{run.id}/retry", headers=as_alice).status_code == 409
