"""Browser-side protections of the UI: login-required pages, CSRF on forms, and the security headers."""

from __future__ import annotations

import functools
import hmac
import secrets
from collections.abc import Callable
from typing import Any, TypeVar

from flask import abort, redirect, request, session, url_for
from flask.wrappers import Response

from app.auth import current_principal

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


def safe_next(target: str | None) -> str:
    """A local path to return to after login; anything else (other hosts, schemes) goes to the runs list."""
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return url_for("web.runs")


def security_headers(response: Response) -> Response:
    response.headers.setdefault("Content-Security-Policy", CSP)
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("X-Frame-Options", "DENY")
    response.headers.setdefault("Referrer-Policy", "same-origin")
    return response
