"""Sign-in throttling: failed attempts are counted per user name and per client address in a sliding window;
past the limit the answer is 429 with the seconds until the oldest counted failure leaves the window."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.models import SignInFailure, utcnow
from app.text import printable


@dataclass(frozen=True)
class Limits:
    per_user: int
    per_address: int
    window_s: int


@dataclass(frozen=True)
class Throttled:
    """Why sign-in is refused for now and for how long."""

    reason: str          # 'user' | 'address'
    retry_after_s: int


def _key(username: str) -> str:
    return printable(username, 100)


def _wait(session: Session, column, value: str, limit: int, limits: Limits, now: datetime) -> int | None:
    # The limit-th most recent failure in the window: once it ages out, fewer than `limit` remain.
    since = now - timedelta(seconds=limits.window_s)
    edge = session.scalar(
        sa.select(SignInFailure.created_at).where(column == value, SignInFailure.created_at > since)
        .order_by(SignInFailure.created_at.desc()).offset(limit - 1).limit(1))
    if edge is None:
        return None
    return max(1, math.ceil((edge + timedelta(seconds=limits.window_s) - now).total_seconds()))


def throttled(session: Session, limits: Limits, username: str, address: str,
              *, now: datetime | None = None) -> Throttled | None:
    """Whether a sign-in attempt must be refused before the password is even checked (reads only)."""
    now = now or utcnow()
    waits = [("user", _wait(session, SignInFailure.username, _key(username), limits.per_user, limits, now)),
             ("address", _wait(session, SignInFailure.address, address[:64], limits.per_address, limits, now))]
    worst = max(((w, r) for r, w in waits if w is not None), default=None)
    return None if worst is None else Throttled(worst[1], worst[0])


def reserve(session: Session, limits: Limits, username: str, address: str,
            *, now: datetime | None = None) -> Throttled | None:
    """Count this attempt as a failure before its password is checked, unless the limit is reached (then the
    Throttled answer, nothing recorded); commits. Check and count are one step, serialized across requests:
    checked apart, 30 parallel attempts could all pass the check at 9 failures. A correct password then
    forgets the name's failures (``clear_user``), this one with them."""
    now = now or utcnow()
    # Take the write lock first: SQLite's DELETE does; PostgreSQL's transaction-scoped advisory lock does.
    if session.get_bind().dialect.name == "postgresql":
        session.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
    session.execute(sa.delete(SignInFailure).where(
        SignInFailure.created_at <= now - timedelta(seconds=limits.window_s)))
    refused = throttled(session, limits, username, address, now=now)
    if refused is None:
        session.add(SignInFailure(username=_key(username), address=address[:64], created_at=now))
    session.commit()
    return refused


# The advisory lock that serializes sign-in attempts on PostgreSQL (any constant; one lock for all names).
_LOCK_KEY = 0x676F6F64  # 'good'


def clear_user(session: Session, username: str) -> None:
    """A correct password forgets that name's failures (not the address's); commits."""
    session.execute(sa.delete(SignInFailure).where(SignInFailure.username == _key(username)))
    session.commit()
