"""Alembic environment: the URL comes from the Config (set by app.db) or from GOODPUT_* settings."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

from app.db import make_engine
from app.models import Base

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    if url:
        return url
    from app.settings import Settings

    return Settings.from_env().resolved_database_url


def run_migrations_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True,
                      render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def _foreign_keys_off(dbapi_conn, _record) -> None:
    dbapi_conn.execute("PRAGMA foreign_keys=OFF")


def run_migrations_online() -> None:
    engine = make_engine(_url())
    if engine.dialect.name == "sqlite":
        # Batch mode rebuilds a table (copy, drop, rename); with foreign keys on, dropping `runs` would
        # cascade-delete every report. This listener runs after make_engine's, which turns them on.
        sa.event.listen(engine, "connect", _foreign_keys_off)
    with engine.connect() as connection:
        # Batch mode: SQLite cannot ALTER most things in place.
        context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True,
                          compare_type=True)
        with context.begin_transaction():
            context.run_migrations()
        if engine.dialect.name == "sqlite":
            broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
            if broken:
                raise RuntimeError(f"foreign keys broken by a migration: {broken[:5]}")
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
