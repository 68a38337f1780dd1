"""App fixtures: one migrated throwaway DB per backend (SQLite, PostgreSQL) per session, tables emptied
after each test, a real Redis broker (one DB number per xdist worker), tokens of each scope."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
import redis
import sqlalchemy as sa

from app import create_app
from app.services.accounts import tokens
from app.services.storage import storage_for
from app.settings import Settings
from tests.conftest import redis_db
from tests.dbs import BACKENDS, MigratedDB, per_backend

REDIS_URL = os.environ.get("GOODPUT_TEST_REDIS_URL", "redis://127.0.0.1:6379")


@pytest.fixture(scope="session")
def migrated(tmp_path_factory):
    yield from per_backend(MigratedDB, tmp_path_factory, "app")


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
    client = redis.Redis.from_url(f"{REDIS_URL}/{redis_db()}")
    client.delete("ingest", "light")
    yield client
    client.delete("ingest", "light")
    client.close()


@pytest.fixture
def settings(db, broker, tmp_path) -> Settings:
    return replace(Settings(), data_dir=tmp_path / "data", database_url=db.url,
                   broker_url=f"{REDIS_URL}/{redis_db()}", secret_key="test-secret")


@pytest.fixture
def app(settings):
    application = create_app(settings)
    application.config["TESTING"] = True
    yield application
    application.extensions["goodput.token_usage"].close()
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
    ingest each queued report, then analyze the run. Returns ``analysis.api.analyze``'s result as JSON."""
    from analysis.api import analyze, ingest
    from app.models import Report
    from app.services.jobs import pipeline

    owner = "tests-app"
    ids = session.scalars(sa.select(Report.id).where(Report.run_id == run_id, Report.status == "queued")
                          .order_by(Report.id)).all()
    for report_id in ids:
        claim = pipeline.claim_report(session, report_id, owner, 300)
        out = pipeline.trace_path_for(settings, report_id)
        out.parent.mkdir(parents=True, exist_ok=True)
        res = ingest(settings.data_dir / claim.upload_path, out)
        pipeline.finish_ingest(session, report_id, owner, out, res.tool, res.info, storage_for(settings))
    inputs = pipeline.claim_run_analysis(session, run_id, owner, 300)
    assert inputs is not None
    result = analyze([settings.data_dir / p for p in inputs.paths], labels=inputs.labels, window=inputs.window,
                     thresholds=inputs.thresholds or None)
    assert pipeline.finish_run_analysis(session, run_id, owner, inputs, result)
    session.expire_all()
    return result.to_json()
