"""People: creating users and checking a password (werkzeug.security hashes)."""

from __future__ import annotations

import re

import sqlalchemy as sa
from sqlalchemy.orm import Session
from werkzeug.security import check_password_hash, generate_password_hash

from app.models import User

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
    """The user when the password matches, else None."""
    user = session.scalar(sa.select(User).where(User.username == username))
    if user is None:
        check_password_hash(_DUMMY_HASH, password or "")
        return None
    return user if check_password_hash(user.password_hash, password or "") else None


def get_user(session: Session, user_id: int) -> User | None:
    return session.get(User, user_id)
