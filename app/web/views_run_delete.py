"""Deleting a run from the UI: a confirmed, CSRF-checked form that calls the runs service, which
allows only the submitter or an admin; anyone else gets a 403 page inside the site's layout."""

from __future__ import annotations

from flask import flash, redirect, render_template, url_for

from app.auth import current_principal, require_principal
from app.db import get_session
from app.errors import ApiError
from app.services.jobs import runs as runs_service
from app.settings import current_settings
from app.web import bp
from app.web.security import login_required


@bp.app_template_global("may_delete_run")
def may_delete_run(run) -> bool:
    """Whether the signed-in person may delete ``run`` (the run page shows its Delete button only then)."""
    p = current_principal()
    return p is not None and runs_service.may_delete(run, user_id=p.user_id, token_id=p.token_id,
                                                     is_admin=p.is_admin)


@bp.route("/runs/<id:run_id>/delete", methods=["POST"])
@login_required
def delete_run(run_id: int):
    p = require_principal()
    try:
        runs_service.delete_run(get_session(), current_settings(), run_id, user_id=p.user_id,
                                token_id=p.token_id, is_admin=p.is_admin)
    except ApiError as exc:
        if exc.status in (403, 404):
            title = "Not allowed" if exc.status == 403 else "Not found"
            return render_template("error.html", title=title, message=exc.message), exc.status
        raise
    flash(f"Run #{run_id} deleted; its files will be purged.")
    return redirect(url_for("web.runs"))
