"""Engine and session factory of the metadata DB (SQLite with WAL and a busy timeout, or PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from app import finite_json
from app.settings import Settings


def _migrations_dir() -> Path:
    """migrations/ beside the package in a checkout, else the installed ``migrations`` package."""
    beside = Path(__file__).resolve().parents[1] / "migrations"
    if (beside / "env.py").is_file():
        return beside
    import importlib.util

    spec = importlib.util.find_spec("migrations")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("Alembic migrations not found: reinstall Goodput")
    return Path(next(iter(spec.submodule_search_locations)))


MIGRATIONS_DIR = _migrations_dir()
SQLITE_BUSY_TIMEOUT_MS = 30_000


class NotMigrated(RuntimeError):
    """The metadata DB is not at the migrations' head; the message gives the command to run."""


def _sqlite_pragmas(busy_timeout_ms: int):
    def on_connect(dbapi_conn, _record) -> None:
        # WAL lets readers (web) and the writer (workers) proceed together; the busy timeout turns
        # "database is locked" into a wait; foreign keys are off by default in SQLite.
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    return on_connect


def make_engine(url: str, *, lock_timeout_ms: int | None = None, **kwargs) -> sa.Engine:
    """An engine for ``url``; SQLite gets WAL, busy timeout and foreign keys on every connection.

    ``lock_timeout_ms`` bounds how long a statement waits for a lock (SQLite's busy timeout, PostgreSQL's
    lock_timeout); the web passes a short one so a held lock becomes a 503, not a tied-up worker.
    """
    # JSON columns hold what the service serializes: never NaN or Infinity (PostgreSQL refuses them, and on
    # SQLite they would make the stored text invalid JSON).
    kwargs.setdefault("json_serializer", finite_json.dumps)
    if url.startswith("sqlite"):
        path = sa.engine.make_url(url).database
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        busy = SQLITE_BUSY_TIMEOUT_MS if lock_timeout_ms is None else lock_timeout_ms
        engine = sa.create_engine(url, connect_args={"timeout": busy / 1000}, **kwargs)
        sa.event.listen(engine, "connect", _sqlite_pragmas(busy))
        return engine
    kwargs.setdefault("pool_pre_ping", True)
    kwargs.setdefault("pool_size", 10)
    kwargs.setdefault("max_overflow", 20)
    if lock_timeout_ms is not None:
        kwargs.setdefault("connect_args", {})["options"] = f"-c lock_timeout={int(lock_timeout_ms)}"
    return sa.create_engine(url, **kwargs)


def engine_for(settings: Settings, *, lock_timeout_ms: int | None = None) -> sa.Engine:
    return make_engine(settings.resolved_database_url, lock_timeout_ms=lock_timeout_ms)


def make_sessionmaker(engine: sa.Engine) -> sessionmaker[Session]:
    # expire_on_commit=False: services return objects whose attributes views read after commit.
    return sessionmaker(bind=engine, expire_on_commit=False)


@contextmanager
def session_scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session that is closed (rolled back if not committed) at the end of the block."""
    session = factory()
    try:
        yield session
    finally:
        session.close()


def alembic_config(url: str):
    """An Alembic Config for ``url`` that finds ``migrations/`` wherever we run from."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """Apply the migrations up to ``revision`` (what `goodput migrate` runs)."""
    from alembic import command

    if url.startswith("sqlite"):
        make_engine(url).dispose()  # creates the parent directory
    command.upgrade(alembic_config(url), revision)


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    heads = ScriptDirectory.from_config(alembic_config("sqlite://")).get_heads()
    if len(heads) != 1:
        raise RuntimeError(f"migrations have {len(heads)} heads; expected exactly one")
    return heads[0]


def current_revision(engine: sa.Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def check_migrated(engine: sa.Engine) -> None:
    """Raise NotMigrated naming the command to run when the DB is behind (or ahead of) the code."""
    current, head = current_revision(engine), head_revision()
    if current != head:
        raise NotMigrated(
            f"the metadata DB is at revision {current or 'none'}, the code needs {head}; "
            "run `goodput migrate` (same GOODPUT_DATABASE_URL) first"
        )


def changed(session: Session, statement: sa.Executable) -> int:
    """How many rows an UPDATE or DELETE changed: the row count a conditional update is won or lost by."""
    return cast("sa.CursorResult[Any]", session.execute(statement)).rowcount


def get_session() -> Session:
    """The current Flask request's session (opened on first use, closed at teardown)."""
    from flask import current_app, g

    session = g.get("_db_session")
    if session is None:
        from flask import has_request_context, request

        session = g._db_session = current_app.extensions["goodput.sessionmaker"]()
        if (has_request_context() and request.method in ("GET", "HEAD")
                and session.get_bind().dialect.name == "postgresql"):
            # Reads need no transaction: autocommit saves the BEGIN and ROLLBACK round trips, a third
            # of the database work of a list request. (Reads never write: a token's last use is recorded
            # in the background, app.services.accounts.token_usage.)
            session.connection(execution_options={"isolation_level": "AUTOCOMMIT"})
    return session


def close_request_session(_exc: BaseException | None = None) -> None:
    from flask import g

    session = g.pop("_db_session", None)
    if session is not None:
        session.close()
