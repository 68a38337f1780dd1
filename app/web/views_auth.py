"""Sign-in, sign-out and the API tokens page."""

from __future__ import annotations

from flask import flash, redirect, render_template, request, url_for

from app.auth import current_principal, login_user, logout_user
from app.db import get_session
from app.models import SCOPES
from app.services import tokens as token_service
from app.services.users import authenticate_password
from app.web import bp
from app.web.security import check_form_csrf, login_required, safe_next


@bp.route("/login", methods=["GET", "POST"])
def login():
    error = None
    if request.method == "POST":
        check_form_csrf()
        user = authenticate_password(get_session(), request.form.get("username", ""), request.form.get("password", ""))
        if user is not None:
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
    created = None
    if request.method == "POST":
        action = request.form.get("action")
        try:
            if action == "create":
                scope = request.form.get("scope", "read")
                if scope == "admin" and current_principal().scope != "admin":
                    raise token_service.TokenError("only administrators can create admin tokens")
                created = token_service.create_token(db, request.form.get("name", ""), scope)
            elif action == "revoke":
                token_id = int(request.form.get("token_id", "0"))
                target = next((t for t in token_service.list_tokens(db) if t.id == token_id), None)
                if target is not None and target.scope == "admin" and current_principal().scope != "admin":
                    raise token_service.TokenError("only administrators can revoke admin tokens")
                row = token_service.revoke_token(db, token_id)
                flash(f"Token {row.name} ({row.prefix}…) revoked.")
                return redirect(url_for("web.tokens"))
        except (token_service.TokenError, ValueError) as exc:
            flash(str(exc), "error")
    return render_template("tokens.html", tokens=token_service.list_tokens(db), created=created, scopes=SCOPES)
