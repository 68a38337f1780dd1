"""API tokens: created once (only the SHA-256 hash is stored), listed, revoked, and looked up by value."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.models import SCOPES, ApiToken, utcnow

TOKEN_PREFIX = "gp_"
# Writing last_used_at on every request would turn each read into a write; once a minute is enough.
LAST_USED_RESOLUTION = timedelta(seconds=60)


class TokenError(ValueError):
    """A bad scope or name, or an unknown token id."""


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class NewToken:
    """A freshly created token: ``token`` is the only time the secret is available."""

    id: int
    name: str
    scope: str
    token: str


def create_token(session: Session, name: str, scope: str) -> NewToken:
    """Create and commit a token; returns the secret, which is never stored."""
    if scope not in SCOPES:
        raise TokenError(f"scope must be one of {', '.join(SCOPES)}")
    name = (name or "").strip()
    if not 1 <= len(name) <= 100:
        raise TokenError("name must be 1-100 characters")
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ApiToken(name=name, scope=scope, token_hash=hash_token(secret), prefix=secret[:10])
    session.add(row)
    session.commit()
    return NewToken(row.id, row.name, row.scope, secret)


def list_tokens(session: Session) -> list[ApiToken]:
    return list(session.scalars(sa.select(ApiToken).order_by(ApiToken.id)))


def revoke_token(session: Session, token_id: int) -> ApiToken:
    row = session.get(ApiToken, token_id)
    if row is None:
        raise TokenError(f"token {token_id} does not exist")
    if row.revoked_at is None:
        row.revoked_at = utcnow()
        session.commit()
    return row


def lookup_token(session: Session, secret: str, *, now: datetime | None = None) -> ApiToken | None:
    """The live (not revoked) token with this secret, touching last_used_at; None when unknown."""
    if not secret:
        return None
    row = session.scalar(sa.select(ApiToken).where(ApiToken.token_hash == hash_token(secret)))
    if row is None or row.revoked_at is not None:
        return None
    now = now or utcnow()
    if row.last_used_at is None or now - row.last_used_at > LAST_USED_RESOLUTION:
        row.last_used_at = now
        session.commit()
    return row
