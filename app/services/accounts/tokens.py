"""API tokens: created once (only the SHA-256 hash is stored), owned by a person (or by no one: a service token
only admins manage), listed and revoked by their owner or an admin, and looked up by value (a read: the last
use is recorded in the background by app.services.accounts.token_usage)."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.ids import valid_id
from app.models import SCOPES, ApiToken, User, utcnow
from app.text import has_control

TOKEN_PREFIX = "gp_"


class TokenError(ValueError):
    """A bad scope or name, or an unknown token id."""


class TokenForbidden(TokenError):
    """The caller may not manage this token (not theirs, and not an admin)."""


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class NewToken:
    """A freshly created token: ``token`` is the only time the secret is available."""

    id: int
    name: str
    scope: str
    token: str


@dataclass(frozen=True)
class Actor:
    """Who manages tokens: the person a caller acts for (None for a service token), whether they are an admin,
    and the calling token (None for a browser session)."""

    user_id: int | None
    is_admin: bool
    token_id: int | None = None


def create_token(session: Session, name: str, scope: str, *, user_id: int | None = None) -> NewToken:
    """Create and commit a token owned by ``user_id``; returns the secret, which is never stored."""
    if scope not in SCOPES:
        raise TokenError(f"scope must be one of {', '.join(SCOPES)}")
    if has_control(name or ""):
        raise TokenError("name must not contain control characters")
    name = (name or "").strip()
    if not 1 <= len(name) <= 100:
        raise TokenError("name must be 1-100 characters")
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ApiToken(name=name, scope=scope, token_hash=hash_token(secret), prefix=secret[:10], user_id=user_id)
    session.add(row)
    session.commit()
    return NewToken(row.id, row.name, row.scope, secret)


def list_tokens(session: Session, actor: Actor | None = None) -> list[ApiToken]:
    """Every token (``actor`` None: the CLI), else those ``actor`` may see: an admin all, a person their own,
    a service token itself."""
    query = sa.select(ApiToken).order_by(ApiToken.id)
    if actor is not None and not actor.is_admin:
        query = query.where(ApiToken.user_id == actor.user_id if actor.user_id is not None
                            else ApiToken.id == actor.token_id)
    return list(session.scalars(query))


def may_manage(actor: Actor, row: ApiToken) -> bool:
    if actor.is_admin:
        return True
    if actor.user_id is not None:
        return row.user_id == actor.user_id
    return actor.token_id is not None and row.id == actor.token_id


def revoke_token(session: Session, token_id: int, actor: Actor | None = None) -> ApiToken:
    """Revoke (idempotent, commits). TokenError when unknown; TokenForbidden when ``actor`` may not."""
    row = session.get(ApiToken, token_id) if valid_id(token_id) else None
    if row is None:
        raise TokenError(f"token {token_id} does not exist")
    if actor is not None and not may_manage(actor, row):
        raise TokenForbidden("only administrators can revoke tokens of others")
    if row.revoked_at is None:
        row.revoked_at = utcnow()
        session.commit()
    return row


@dataclass(frozen=True)
class TokenOwner:
    """A live token and the person it acts for (``username`` None for a service token)."""

    token: ApiToken
    username: str | None


def lookup_token(session: Session, secret: str) -> TokenOwner | None:
    """The live token with this secret whose owner (if any) is active; None otherwise. Reads only."""
    if not secret:
        return None
    row = session.execute(
        sa.select(ApiToken, User.username, User.is_active).outerjoin(User, User.id == ApiToken.user_id)
        .where(ApiToken.token_hash == hash_token(secret))).first()
    if row is None or row[0].revoked_at is not None or row[2] is False:
        return None
    return TokenOwner(row[0], row[1])


def token_to_dict(row: ApiToken, owner: str | None = None) -> dict:
    from app.services.reads.reports import iso

    return {"id": row.id, "name": row.name, "scope": row.scope, "prefix": row.prefix, "owner": owner,
            "created_at": iso(row.created_at), "last_used_at": iso(row.last_used_at),
            "revoked_at": iso(row.revoked_at)}


def owner_names(session: Session, rows: list[ApiToken]) -> dict[int | None, str]:
    ids = {r.user_id for r in rows if r.user_id is not None}
    if not ids:
        return {}
    return dict(session.execute(sa.select(User.id, User.username).where(User.id.in_(ids))).all())
