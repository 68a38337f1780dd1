"""Fresh, migrated metadata databases for worker tests: SQLite files and PostgreSQL databases.

Migrations run once per session into a template; each test gets a copy (a file copy for SQLite,
``CREATE DATABASE ... TEMPLATE`` for PostgreSQL), so tests that scan every row (reconcile) stay isolated.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import sqlalchemy as sa

from app.db import upgrade

PG_ADMIN_URL = os.environ.get("GOODPUT_TEST_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


def _pg_url(name: str) -> str:
    return sa.engine.make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)


def _admin() -> sa.Engine:
    return sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")


class DatabaseFactory:
    """Hands out migrated databases of one backend and drops them at the end of the session."""

    def __init__(self, backend: str, workdir: Path) -> None:
        self.backend = backend
        self.workdir = workdir
        self.created: list[str] = []
        tag = uuid.uuid4().hex[:8]
        if backend == "sqlite":
            self.template = workdir / f"template-{tag}.sqlite"
            upgrade(f"sqlite:///{self.template}")
        else:
            self.template = f"goodput_tpl_{tag}"
            with _admin().connect() as conn:
                conn.execute(sa.text(f'CREATE DATABASE "{self.template}"'))
            self.created.append(self.template)
            upgrade(_pg_url(self.template))
            sa.engine.create_engine(_pg_url(self.template)).dispose()

    def new(self) -> str:
        """A URL of a new migrated database."""
        name = uuid.uuid4().hex[:10]
        if self.backend == "sqlite":
            path = self.workdir / f"db-{name}.sqlite"
            shutil.copyfile(self.template, path)
            return f"sqlite:///{path}"
        db = f"goodput_t_{name}"
        with _admin().connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{db}" TEMPLATE "{self.template}"'))
        self.created.append(db)
        return _pg_url(db)

    def close(self) -> None:
        if self.backend != "postgresql":
            return
        with _admin().connect() as conn:
            for db in reversed(self.created):
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'))
