"""People (password login for the web UI), their server-side sessions and failed sign-ins, and API tokens
(machines; only a SHA-256 hash is stored, as for sessions)."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base, UTCDateTime, utcnow

SCOPES = ("read", "write", "admin")


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(primary_key=True)
    username: Mapped[str] = mapped_column(sa.String(100), unique=True)
    password_hash: Mapped[str] = mapped_column(sa.String(300))  # werkzeug.security
    is_admin: Mapped[bool] = mapped_column(default=False)
    # A disabled user cannot sign in; their sessions are ended and their tokens refused.
    is_active: Mapped[bool] = mapped_column(default=True, server_default=sa.true())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class UserSession(Base):
    """A signed-in browser: the cookie holds a random secret whose hash is here; deleting the row ends it."""

    __tablename__ = "user_sessions"

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(sa.ForeignKey("users.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(sa.String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)


class SignInFailure(Base):
    """One wrong password (or unknown user name), counted per name and per client address to throttle."""

    __tablename__ = "sign_in_failures"
    __table_args__ = (
        sa.Index("ix_sign_in_failures_username_created_at", "username", "created_at"),
        sa.Index("ix_sign_in_failures_address_created_at", "address", "created_at"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    username: Mapped[str] = mapped_column(sa.String(100))
    address: Mapped[str] = mapped_column(sa.String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class ApiToken(Base):
    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(100))
    # The person the token acts for (runs it uploads are theirs); None: a service token only admins manage.
    user_id: Mapped[int | None] = mapped_column(sa.ForeignKey("users.id", ondelete="CASCADE"), index=True)
    scope: Mapped[str] = mapped_column(sa.String(10))
    token_hash: Mapped[str] = mapped_column(sa.String(64), unique=True)  # sha256 hex of the token
    prefix: Mapped[str] = mapped_column(sa.String(12))  # first characters, to recognise a token in lists
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
