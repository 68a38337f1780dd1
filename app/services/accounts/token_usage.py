"""Tokens' last use, recorded off the request path: requests note it in memory, a background thread writes
the batch every few seconds, best-effort (a busy database only delays it). A read request never writes."""

from __future__ import annotations

import atexit
import logging
import os
import threading
import weakref
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from app.models import ApiToken

logger = logging.getLogger(__name__)

# Last use is shown to the minute; a token seen again sooner is not written again.
LAST_USED_RESOLUTION = timedelta(seconds=60)
FLUSH_INTERVAL_S = 5.0


class LastUseRecorder:
    """One per application (``app.extensions['goodput.token_usage']``); thread- and fork-safe."""

    def __init__(self, factory: sessionmaker[Session], interval_s: float = FLUSH_INTERVAL_S) -> None:
        self._factory = factory
        self._interval_s = interval_s
        self._pending: dict[int, datetime] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._closed = False
        # At exit, write what is pending; a weak reference, so apps built and dropped (tests) are not kept.
        ref = weakref.ref(self)

        def close_at_exit() -> None:
            recorder = ref()
            if recorder is not None:
                recorder.close()

        atexit.register(close_at_exit)

    def note(self, token_id: int, last_used_at: datetime | None, now: datetime) -> None:
        """Remember a use (no I/O); written by the next flush when the stored time is older than a minute."""
        if last_used_at is not None and now - last_used_at < LAST_USED_RESOLUTION:
            return
        with self._lock:
            if self._pending.get(token_id, now) <= now:
                self._pending[token_id] = now
            self._start()

    def _start(self) -> None:
        # After a fork (gunicorn workers) the parent's thread does not exist in the child: start our own.
        if self._closed or (self._thread is not None and self._pid == os.getpid() and self._thread.is_alive()):
            return
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._loop, name="goodput-token-usage", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._closed:
            self._wake.wait(self._interval_s)
            self._wake.clear()
            self.flush()

    def flush(self) -> int:
        """Write the pending uses in one transaction; on a database error keep them for the next try.
        Returns how many tokens were written."""
        with self._lock:
            batch, self._pending = self._pending, {}
        if not batch:
            return 0
        try:
            with self._factory() as session:
                for token_id, when in batch.items():
                    session.execute(sa.update(ApiToken).where(
                        ApiToken.id == token_id,
                        sa.or_(ApiToken.last_used_at.is_(None), ApiToken.last_used_at < when),
                    ).values(last_used_at=when))
                session.commit()
        except sa.exc.DBAPIError as exc:
            logger.warning("token last-use not recorded yet (%s); retrying later", type(exc.orig).__name__)
            with self._lock:
                for token_id, when in batch.items():
                    if self._pending.get(token_id, when) <= when:
                        self._pending[token_id] = when
            return 0
        return len(batch)

    def close(self) -> None:
        """Stop the thread and write what is pending (at exit, or when the app is disposed)."""
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        try:
            self.flush()
        except Exception:
            logger.debug("token last-use flush at exit failed", exc_info=True)
