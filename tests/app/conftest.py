"""App fixtures: one migrated throwaway DB per backend (SQLite, PostgreSQL) per session, tables emptied
after each test, a real Redis broker (one DB number per xdist worker), tokens of each scope."""

from __future__ import annotations

import os
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
import redis
import sqlalchemy as sa

from app import create_app
from app.db import make_engine, upgrade
from app.models import Base
from app.services import tokens
from app.settings import Settings

PG_ADMIN_URL = os.environ.get("GOODPUT_TEST_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("GOODPUT_TEST_REDIS_URL", "redis://127.0.0.1:6379")
BACKENDS = ("sqlite", "postgresql")


def _redis_db() -> int:
    # Separate Redis databases per xdist worker so queue lengths seen by one test are its own.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return 8 + int(worker[2:] or 0) % 8


class MigratedDB:
    """A throwaway database of one backend, migrated once with Alembic, dropped at the end."""

    def __init__(self, backend: str, workdir: Path) -> None:
        self.backend = backend
        if backend == "sqlite":
            self.url = f"sqlite:///{workdir / 'meta.sqlite'}"
        else:
            self.name = f"goodput_app_{uuid.uuid4().hex[:10]}"
            with sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT").connect() as conn:
                conn.execute(sa.text(f'CREATE DATABASE "{self.name}"'))
            self.url = sa.engine.make_url(PG_ADMIN_URL).set(database=self.name).render_as_string(False)
        upgrade(self.url)
        self.engine = make_engine(self.url)

    def empty(self) -> None:
        """Delete every row (children first), so each test starts from empty tables."""
        with self.engine.begin() as conn:
            if self.backend == "postgresql":
                names = ", ".join(t.name for t in Base.metadata.sorted_tables)
                conn.execute(sa.text(f"TRUNCATE {names} RESTART IDENTITY CASCADE"))
            else:
                for table in reversed(Base.metadata.sorted_tables):
                    conn.execute(table.delete())

    def close(self) -> None:
        self.engine.dispose()
        if self.backend == "postgresql":
            with sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT").connect() as conn:
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)'))


@pytest.fixture(scope="session")
def migrated(tmp_path_factory):
    made: dict[str, MigratedDB] = {}

    def get(backend: str) -> MigratedDB:
        if backend not in made:
            made[backend] = MigratedDB(backend, tmp_path_factory.mktemp(f"app-{backend}"))
        return made[backend]

    yield get
    for db in made.values():
        db.close()


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture
def db(migrated, backend) -> MigratedDB:
    database = migrated(backend)
    yield database
    database.empty()


@pytest.fixture
def broker():
    client = redis.Redis.from_url(f"{REDIS_URL}/{_redis_db()}")
    client.delete("ingest", "light")
    yield client
    client.delete("ingest", "light")
    client.close()


@pytest.fixture
def settings(db, broker, tmp_path) -> Settings:
    return replace(Settings(), data_dir=tmp_path / "data", database_url=db.url,
                   broker_url=f"{REDIS_URL}/{_redis_db()}", secret_key="test-secret")


@pytest.fixture
def app(settings):
    application = create_app(settings)
    application.config["TESTING"] = True
    yield application
    application.extensions["goodput.engine"].dispose()


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def session(app):
    factory = app.extensions["goodput.sessionmaker"]
    with factory() as s:
        yield s


@pytest.fixture
def auth(session):
    """``auth['read'|'write'|'admin']``: Authorization headers of fresh tokens of each scope."""
    return {scope: {"Authorization": f"Bearer {tokens.create_token(session, f't-{scope}', scope).token}"}
            for scope in ("read", "write", "admin")}


def queued(broker, queue: str = "ingest") -> list[dict]:
    """The Celery messages waiting in a Redis queue (task name and args), oldest first."""
    import base64
    import json

    out = []
    for raw in reversed(broker.lrange(queue, 0, -1)):
        msg = json.loads(raw)
        body = json.loads(base64.b64decode(msg["body"]))
        out.append({"task": msg["headers"]["task"], "args": body[0]})
    return out


def process_run(settings, session, run_id: int) -> dict:
    """Do in-process what the workers do for a run (the real pipeline and analysis functions, no Celery):
    ingest each queued report, then analyze the run. Returns ``analysis.api.analyze``'s result."""
    from analysis.api import analyze, ingest
    from app.models import Report
    from app.services import pipeline

    owner = "tests-app"
    ids = session.scalars(sa.select(Report.id).where(Report.run_id == run_id, Report.status == "queued")
                          .order_by(Report.id)).all()
    for report_id in ids:
        claim = pipeline.claim_report(session, report_id, owner, 300)
        out = pipeline.trace_path_for(settings, report_id)
        out.parent.mkdir(parents=True, exist_ok=True)
        res = ingest(settings.data_dir / claim.upload_path, out)
        pipeline.finish_ingest(session, report_id, owner, out, res.tool, res.info, settings.data_dir)
    inputs = pipeline.claim_run_analysis(session, run_id, owner, 300)
    assert inputs is not None
    result = analyze([settings.data_dir / p for p in inputs.paths], labels=inputs.labels)
    assert pipeline.finish_run_analysis(session, run_id, owner, inputs, result)
    session.expire_all()
    return result
