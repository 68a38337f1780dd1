"""Who is calling: bearer tokens for machines, server-side sessions for people (the signed cookie holds the
session's secret; with CSRF on unsafe methods)."""

from __future__ import annotations

import functools
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from flask import current_app, g, request, session

from app.db import get_session
from app.errors import ApiError
from app.models import SCOPES, User, utcnow
from app.services.accounts import sessions, tokens

F = TypeVar("F", bound=Callable[..., Any])
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_LEVEL = {scope: i for i, scope in enumerate(SCOPES)}  # read < write < admin


@dataclass(frozen=True)
class Principal:
    """An authenticated caller: a token (``kind='token'``) or a logged-in person (``kind='user'``)."""

    kind: str
    id: int
    name: str      # the person (a token's owner), else the service token's name; recorded as submitter
    scope: str
    user_id: int | None = None   # the person acted for; None for a service token

    def allows(self, scope: str) -> bool:
        return _LEVEL[self.scope] >= _LEVEL[scope]

    @property
    def is_admin(self) -> bool:
        return self.scope == "admin"

    @property
    def token_id(self) -> int | None:
        return self.id if self.kind == "token" else None

    def actor(self) -> tokens.Actor:
        return tokens.Actor(self.user_id, self.is_admin, self.token_id)


def _bearer() -> str | None:
    header = request.headers.get("Authorization")
    if header is None:
        return None
    kind, _, value = header.partition(" ")
    if kind.lower() != "bearer" or not value.strip():
        raise ApiError("UNAUTHORIZED", "The Authorization header must be 'Bearer <token>'.")
    return value.strip()


def _resolve() -> Principal | None:
    secret = _bearer()
    db = get_session()
    if secret is not None:
        found = tokens.lookup_token(db, secret)
        if found is None:
            raise ApiError("UNAUTHORIZED", "The token is invalid or has been revoked.")
        row = found.token
        current_app.extensions["goodput.token_usage"].note(row.id, row.last_used_at, utcnow())
        return Principal("token", row.id, found.username or row.name, row.scope, row.user_id)
    sid = session.get("sid")
    if sid is None:
        return None
    user = sessions.user_for(db, str(sid))
    if user is None:  # signed out elsewhere, expired, password changed or user disabled
        session.clear()
        return None
    return Principal("user", user.id, user.username, "admin" if user.is_admin else "write", user.id)


def current_principal() -> Principal | None:
    """The caller of this request, or None when anonymous. Raises ApiError(401) for a bad token."""
    if "_principal" not in g:
        g._principal = _resolve()
    return g._principal


def require_principal() -> Principal:
    """The caller of a request a scope check or sign-in already admitted (an anonymous one is a 401)."""
    principal = current_principal()
    if principal is None:
        raise ApiError("UNAUTHORIZED", "Sign in or send a bearer token.")
    return principal


def check_csrf() -> None:
    """A session-authenticated unsafe request must echo the session's CSRF token in X-CSRF-Token."""
    expected = session.get("csrf_token")
    sent = request.headers.get("X-CSRF-Token", "")
    if not expected or not hmac.compare_digest(str(expected), sent):
        raise ApiError("CSRF_FAILED", "Missing or wrong X-CSRF-Token header.")


def authorize(scope: str) -> Principal:
    """The caller, checked for ``scope``: 401 when anonymous, 403 when the scope is too small or CSRF fails."""
    principal = current_principal()
    if principal is None:
        raise ApiError("UNAUTHORIZED", "Authentication required: send 'Authorization: Bearer <token>'.")
    if principal.kind == "user" and request.method in UNSAFE_METHODS:
        check_csrf()
    if not principal.allows(scope):
        raise ApiError("FORBIDDEN", f"This needs the {scope!r} scope; the caller has {principal.scope!r}.")
    return principal


def require_scope(scope: str) -> Callable[[F], F]:
    """Decorator: the view runs only for a caller holding ``scope`` (see ``authorize``)."""
    if scope not in _LEVEL:
        raise ValueError(f"unknown scope {scope!r}")

    def decorate(view: F) -> F:
        @functools.wraps(view)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            authorize(scope)
            return view(*args, **kwargs)

        wrapper.required_scope = scope  # type: ignore[attr-defined]  # read by the OpenAPI generator
        return wrapper  # type: ignore[return-value]

    return decorate


def login_user(user: User) -> str:
    """Start a server-side session for ``user``; returns the new CSRF token (also in ``session['csrf_token']``)."""
    from app.settings import current_settings

    sid = sessions.start(get_session(), user, current_settings().session_lifetime_seconds)
    session.clear()
    session["sid"] = sid
    session["csrf_token"] = secrets.token_urlsafe(32)
    g.pop("_principal", None)
    return session["csrf_token"]


def logout_user() -> None:
    """End this browser's session on the server (a copied cookie stops working too) and clear the cookie."""
    sid = session.get("sid")
    if sid is not None:
        sessions.end(get_session(), str(sid))
    session.clear()
    g.pop("_principal", None)
