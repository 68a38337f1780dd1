"""Web UI fixtures: a migrated SQLite metadata DB, the app, a signed-in client, and runs seeded as the
analysis would store them (from real ingested corpus exports when a test needs a trace)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
import sqlalchemy as sa

from app import create_app
from app.db import make_engine, upgrade
from app.models import Base
from app.services.users import create_user
from app.settings import Settings
from tests.web import seed

PASSWORD = "correct-horse-battery"


@pytest.fixture(scope="session")
def web_db(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('webdb') / 'meta.sqlite'}"
    upgrade(url)
    return url


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
def app(settings, web_db):
    app = create_app(settings)
    app.config["TESTING"] = True
    yield app
    engine = make_engine(web_db)
    with engine.begin() as conn:
        for table in reversed(Base.metadata.sorted_tables):
            conn.execute(table.delete())
    engine.dispose()


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


__all__ = ["PASSWORD", "csrf_of", "page_csrf", "sa", "Path"]
