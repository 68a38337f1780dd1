"""Throwaway metadata databases for tests, on SQLite and PostgreSQL (migrated with Alembic, as in
production), and the session fixture shape every test package uses to make one per backend lazily.

Two isolation styles:

* ``MigratedDB``: one database per backend and session, migrated once; tests empty its tables
  afterwards (fast; the API and web tests).
* ``DatabaseFactory``: migrations run once into a template; each test gets its own copy (a file copy
  for SQLite, ``CREATE DATABASE ... TEMPLATE`` for PostgreSQL), for tests that scan every row
  (reconcile) or run worker processes against the database.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol, TypeVar

import sqlalchemy as sa

from app.db import make_engine, upgrade
from app.models import Base

PG_ADMIN_URL = os.environ.get("GOODPUT_TEST_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
BACKENDS = ("sqlite", "postgresql")


def pg_url(name: str) -> str:
    return sa.engine.make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)


def _admin() -> sa.Engine:
    return sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")


def _drop(names: list[str]) -> None:
    with _admin().connect() as conn:
        for name in names:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


class MigratedDB:
    """A throwaway database of one backend, migrated once with Alembic, dropped at the end."""

    def __init__(self, backend: str, workdir: Path) -> None:
        self.backend = backend
        if backend == "sqlite":
            self.url = f"sqlite:///{workdir / 'meta.sqlite'}"
        else:
            self.name = f"goodput_app_{uuid.uuid4().hex[:10]}"
            with _admin().connect() as conn:
                conn.execute(sa.text(f'CREATE DATABASE "{self.name}"'))
            self.url = pg_url(self.name)
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
                # AUTOINCREMENT counters survive DELETE; reset them as RESTART IDENTITY does on PostgreSQL.
                conn.execute(sa.text("DELETE FROM sqlite_sequence"))

    def close(self) -> None:
        self.engine.dispose()
        if self.backend == "postgresql":
            _drop([self.name])


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
            upgrade(pg_url(self.template))
            sa.engine.create_engine(pg_url(self.template)).dispose()

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
        return pg_url(db)

    def close(self) -> None:
        if self.backend == "postgresql":
            _drop(list(reversed(self.created)))


class _Closable(Protocol):
    def close(self) -> None: ...


T = TypeVar("T", bound=_Closable)


def per_backend(make: Callable[[str, Path], T], tmp_path_factory, prefix: str) -> Iterator[Callable[[str], T]]:
    """Body of a session fixture: yields ``get(backend)``, which makes one ``make(backend, workdir)`` per
    backend on first use; all are closed at the end of the session."""
    made: dict[str, T] = {}

    def get(backend: str) -> T:
        if backend not in made:
            made[backend] = make(backend, tmp_path_factory.mktemp(f"{prefix}-{backend}"))
        return made[backend]

    yield get
    for item in made.values():
        item.close()
