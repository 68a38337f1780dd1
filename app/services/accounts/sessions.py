"""Server-side web sessions: a row per signed-in browser, looked up (never written) on every request; sign-out,
a password change and disabling the user delete them."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.db import changed
from app.models import User, UserSession, utcnow


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def start(session: Session, user: User, lifetime_s: int, *, now: datetime | None = None) -> str:
    """Create and commit a session for ``user``; returns its secret (kept only in the signed cookie).

    The user's expired sessions are removed on the way (sign-in is a write anyway)."""
    now = now or utcnow()
    session.execute(sa.delete(UserSession).where(UserSession.user_id == user.id, UserSession.expires_at <= now))
    secret = secrets.token_urlsafe(32)
    session.add(UserSession(user_id=user.id, token_hash=_hash(secret), created_at=now,
                            expires_at=now + timedelta(seconds=lifetime_s)))
    session.commit()
    return secret


def user_for(session: Session, secret: str | None, *, now: datetime | None = None) -> User | None:
    """The active user of a live session, or None (unknown, ended, expired, or the user is disabled)."""
    if not secret:
        return None
    now = now or utcnow()
    return session.scalar(
        sa.select(User).join(UserSession, UserSession.user_id == User.id)
        .where(UserSession.token_hash == _hash(secret), UserSession.expires_at > now, User.is_active.is_(True)))


def end(session: Session, secret: str | None) -> None:
    """End one session (sign-out); commits."""
    if secret:
        session.execute(sa.delete(UserSession).where(UserSession.token_hash == _hash(secret)))
        session.commit()


def end_all(session: Session, user_id: int) -> int:
    """Delete every session of the user (no commit: part of the caller's change); returns how many."""
    return changed(session, sa.delete(UserSession).where(UserSession.user_id == user_id)) or 0
