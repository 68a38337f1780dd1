"""A held lock on the metadata DB, on SQLite and PostgreSQL: reads never write and answer
at once; a write that cannot get its lock is a 503 with Retry-After within the lock timeout, never a 500 or a
tied-up web worker; a token's last use is recorded once the lock is gone."""

from __future__ import annotations

import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace

import pytest
import sqlalchemy as sa

from app import create_app
from app.models import ApiToken
from app.models.base import utcnow
from tests.reliability.web.helpers import row_counts, sign_in

# The reads run on an app whose lock wait is far longer than any request takes: a read that waited on the held
# write lock would take all of it, so answering in well under it means it never waited (whatever the machine's
# load). The writes keep the fixtures' short wait, which they give up after: they must answer within it plus a
# margin for a loaded machine, not hang.
PATIENT_LOCK_MS = 12_000
NOT_WAITING_S = 5.0
MARGIN_S = 5.0


@pytest.fixture
def patient_app(settings):
    application = create_app(replace(settings, db_lock_timeout_ms=PATIENT_LOCK_MS))
    application.config["TESTING"] = True
    yield application
    application.extensions["goodput.token_usage"].close()
    application.extensions["goodput.engine"].dispose()


@contextmanager
def held_write_lock(rdb):
    """Another connection holding the database's write lock (SQLite) or exclusive locks on the tables a token's
    last use, a new run and a sign-in write (PostgreSQL: EXCLUSIVE mode still lets readers read)."""
    if rdb.backend == "sqlite":
        con = sqlite3.connect(sa.engine.make_url(rdb.url).database, isolation_level=None)
        con.execute("BEGIN IMMEDIATE")
        con.execute("UPDATE api_tokens SET name = name")
        try:
            yield
        finally:
            con.execute("ROLLBACK")
            con.close()
    else:
        with rdb.engine.connect() as conn:
            conn.execute(sa.text("LOCK TABLE api_tokens, jobs, runs, user_sessions, sign_in_failures IN EXCLUSIVE MODE"))
            try:
                yield
            finally:
                conn.rollback()


def _timed(fn):
    """Run ``fn`` on another thread; a request that hangs fails the test instead of hanging it."""
    with ThreadPoolExecutor(1) as pool:
        start = time.monotonic()
        result = pool.submit(fn).result(timeout=20)
        return result, time.monotonic() - start


def test_reads_answer_under_a_held_write_lock_and_last_use_is_recorded_later(app, patient_app, db, rdb, settings,
                                                                           people):
    client, h = patient_app.test_client(), people["alice"]["h"]
    token_id = people["alice"]["token"].id
    with held_write_lock(rdb):
        for path in ("/api/v1/runs", "/api/v1/jobs", "/api/v1/tokens", "/api/v1/rules"):
            resp, took = _timed(lambda p=path: client.get(p, headers=h))
            assert resp.status_code == 200 and took < NOT_WAITING_S, (path, resp.status_code, took)
        # A pending last use cannot be written now: kept for later, the flush giving up after the lock wait (the
        # app's short one, so that the test does not sit through the patient one).
        recorder = app.extensions["goodput.token_usage"]
        recorder.note(token_id, None, utcnow())
        written, took = _timed(recorder.flush)
        assert written == 0 and took < settings.db_lock_timeout_ms / 1000 + MARGIN_S
    db.expire_all()
    assert db.get(ApiToken, token_id).last_used_at is None  # the reads wrote nothing
    assert patient_app.extensions["goodput.token_usage"].flush() == 1  # the reads' use, noted
    db.expire_all()
    assert db.get(ApiToken, token_id).last_used_at is not None
    assert recorder.flush() == 1  # the use kept from the failed flush (later than the reads')


def test_signed_in_pages_answer_under_a_held_write_lock(patient_app, rdb, people):
    browser = patient_app.test_client()
    assert sign_in(browser, "alice").status_code == 302
    with held_write_lock(rdb):
        for path in ("/", "/tokens", "/upload", "/rules"):
            resp, took = _timed(lambda p=path: browser.get(p))
            assert resp.status_code == 200 and took < NOT_WAITING_S, (path, resp.status_code, took)


@pytest.mark.parametrize("how", ["json", "multipart"])
def test_a_write_under_a_held_lock_is_a_503_with_retry_after(app, db, rdb, settings, people, how):
    client, h = app.test_client(), people["alice"]["h"]
    before = row_counts(db)
    kwargs = {"json": {"job": "busy"}} if how == "json" else {"data": {"job": "busy"}, "content_type": "multipart/form-data"}
    with held_write_lock(rdb):
        resp, took = _timed(lambda: client.post("/api/v1/runs", headers=h, **kwargs))
    assert resp.status_code == 503, resp.get_data(as_text=True)[:300]
    assert resp.json["error"]["code"] == "SERVICE_UNAVAILABLE" and int(resp.headers["Retry-After"]) >= 1
    assert took < settings.db_lock_timeout_ms / 1000 + MARGIN_S  # gave up after the lock wait, not hung
    assert row_counts(db) == before
    # Once the lock is gone the same request succeeds.
    assert client.post("/api/v1/runs", headers=h, **kwargs).status_code == 202


def test_sign_in_under_a_held_lock_is_a_503_page_not_a_500(app, rdb, people):
    browser = app.test_client()
    with held_write_lock(rdb):
        resp, _ = _timed(lambda: sign_in(browser, "alice"))
    assert resp.status_code == 503 and int(resp.headers["Retry-After"]) >= 1
    assert sign_in(browser, "alice").status_code == 302


def test_last_use_is_written_by_the_background_recorder(app, db, people):
    from app.services.accounts.token_usage import FLUSH_INTERVAL_S

    token_id = people["bob"]["token"].id
    assert app.test_client().get("/api/v1/runs", headers=people["bob"]["h"]).status_code == 200
    deadline = time.monotonic() + FLUSH_INTERVAL_S + 5
    while time.monotonic() < deadline:
        db.expire_all()
        if db.get(ApiToken, token_id).last_used_at is not None:
            break
        time.sleep(0.2)
    assert db.get(ApiToken, token_id).last_used_at is not None
