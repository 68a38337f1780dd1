"""Browser-side protections of the UI: login-required pages, CSRF on forms, and the security headers."""

from __future__ import annotations

import functools
import hmac
import posixpath
import secrets
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

from flask import abort, redirect, request, session, url_for
from flask.wrappers import Response

from app.auth import current_principal
from app.text import has_control

F = TypeVar("F", bound=Callable[..., Any])

# No inline script or style attribute can run: every script is a file under /static, data comes
# through data-* attributes or JSON routes. 'unsafe-inline' styles are not allowed either.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'"
)


def csrf_token() -> str:
    """The session's CSRF token, created on first use (the login form needs one before any login)."""
    token = session.get("csrf_token")
    if not token:
        token = session["csrf_token"] = secrets.token_urlsafe(32)
    return token


def check_form_csrf() -> None:
    """Abort 400 unless the posted form (or the X-CSRF-Token header) carries the session's token."""
    expected = session.get("csrf_token")
    sent = request.form.get("csrf_token") or request.headers.get("X-CSRF-Token", "")
    if not expected or not hmac.compare_digest(str(expected), str(sent)):
        abort(400, description="The form expired or did not come from this site; reload the page and try again.")


def login_required(view: F) -> F:
    """Pages are for signed-in people; others are sent to the sign-in page and come back after."""

    @functools.wraps(view)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        principal = current_principal()
        if principal is None or principal.kind != "user":
            return redirect(url_for("web.login", next=request.full_path.rstrip("?")))
        if request.method == "POST":
            check_form_csrf()
        return view(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _local_path(target: str) -> bool:
    # Browsers drop tabs and newlines from URLs and read '\\' as '/': '/\t/evil' and '/\\evil' both become
    # '//evil', another host. So the target must be printable (it goes into a header), and its path, as sent
    # and decoded once or twice more, a plain one: one leading slash, no backslash or blank, no scheme or
    # host, unchanged by normalization ('..').
    if has_control(target) or any(c.isspace() for c in target):
        return False
    seen = target
    for _ in range(3):
        parts = urlsplit(seen)
        path = parts.path
        if (parts.scheme or parts.netloc or not seen.startswith("/") or seen.startswith("//") or "\\" in path
                or has_control(path) or any(c.isspace() for c in path)):
            return False
        normal = posixpath.normpath(path)
        if normal not in (path, path.rstrip("/")):
            return False
        decoded = unquote(seen)
        if decoded == seen:
            return True
        seen = decoded
    return False


def safe_next(target: str | None) -> str:
    """A local path to return to after login; anything else (other hosts, schemes, control characters,
    odd encodings) goes to the runs list, '/'."""
    if target and len(target) <= 2000 and _local_path(target):
        return target
    return url_for("web.runs")


def security_headers(response: Response) -> Response:
    response.headers.setdefault("Content-Security-Policy", CSP)
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("X-Frame-Options", "DENY")
    response.headers.setdefault("Referrer-Policy", "same-origin")
    return response
