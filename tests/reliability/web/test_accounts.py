"""Accounts under attack, on SQLite and PostgreSQL: sign-out and password changes end
sessions on the server, sign-in is throttled, and tokens and runs belong to people."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from app.models import ApiToken, Run, SignInFailure, UserSession
from app.services.accounts import tokens, users
from goodput_cli.main import main
from tests.conftest import corpus_file
from tests.reliability.web.helpers import csrf_of, sign_in

NSYS = corpus_file("vecadd-2026.sqlite")


def _age(db, model, seconds: float, column: str = "created_at") -> None:
    """Move every row's time back by ``seconds`` (as if that much time had passed)."""
    for row in db.scalars(sa.select(model)):
        setattr(row, column, getattr(row, column) - timedelta(seconds=seconds))
    db.commit()


def _copy_of(app, client):
    """A second browser holding a copy of ``client``'s session cookie (a stolen or copied cookie)."""
    other = app.test_client()
    other.set_cookie("session", client.get_cookie("session").value)
    return other


def _signed_in(client) -> bool:
    return client.get("/").status_code == 200 and client.get("/api/v1/runs").status_code == 200


# --- 2. sessions end on the server --------------------------------------------------------------------

def test_sign_out_ends_the_session_for_every_copy_of_the_cookie(app, db, people):
    browser = app.test_client()
    assert sign_in(browser, "alice").status_code == 302
    thief = _copy_of(app, browser)
    assert _signed_in(browser) and _signed_in(thief)
    token = csrf_of(browser.get("/tokens").get_data(as_text=True))
    assert browser.post("/logout", data={"csrf_token": token}).status_code == 302
    assert thief.get("/").status_code == 302 and thief.get("/").headers["Location"].startswith("/login")
    assert thief.get("/api/v1/runs").status_code == 401
    assert db.scalar(sa.select(sa.func.count()).select_from(UserSession)) == 0


@pytest.mark.parametrize("how", ["service", "cli"])
def test_a_password_change_ends_all_of_the_users_sessions(app, db, settings, people, monkeypatch, how):
    laptop, phone, other = app.test_client(), app.test_client(), app.test_client()
    for client, name in ((laptop, "alice"), (phone, "alice"), (other, "bob")):
        assert sign_in(client, name).status_code == 302
    assert _signed_in(laptop) and _signed_in(phone)
    if how == "service":
        assert users.set_password(db, people["alice"]["user"], "a-brand-new-password") == 2
    else:
        monkeypatch.setenv("GOODPUT_DATABASE_URL", settings.database_url)
        monkeypatch.setenv("GOODPUT_DATA_DIR", str(settings.data_dir))
        monkeypatch.setattr("sys.stdin", __import__("io").StringIO("a-brand-new-password\n"))
        assert main(["user", "password", "alice", "--password-stdin"]) == 0
    assert not _signed_in(laptop) and not _signed_in(phone)
    assert _signed_in(other)  # bob is untouched
    assert sign_in(app.test_client(), "alice").status_code == 401  # the old password is gone
    assert sign_in(app.test_client(), "alice", "a-brand-new-password").status_code == 302


def test_disabling_a_user_ends_sessions_refuses_sign_in_and_tokens(app, db, settings, people, monkeypatch):
    browser = app.test_client()
    assert sign_in(browser, "alice").status_code == 302
    api = app.test_client()
    assert api.get("/api/v1/runs", headers=people["alice"]["h"]).status_code == 200
    monkeypatch.setenv("GOODPUT_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("GOODPUT_DATA_DIR", str(settings.data_dir))
    assert main(["user", "disable", "alice"]) == 0
    assert not _signed_in(browser)
    assert api.get("/api/v1/runs", headers=people["alice"]["h"]).status_code == 401
    assert sign_in(app.test_client(), "alice").status_code == 401
    assert main(["user", "enable", "alice"]) == 0
    assert api.get("/api/v1/runs", headers=people["alice"]["h"]).status_code == 200
    assert sign_in(app.test_client(), "alice").status_code == 302


def test_an_expired_session_is_refused(app, db, people):
    browser = app.test_client()
    assert sign_in(browser, "alice").status_code == 302
    row = db.scalar(sa.select(UserSession))
    _age(db, UserSession, (row.expires_at - row.created_at).total_seconds() + 1, "expires_at")
    assert not _signed_in(browser)


# --- 3. sign-in throttling -------------------------------------------------------------------------------

def _assert_throttled(resp, window_s: int) -> int:
    assert resp.status_code == 429, resp.status_code
    wait = int(resp.headers["Retry-After"])
    assert 0 < wait <= window_s
    assert "Too many failed sign-ins" in resp.get_data(as_text=True)
    return wait


def test_sign_in_is_throttled_per_user(app, db, settings, people):
    limit = settings.sign_in_max_failures
    for i in range(limit):
        assert sign_in(app.test_client(), "alice", "wrong-password", address=f"10.1.0.{i}").status_code == 401
    # The next attempt is refused before the password is checked: even the right one, from anywhere.
    _assert_throttled(sign_in(app.test_client(), "alice", address="10.9.9.9"), settings.sign_in_window_seconds)
    _assert_throttled(sign_in(app.test_client(), "alice", "wrong", address="10.9.9.8"), settings.sign_in_window_seconds)
    assert db.scalar(sa.select(sa.func.count()).select_from(SignInFailure)) == limit  # refusals are not counted
    # Other people are not affected.
    assert sign_in(app.test_client(), "bob", address="10.9.9.9").status_code == 302
    # Once the failures leave the window, alice may sign in again (and that clears her count).
    _age(db, SignInFailure, settings.sign_in_window_seconds)
    assert sign_in(app.test_client(), "alice", address="10.9.9.9").status_code == 302
    assert db.scalar(sa.select(sa.func.count()).select_from(SignInFailure)
                     .where(SignInFailure.username == "alice")) == 0


def test_sign_in_is_throttled_per_client_address(app, db, settings, people):
    limit = settings.sign_in_max_failures_per_address
    names = [f"guess{i}" for i in range(limit)]  # unknown names count as failures too
    for name in names:
        assert sign_in(app.test_client(), name, "x", address="192.0.2.7").status_code == 401
    _assert_throttled(sign_in(app.test_client(), "bob", address="192.0.2.7"), settings.sign_in_window_seconds)
    assert sign_in(app.test_client(), "bob", address="192.0.2.8").status_code == 302


def test_retry_after_counts_down_to_the_oldest_failure_leaving_the_window(app, db, settings, people):
    for _ in range(settings.sign_in_max_failures):
        sign_in(app.test_client(), "alice", "wrong")
    oldest_age = 200
    _age(db, SignInFailure, oldest_age)
    wait = _assert_throttled(sign_in(app.test_client(), "alice"), settings.sign_in_window_seconds)
    assert settings.sign_in_window_seconds - oldest_age - 5 <= wait <= settings.sign_in_window_seconds - oldest_age + 1


# --- 4. ownership of tokens and runs ------------------------------------------------------------------

def test_tokens_are_listed_and_revoked_by_their_owner_or_an_admin(app, db, people):
    api = app.test_client()
    alice, bob, root = people["alice"], people["bob"], people["root"]
    service = tokens.create_token(db, "ci-service", "write")  # no owner: admins only
    names = lambda h: sorted(t["name"] for t in api.get("/api/v1/tokens", headers=h).json["items"])  # noqa: E731
    assert names(alice["h"]) == ["alice-laptop"]
    assert names(root["h"]) == ["alice-laptop", "bob-laptop", "ci-service", "root-laptop"]
    assert names({"Authorization": f"Bearer {service.token}"}) == ["ci-service"]
    for target in (bob["token"].id, service.id, root["token"].id):
        r = api.delete(f"/api/v1/tokens/{target}", headers=alice["h"])
        assert (r.status_code, r.json["error"]["code"]) == (403, "FORBIDDEN")
    assert api.get("/api/v1/runs", headers=bob["h"]).status_code == 200  # still works
    assert api.delete("/api/v1/tokens/999999", headers=alice["h"]).json["error"]["code"] == "TOKEN_NOT_FOUND"
    r = api.delete(f"/api/v1/tokens/{bob['token'].id}", headers=root["h"])
    assert r.status_code == 200 and r.json["revoked_at"] and r.json["owner"] == "bob"
    assert api.get("/api/v1/runs", headers=bob["h"]).status_code == 401
    extra = tokens.create_token(db, "alice-ci", "read", user_id=alice["user"].id)
    assert api.delete(f"/api/v1/tokens/{extra.id}", headers=alice["h"]).status_code == 200


def test_the_tokens_page_shows_and_revokes_only_your_own(app, db, people):
    browser = app.test_client()
    assert sign_in(browser, "alice").status_code == 302
    html = browser.get("/tokens").get_data(as_text=True)
    assert "alice-laptop" in html and "bob-laptop" not in html and "root-laptop" not in html
    r = browser.post("/tokens", data={"action": "revoke", "token_id": str(people["bob"]["token"].id),
                                      "csrf_token": csrf_of(html)})
    assert r.status_code == 403
    db.expire_all()
    assert db.get(ApiToken, people["bob"]["token"].id).revoked_at is None
    created = browser.post("/tokens", data={"action": "create", "name": "mine", "scope": "read",
                                            "csrf_token": csrf_of(html)})
    assert created.status_code == 200
    assert db.scalar(sa.select(ApiToken.user_id).where(ApiToken.name == "mine")) == people["alice"]["user"].id
    admin = app.test_client()
    assert sign_in(admin, "root").status_code == 302
    html = admin.get("/tokens").get_data(as_text=True)
    assert all(n in html for n in ("alice-laptop", "bob-laptop", "root-laptop", "mine"))


def test_runs_are_deleted_by_their_submitter_or_an_admin(app, db, people):
    api = app.test_client()
    alice, bob, root = people["alice"], people["bob"], people["root"]
    run = api.post("/api/v1/runs", headers=alice["h"], data={"files": [(NSYS.open("rb"), "r.sqlite")]}).json
    assert run["submitter"] == "alice"  # the owning person, not the token's name "alice-laptop"
    r = api.delete(f"/api/v1/runs/{run['id']}", headers=bob["h"])
    assert (r.status_code, r.json["error"]["code"]) == (403, "FORBIDDEN")
    assert api.get(f"/api/v1/runs/{run['id']}", headers=bob["h"]).json["status"] != "deleted"
    # Alice in the browser (session + CSRF) deletes what she uploaded with her token.
    browser = app.test_client()
    assert sign_in(browser, "alice").status_code == 302
    with browser.session_transaction() as sess:
        csrf = sess["csrf_token"]
    assert browser.delete(f"/api/v1/runs/{run['id']}", headers={"X-CSRF-Token": csrf}).status_code == 202
    bobs = api.post("/api/v1/runs", headers=bob["h"], json={"job": "b"}).json["id"]
    assert api.delete(f"/api/v1/runs/{bobs}", headers=root["h"]).status_code == 202
    # A service token's run: that token may delete it, another service token may not.
    s1, s2 = tokens.create_token(db, "svc1", "write"), tokens.create_token(db, "svc2", "write")
    svc_run = api.post("/api/v1/runs", headers={"Authorization": f"Bearer {s1.token}"}, json={}).json
    assert svc_run["submitter"] == "svc1"
    assert api.delete(f"/api/v1/runs/{svc_run['id']}", headers={"Authorization": f"Bearer {s2.token}"}
                      ).status_code == 403
    assert api.delete(f"/api/v1/runs/{svc_run['id']}", headers={"Authorization": f"Bearer {s1.token}"}
                      ).status_code == 202
    db.expire_all()
    assert db.scalar(sa.select(sa.func.count()).select_from(Run).where(Run.deleted_at.is_(None))) == 0


def test_parallel_wrong_passwords_count_exactly_the_limit(app, db, settings, people):
    """30 wrong passwords at once: exactly the limit of them are checked (401), every other one is refused
    (429) and the count is the limit, not one more: the check and the count are one step."""
    import threading

    from tests.reliability.web.helpers import csrf_of

    limit = settings.sign_in_max_failures
    clients = []
    for i in range(30):
        c = app.test_client()
        token = csrf_of(c.get("/login", environ_base={"REMOTE_ADDR": f"10.2.{i}.1"}).get_data(as_text=True))
        clients.append((c, token, f"10.2.{i}.1"))
    barrier, statuses = threading.Barrier(len(clients)), []

    def attempt(c, token, address):
        barrier.wait()
        resp = c.post("/login", data={"username": "alice", "password": "wrong", "csrf_token": token},
                      environ_base={"REMOTE_ADDR": address})
        statuses.append(resp.status_code)

    threads = [threading.Thread(target=attempt, args=args) for args in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    # A 503 is the documented answer of an attempt that waited past the short lock timeout of these tests;
    # it checks and counts nothing.
    checked = statuses.count(401)
    assert len(statuses) == len(clients) and set(statuses) <= {401, 429, 503}, statuses
    assert checked == limit or (checked < limit and 503 in statuses), statuses
    # Attempts answered 503 counted nothing: one at a time, exactly the rest of the limit is checked (401),
    # then 429; never an 11th failure.
    c, token, address = clients[0]
    more: list[int] = []
    for _ in range(limit + 1):
        more.append(c.post("/login", data={"username": "alice", "password": "wrong", "csrf_token": token},
                           environ_base={"REMOTE_ADDR": address}).status_code)
        if more[-1] == 429:
            break
    assert more[-1] == 429 and checked + more.count(401) == limit, (statuses, more)
    db.rollback()
    assert db.scalar(sa.select(sa.func.count()).select_from(SignInFailure)) == limit
