"""Sign-in (throttled per user name and client address), sign-out (ends the server-side session) and the API
tokens page (each person manages their own tokens; admins all)."""

from __future__ import annotations

from flask import abort, flash, redirect, render_template, request, url_for

from app.auth import current_principal, login_user, logout_user, require_principal
from app.db import get_session
from app.ids import ascii_int
from app.models import SCOPES
from app.services.accounts import sign_in
from app.services.accounts import tokens as token_service
from app.services.accounts.users import authenticate_password
from app.settings import current_settings
from app.web import bp
from app.web.security import check_form_csrf, login_required, safe_next


def _limits() -> sign_in.Limits:
    s = current_settings()
    return sign_in.Limits(s.sign_in_max_failures, s.sign_in_max_failures_per_address, s.sign_in_window_seconds)


@bp.route("/login", methods=["GET", "POST"])
def login():
    error = None
    if request.method == "POST":
        check_form_csrf()
        db = get_session()
        username, address = request.form.get("username", ""), request.remote_addr or "unknown"
        limits = _limits()
        throttled = sign_in.reserve(db, limits, username, address)  # counted as a failure unless correct
        if throttled is not None:
            minutes = -(-throttled.retry_after_s // 60)
            who = "this account" if throttled.reason == "user" else "your address"
            error = (f"Too many failed sign-ins for {who}. Try again in {minutes} minute"
                     f"{'s' if minutes != 1 else ''}.")
            return (render_template("login.html", error=error), 429,
                    {"Retry-After": str(throttled.retry_after_s)})
        user = authenticate_password(db, username, request.form.get("password", ""))
        if user is not None:
            sign_in.clear_user(db, username)
            login_user(user)
            return redirect(safe_next(request.args.get("next")))
        error = "Unknown user or wrong password."
    elif (p := current_principal()) is not None and p.kind == "user":
        return redirect(safe_next(request.args.get("next")))
    return render_template("login.html", error=error), (401 if error else 200)


@bp.route("/logout", methods=["POST"])
def logout():
    check_form_csrf()
    logout_user()
    return redirect(url_for("web.login"))


@bp.route("/tokens", methods=["GET", "POST"])
@login_required
def tokens():
    db = get_session()
    principal = require_principal()
    actor = principal.actor()
    created = None
    status = 200
    if request.method == "POST":
        action = request.form.get("action")
        try:
            if action == "create":
                scope = request.form.get("scope", "read")
                if scope == "admin" and not principal.is_admin:
                    raise token_service.TokenForbidden("only administrators can create admin tokens")
                created = token_service.create_token(db, request.form.get("name", ""), scope,
                                                     user_id=principal.user_id)
            elif action == "revoke":
                try:
                    token_id = ascii_int(request.form.get("token_id", "0"))
                except ValueError:
                    abort(400, description="token_id must be an integer")
                row = token_service.revoke_token(db, token_id, actor)
                flash(f"Token {row.name} ({row.prefix}…) revoked.")
                return redirect(url_for("web.tokens"))
        except token_service.TokenForbidden as exc:
            flash(str(exc), "error")
            status = 403
        except token_service.TokenError as exc:
            flash(str(exc), "error")
            status = 400
    rows = token_service.list_tokens(db, actor)
    owners = token_service.owner_names(db, rows)
    return render_template("tokens.html", tokens=rows, owners=owners, created=created, scopes=SCOPES,
                           show_owner=principal.is_admin), status
