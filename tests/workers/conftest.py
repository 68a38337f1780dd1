"""Fixtures for worker and pipeline tests: migrated metadata DBs on SQLite and PostgreSQL, settings, rows."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from app.models import Job, Report, Run
from app.settings import Settings
from tests.dbs import DatabaseFactory, per_backend
from workers.runtime import session_scope


@pytest.fixture(scope="session")
def db_factories(tmp_path_factory):
    yield from per_backend(DatabaseFactory, tmp_path_factory, "db")


@pytest.fixture(params=["sqlite", "postgresql"])
def settings(request, db_factories, tmp_path) -> Settings:
    url = db_factories(request.param).new()
    data = tmp_path / "data"
    data.mkdir()
    return replace(Settings(), data_dir=data, database_url=url, lease_seconds=30, max_attempts=3)


@pytest.fixture
def session(settings):
    with session_scope(settings) as s:
        yield s


def make_run(session, settings: Settings, files: list[tuple[str, bytes]], job: str = "train") -> tuple[int, list[int]]:
    """A run with one queued report per (name, content), stored like an upload; returns ids."""
    import hashlib

    job_row = session.query(Job).filter_by(name=job).one_or_none() or Job(name=job)
    run = Run(job=job_row, tags={}, source="api")
    session.add(run)
    session.flush()
    ids = []
    for rank, (name, content) in enumerate(files):
        sha = hashlib.sha256(content).hexdigest()
        rel = Path("uploads") / sha[:2] / sha
        (settings.data_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (settings.data_dir / rel).write_bytes(content)
        report = Report(run_id=run.id, name=name, kind="nsys", rank=rank, sha256=sha, size_bytes=len(content),
                        upload_path=str(rel))
        session.add(report)
        session.flush()
        ids.append(report.id)
    session.commit()
    return run.id, ids
