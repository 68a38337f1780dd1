"""Auth: bearer tokens (hashed at rest, scoped, revocable, never logged) and sessions with CSRF."""

from __future__ import annotations

import logging

import pytest
import sqlalchemy as sa

from app.auth import login_user
from app.models import ApiToken
from app.services.accounts import sessions, tokens, users
from tests.conftest import corpus_file

NSYS = corpus_file("vecadd-2026.sqlite")


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer gp_not-a-real-token"},
                                     {"Authorization": "Basic dXNlcjpwYXNz"}, {"Authorization": "Bearer "}])
def test_missing_or_invalid_credentials_are_401(client, headers):
    for method, path in (("get", "/api/v1/runs"), ("post", "/api/v1/runs"), ("get", "/api/v1/rules")):
        r = getattr(client, method)(path, headers=headers)
        assert r.status_code == 401, (path, r.json)
        assert r.json["error"]["code"] == "UNAUTHORIZED"
        assert r.headers["WWW-Authenticate"].startswith("Bearer")


def test_revoked_token_is_401(client, session, auth):
    new = tokens.create_token(session, "soon-gone", "write")
    h = {"Authorization": f"Bearer {new.token}"}
    assert client.get("/api/v1/runs", headers=h).status_code == 200
    tokens.revoke_token(session, new.id)
    assert client.get("/api/v1/runs", headers=h).status_code == 401


def test_scopes_read_cannot_upload_or_delete(client, auth):
    r = client.post("/api/v1/runs", headers=auth["read"], json={"job": "j"})
    assert (r.status_code, r.json["error"]["code"]) == (403, "FORBIDDEN")
    run = client.post("/api/v1/runs", headers=auth["write"], json={"job": "j"}).json["id"]
    assert client.put(f"/api/v1/runs/{run}/reports/x.sqlite", headers=auth["read"], data=b"x").status_code == 403
    assert client.delete(f"/api/v1/runs/{run}", headers=auth["read"]).status_code == 403
    assert client.get(f"/api/v1/runs/{run}", headers=auth["read"]).status_code == 200
    assert client.delete(f"/api/v1/runs/{run}", headers=auth["admin"]).status_code == 202


def test_tokens_are_hashed_at_rest_and_never_logged(client, session, caplog):
    caplog.set_level(logging.DEBUG)
    new = tokens.create_token(session, "ci", "write")
    h = {"Authorization": f"Bearer {new.token}"}
    client.post("/api/v1/runs", headers=h, data={"files": [(NSYS.open("rb"), "x.sqlite")]})
    client.get("/api/v1/runs", headers=h)
    client.application.extensions["goodput.token_usage"].flush()
    row = session.scalar(sa.select(ApiToken).where(ApiToken.id == new.id))
    assert row.token_hash == tokens.hash_token(new.token) and len(row.token_hash) == 64
    assert new.token not in {str(v) for v in row.__dict__.values()}
    assert new.token not in caplog.text
    session.refresh(row)
    assert row.last_used_at is not None


def test_session_login_needs_csrf_header_on_unsafe_methods(app, session):
    user = users.create_user(session, "ada", "correct horse battery")
    assert users.authenticate_password(session, "ada", "wrong password") is None
    assert users.authenticate_password(session, "nobody", "whatever!") is None
    assert users.authenticate_password(session, "ada", "correct horse battery").id == user.id
    client = app.test_client()
    with app.test_request_context():
        sid = sessions.start(session, user, 3600)
    with client.session_transaction() as sess:
        sess["sid"] = sid
        sess["csrf_token"] = "the-csrf-token"
    assert client.get("/api/v1/runs").status_code == 200
    r = client.post("/api/v1/runs", json={"job": "j"})
    assert (r.status_code, r.json["error"]["code"]) == (403, "CSRF_FAILED")
    r = client.post("/api/v1/runs", json={"job": "j"}, headers={"X-CSRF-Token": "wrong"})
    assert r.json["error"]["code"] == "CSRF_FAILED"
    r = client.post("/api/v1/runs", json={"job": "j"}, headers={"X-CSRF-Token": "the-csrf-token"})
    assert r.status_code == 202 and r.json["submitter"] == "ada" and r.json["source"] == "web"


def test_login_user_sets_session_and_csrf(app, session):
    user = users.create_user(session, "grace", "another long password", is_admin=True)
    with app.test_request_context():
        from flask import session as flask_session

        csrf = login_user(user)
        assert flask_session["csrf_token"] == csrf and len(csrf) > 20
        assert sessions.user_for(session, flask_session["sid"]).id == user.id


def test_user_validation(session):
    with pytest.raises(users.UserError):
        users.create_user(session, "x", "short")
    users.create_user(session, "dup", "long enough pw")
    with pytest.raises(users.UserError, match="exists"):
        users.create_user(session, "dup", "long enough pw")


def test_a_read_records_the_tokens_last_use(client, session):
    # The request only notes the use; the recorder writes it off the request path (see tests/reliability).
    new = tokens.create_token(session, "reader", "read")
    assert client.get("/api/v1/runs", headers={"Authorization": f"Bearer {new.token}"}).status_code == 200
    session.expire_all()
    assert session.get(ApiToken, new.id).last_used_at is None
    assert client.application.extensions["goodput.token_usage"].flush() == 1
    session.expire_all()
    assert session.get(ApiToken, new.id).last_used_at is not None
