"""People (password login for the web UI) and API tokens (machines; only a SHA-256 hash is stored)."""

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
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class ApiToken(Base):
    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(100))
    scope: Mapped[str] = mapped_column(sa.String(10))
    token_hash: Mapped[str] = mapped_column(sa.String(64), unique=True)  # sha256 hex of the token
    prefix: Mapped[str] = mapped_column(sa.String(12))  # first characters, to recognise a token in lists
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
