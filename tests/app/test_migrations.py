"""Alembic is the only way the schema changes: one head, and the migrated schema equals the ORM."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from app import create_app
from app.db import NotMigrated, alembic_config, check_migrated, current_revision, head_revision
from app.models import Base
from app.settings import Settings


def test_exactly_one_head_and_dated_file_names():
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    assert len(script.get_heads()) == 1
    for rev in script.walk_revisions():
        name = rev.path.rsplit("/", 1)[-1]
        assert name[:4].isdigit() and name[4] == "_", name  # YYYY_MM_DD_HHMM-<rev>_<slug>.py


def test_live_schema_equals_models(db):
    with db.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    assert diff == []
    assert current_revision(db.engine) == head_revision()
    check_migrated(db.engine)


def test_sqlite_pragmas_wal_busy_timeout_foreign_keys(migrated):
    engine = migrated("sqlite").engine
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 5000
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1


def test_unmigrated_db_refuses_to_start_and_names_the_command(tmp_path):
    settings = Settings(data_dir=tmp_path, secret_key="x")
    with pytest.raises(NotMigrated, match="goodput migrate"):
        create_app(settings)
    engine = sa.create_engine(settings.resolved_database_url)
    assert current_revision(engine) is None
    engine.dispose()
