"""People: creating users, checking a password (werkzeug.security hashes), changing it, disabling a user."""

from __future__ import annotations

import re

import sqlalchemy as sa
from sqlalchemy.orm import Session
from werkzeug.security import check_password_hash, generate_password_hash

from app.models import User
from app.services.accounts import sessions

USERNAME_RE = re.compile(r"^[A-Za-z0-9_.@-]{1,100}$")
# Checked against when the user does not exist, so the response time does not reveal which names exist.
_DUMMY_HASH = generate_password_hash("not-a-real-password")


class UserError(ValueError):
    """A bad username or password, or a duplicate username."""


def create_user(session: Session, username: str, password: str, *, is_admin: bool = False) -> User:
    """Create and commit a user; raises UserError for a bad or taken name or a short password."""
    if not USERNAME_RE.match(username or ""):
        raise UserError("username must be 1-100 characters of letters, digits, _ . @ -")
    if len(password or "") < 8:
        raise UserError("password must be at least 8 characters")
    if session.scalar(sa.select(User.id).where(User.username == username)) is not None:
        raise UserError(f"user {username!r} already exists")
    user = User(username=username, password_hash=generate_password_hash(password), is_admin=is_admin)
    session.add(user)
    session.commit()
    return user


def authenticate_password(session: Session, username: str, password: str) -> User | None:
    """The active user when the password matches, else None."""
    # A name no user can have is not looked up (a NUL would be a database error on PostgreSQL).
    user = None if not USERNAME_RE.match(username or "") else session.scalar(
        sa.select(User).where(User.username == username))
    if user is None:
        check_password_hash(_DUMMY_HASH, password or "")
        return None
    if not check_password_hash(user.password_hash, password or "") or not user.is_active:
        return None
    return user


def find_user(session: Session, username: str) -> User:
    user = None if not USERNAME_RE.match(username or "") else session.scalar(
        sa.select(User).where(User.username == username))
    if user is None:
        raise UserError(f"user {username!r} does not exist")
    return user


def set_password(session: Session, user: User, password: str) -> int:
    """Change the password and end all of the user's sessions; commits. Returns the sessions ended."""
    if len(password or "") < 8:
        raise UserError("password must be at least 8 characters")
    user.password_hash = generate_password_hash(password)
    ended = sessions.end_all(session, user.id)
    session.commit()
    return ended


def set_active(session: Session, user: User, active: bool) -> int:
    """Enable or disable a user; disabling ends all their sessions (their tokens are refused while disabled).
    Commits; returns the sessions ended."""
    user.is_active = active
    ended = 0 if active else sessions.end_all(session, user.id)
    session.commit()
    return ended
