"""Per-process resources of a worker: the metadata DB session factory and the lease heartbeat thread."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from sqlalchemy.orm import Session, sessionmaker

from app.db import engine_for, make_sessionmaker
from app.settings import Settings

logger = logging.getLogger(__name__)

# One engine per (process, database URL): prefork children must not share their parent's connections.
_factories: dict[tuple[int, str], sessionmaker[Session]] = {}
_lock = threading.Lock()


def session_factory(settings: Settings) -> sessionmaker[Session]:
    key = (os.getpid(), settings.resolved_database_url)
    with _lock:
        factory = _factories.get(key)
        if factory is None:
            factory = make_sessionmaker(engine_for(settings))
            _factories[key] = factory
        return factory


@contextmanager
def session_scope(settings: Settings) -> Iterator[Session]:
    """A session closed at the end of the block; pipeline functions commit what they change."""
    session = session_factory(settings)()
    try:
        yield session
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


class Heartbeat:
    """Renews a lease every third of its length while a long task runs, so only a dead worker loses it."""

    def __init__(self, settings: Settings, renew: Callable[[Session], bool]) -> None:
        self.settings = settings
        self.renew = renew
        self.interval = max(0.5, settings.lease_seconds / 3)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="lease-heartbeat", daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                with session_scope(self.settings) as session:
                    if not self.renew(session):
                        logger.warning("lease lost; another worker may take this job over")
                        return
            except Exception:  # a DB hiccup: try again next beat, the lease has slack
                logger.warning("lease renewal failed", exc_info=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def prune_delivered_messages(settings: Settings) -> int:
    """Delete messages kombu's SQLAlchemy transport has delivered; it keeps them forever otherwise.

    Safe at any time: a delivered row is never read again (acknowledgement lives in the consumer,
    and a rejected message is written back as a new row). A no-op on other brokers.
    """
    import sqlalchemy as sa

    url = settings.resolved_broker_url
    if not url.startswith("sqla+"):
        return 0
    engine = sa.create_engine(url.removeprefix("sqla+"), connect_args={"timeout": 30} if "sqlite" in url else {})
    try:
        with engine.begin() as conn:
            if not sa.inspect(conn).has_table("kombu_message"):
                return 0
            return conn.execute(sa.text("DELETE FROM kombu_message WHERE visible = :no"), {"no": False}).rowcount
    finally:
        engine.dispose()
