"""Web UI fixtures: a migrated SQLite metadata DB, the app, a signed-in client, and runs seeded as the
analysis would store them (from real ingested corpus exports when a test needs a trace)."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from app import create_app
from app.services.accounts.users import create_user
from app.settings import Settings
from tests.dbs import MigratedDB, per_backend
from tests.web import seed

PASSWORD = "correct-horse-battery"


@pytest.fixture(scope="session")
def migrated_dbs(tmp_path_factory):
    """One migrated throwaway DB per backend (``tests.dbs.MigratedDB``), made on first use."""
    yield from per_backend(MigratedDB, tmp_path_factory, "web")


@pytest.fixture
def backend(request) -> str:
    """SQLite unless a test asks for both with ``@pytest.mark.parametrize("backend", ..., indirect=True)``."""
    return getattr(request, "param", "sqlite")


@pytest.fixture
def web_db(migrated_dbs, backend):
    database = migrated_dbs(backend)
    yield database.url
    database.empty()


@pytest.fixture(scope="session")
def ingested(tmp_path_factory) -> seed.Ingested:
    """Corpus exports ingested once per session (DuckDB files reused by every test that copies them)."""
    return seed.Ingested(tmp_path_factory.mktemp("ingested"))


@pytest.fixture
def settings(web_db, tmp_path) -> Settings:
    data = tmp_path / "data"
    data.mkdir()
    return replace(Settings(), data_dir=data, database_url=web_db, secret_key="test-secret")


@pytest.fixture
def app(settings):
    app = create_app(settings)
    app.config["TESTING"] = True
    yield app
    app.extensions["goodput.token_usage"].close()
    app.extensions["goodput.engine"].dispose()


@pytest.fixture
def db(app):
    session = app.extensions["goodput.sessionmaker"]()
    yield session
    session.close()


@pytest.fixture
def user(db):
    return create_user(db, "alice", PASSWORD)


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert match, "no CSRF field in the form"
    return match.group(1)


@pytest.fixture
def client(app, user):
    """A test client signed in as alice through the login form."""
    c = app.test_client()
    token = csrf_of(c.get("/login").get_data(as_text=True))
    resp = c.post("/login", data={"username": "alice", "password": PASSWORD, "csrf_token": token})
    assert resp.status_code == 302, resp.get_data(as_text=True)
    return c


def page_csrf(client) -> str:
    return csrf_of(client.get("/tokens").get_data(as_text=True))


