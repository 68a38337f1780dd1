"""Migration 0002 on a database that already holds runs, on SQLite and PostgreSQL: every
row survives (SQLite rebuilds `runs` and `reports`; with foreign keys on that would cascade-delete), the
downgrade works, and afterwards a purged id is never handed out again."""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa
from alembic import command

from app.db import alembic_config, make_engine, upgrade
from tests.dbs import _admin, _drop, pg_url

ROWS = {
    "jobs": "INSERT INTO jobs (id, name, created_at) VALUES (1, 'j', '2026-01-01')",
    "runs": "INSERT INTO runs (id, job_id, tags, source, status, analysis_attempts, rule_statuses, created_at, "
            "updated_at) VALUES ({id}, 1, '{{}}', 'api', 'queued', 0, '[]', '2026-01-01', '2026-01-01')",
    "reports": "INSERT INTO reports (id, run_id, name, kind, sha256, size_bytes, status, attempts, progress, counts, "
               "info, upload_path, created_at, updated_at) VALUES ({id}, {id}, 'x', 'nsys', 's{id}', 1, 'queued', 0, "
               "'{{}}', '{{}}', '{{}}', 'p', '2026-01-01', '2026-01-01')",
}


@pytest.fixture(params=["sqlite", "postgresql"])
def old_db(request, tmp_path):
    """An empty database at revision 0001 (before this migration)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'old.sqlite'}"
        upgrade(url, "0001")
        yield url
        return
    name = f"goodput_mig_{uuid.uuid4().hex[:10]}"
    with _admin().connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = pg_url(name)
    upgrade(url, "0001")
    yield url
    _drop([name])


def _count(engine, table: str) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(sa.table(table))).scalar_one()


def test_migration_keeps_every_row_and_ids_are_never_reused(old_db):
    engine = make_engine(old_db)
    with engine.begin() as conn:
        conn.execute(sa.text(ROWS["jobs"]))
        for i in (1, 2, 3):
            conn.execute(sa.text(ROWS["runs"].format(id=i)))
            conn.execute(sa.text(ROWS["reports"].format(id=i)))
        if engine.dialect.name == "postgresql":  # rows inserted with explicit ids: move the sequences on
            for table in ("runs", "reports", "jobs"):
                conn.execute(sa.text(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), 3)"))
    engine.dispose()
    upgrade(old_db)
    command.downgrade(alembic_config(old_db), "0001")  # the way back works too, and keeps the rows
    upgrade(old_db)
    engine = make_engine(old_db)
    assert (_count(engine, "runs"), _count(engine, "reports")) == (3, 3)
    # Purge the newest run (the highest id), as purge.run does; the next run must not get its id.
    with engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM reports WHERE run_id = 3"))
        conn.execute(sa.text("DELETE FROM runs WHERE id = 3"))
    with engine.begin() as conn:
        new_run = conn.execute(sa.text(
            "INSERT INTO runs (job_id, tags, source, status, analysis_attempts, rule_statuses, created_at, "
            "updated_at) VALUES (1, '{}', 'api', 'queued', 0, '[]', '2026-01-02', '2026-01-02') RETURNING id"
        )).scalar_one()
        new_report = conn.execute(sa.text(
            "INSERT INTO reports (run_id, name, kind, sha256, size_bytes, status, attempts, progress, counts, info, "
            "upload_path, created_at, updated_at) VALUES (:run, 'y', 'nsys', 'sy', 1, 'queued', 0, '{}', '{}', "
            "'{}', 'p', '2026-01-02', '2026-01-02') RETURNING id"), {"run": new_run}).scalar_one()
    assert new_run == 4 and new_report == 4
    engine.dispose()
