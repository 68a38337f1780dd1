"""Fixtures of the web and accounts attacks: the real app on a migrated SQLite and PostgreSQL database each
(every test runs on both), a real Redis broker, and people with tokens of their own."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from app import create_app
from app.services.accounts import tokens, users
from app.settings import Settings
from tests.conftest import redis_db
from tests.dbs import BACKENDS, MigratedDB, per_backend
from tests.reliability.web.helpers import PASSWORD

REDIS_URL = os.environ.get("GOODPUT_TEST_REDIS_URL", "redis://127.0.0.1:6379")


@pytest.fixture(scope="session")
def reliability_dbs(tmp_path_factory):
    yield from per_backend(MigratedDB, tmp_path_factory, "reliability-web")


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture
def rdb(reliability_dbs, backend) -> MigratedDB:
    database = reliability_dbs(backend)
    yield database
    database.empty()


@pytest.fixture
def settings(rdb, tmp_path) -> Settings:
    # Small sign-in limits and a short lock wait keep the attacks quick; the logic is the same.
    return replace(Settings(), data_dir=tmp_path / "data", database_url=rdb.url, secret_key="test-secret",
                   broker_url=f"{REDIS_URL}/{redis_db()}", sign_in_max_failures=5,
                   sign_in_max_failures_per_address=8, sign_in_window_seconds=600, db_lock_timeout_ms=500)


@pytest.fixture
def app(settings):
    application = create_app(settings)
    application.config["TESTING"] = True
    yield application
    application.extensions["goodput.token_usage"].close()
    application.extensions["goodput.engine"].dispose()


@pytest.fixture
def db(app):
    with app.extensions["goodput.sessionmaker"]() as session:
        yield session


@pytest.fixture
def people(db):
    """alice and bob (people), root (an admin); each with a write token of their own."""
    out = {}
    for name, admin in (("alice", False), ("bob", False), ("root", True)):
        user = users.create_user(db, name, PASSWORD, is_admin=admin)
        token = tokens.create_token(db, f"{name}-laptop", "admin" if admin else "write", user_id=user.id)
        out[name] = {"user": user, "token": token, "h": {"Authorization": f"Bearer {token.token}"}}
    return out
